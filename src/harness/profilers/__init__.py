"""Profiler presets: each one a Lightning Callback or Profiler built from conf/profiler/."""
