"""Leave-in instrumentation: marks in user code that cost nothing until a preset switches them on.

Nothing here imports torch, nvtx or line_profiler at import time; the presets
that switch a mark on import what it needs at that moment.
"""
