"""Sweeps: a multirun followed while it runs (`progress`, `callbacks`), and its comparison, built
(`table`) and written (`render`, `plot`) at its end or by `harness-report` (`report_cli`)."""
