"""harness: config-first profiling and benchmarking for PyTorch Lightning training; the public
names load on first use."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["ProfileSession", "annotate", "profile"]


def __getattr__(name: str) -> Any:
    if name == "annotate":
        from harness.instrument.annotate import annotate as found
    elif name == "profile":
        from harness.instrument.line_profile import profile as found
    elif name == "ProfileSession":
        from harness.session import ProfileSession as found
    else:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    globals()[name] = found  # later lookups are plain attribute reads, not this function
    return found
