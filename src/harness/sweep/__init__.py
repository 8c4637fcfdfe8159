"""Sweeps: a multirun followed while it runs, and its comparison table, made at its end or by
`harness-report`.

- `named`: `sweep=NAME` options from sweeps/*.yaml
- `progress`: the sweep in progress in this process (`SweepInProgress`, `current()`): its
  directory, progress lines, comparison settings, verdict, and how it ends early
- `callbacks`: the Hydra callbacks (conf/config.yaml `hydra.callbacks`) that feed it
- `collect`: a sweep's job directories read back (each job's result.json figures)
- `table`: the comparison as data: points (seeds and rounds pooled as repeats), ratios,
  the best variant, memory headroom, and the one check of its `rows`, `baseline` and
  `repeat_keys` settings
- `verdict`: which samples count (not contended, not noisy), a point's band, and whether a
  ratio is real, the same or inconclusive
- `render`: the table as comparison.md, .csv, .json and on the terminal; `plot`: comparison.png
- `report_cli`: the `harness-report` command (`report_sweep`, which a sweep's end runs too);
  `diff`: its A/B comparison
"""
