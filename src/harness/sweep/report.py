"""Build, write and print one sweep's comparison: what the callback and the CLI share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.sweep.collect import collect
from harness.sweep.table import Comparison, build


def report_sweep(sweep_dir: Path, rows: str | None = None, baseline: str | None = None,
                 plot: bool = True, write: bool = True, console: Any = None) -> Comparison:
    """comparison.* in `sweep_dir` (unless write=False) and the rich table on the terminal."""
    from rich.console import Console

    from harness.sweep import render

    console = console or Console()
    comparison = build(collect(sweep_dir), rows=rows, baseline=baseline)
    render.print_rich(comparison, console=console)
    if write:
        written = render.write_all(comparison, sweep_dir, plot=plot)
        console.print("[bold]comparison:[/bold] " + ", ".join(str(p) for p in written),
                      highlight=False)
    return comparison
