"""Build, write and show one sweep's comparison: what the callback and the CLI share."""

from __future__ import annotations

from pathlib import Path

from harness.sweep.collect import collect
from harness.sweep.table import Comparison, build


def report_sweep(sweep_dir: Path, rows: str | None = None, baseline: str | None = None,
                 plot: bool = True, write: bool = True) -> Comparison:
    """comparison.* in `sweep_dir` (unless write=False) and the tables on the terminal."""
    from harness.sweep import render
    from harness.terminal import show

    comparison = build(collect(sweep_dir), rows=rows, baseline=baseline)
    render.show_tables(comparison)
    if write:
        written = render.write_all(comparison, sweep_dir, plot=plot)
        show("[bold]comparison:[/bold] " + ", ".join(str(p) for p in written))
    return comparison
