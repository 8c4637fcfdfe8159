"""The `diagnose` preset: why a run is slow, with its evidence (docs/presets/diagnose.md).

- `preset`: DiagnosePreset, the Lightning callback: runs the passes after each phase was
  measured, and at the end turns them and the speed preset's figures into the diagnosis.
- `speed_of_light`: what each part of a step could do alone: the loader alone, the model
  alone on a resident batch (and its FLOPs, once), the run's state left as it was.
- `communication`: in multi-process runs, a few training steps under the torch profiler,
  split into compute, communication, their overlap and idle time.
- `findings`: from the figures to the step's shares, what it is bound by, ranked findings
  and the verdict line.
- `peak_flops`: the device's dense peak FLOP/s (Lightning's table and what it lacks): MFU's
  denominator.
"""
