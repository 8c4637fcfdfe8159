"""Sweeps: named sweep presets, per-job isolation and repeats, and the comparison table."""
