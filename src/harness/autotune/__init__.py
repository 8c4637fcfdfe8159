"""`harness -m sweep=autotune`: the fastest setting that fits, and how sure that is (docs/autotune.md)."""
