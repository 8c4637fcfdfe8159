"""The speed preset's tables on the terminal (and in the run's log)."""

from __future__ import annotations

from typing import Any


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def speed_table(preset: Any) -> Any:
    """One row per phase; a thin phase (too few measured steps) says so beside its steps."""
    from rich.table import Table

    table = Table(title=f"Speed (warm-up of {preset.warmup_steps} steps excluded; {preset.clock})")
    for column in ("phase", "steps", "s/iter", "median s", "p90 s", "examples/s", "between steps"):
        table.add_column(column, justify="left" if column == "phase" else "right")
    for phase, f in preset.phase_summaries().items():
        table.add_row(
            phase,
            f"{f['measured_steps']}{' (thin)' if f['thin'] else ''}",
            _fmt(f["seconds_per_iteration"], ".4f"),
            _fmt(f["median_step_s"], ".4f"),
            _fmt(f["p90_step_s"], ".4f"),
            _fmt(f["examples_per_second"], ".1f"),
            _fmt(f["between_steps_share"], ".1%"),
        )
    return table


def rank_table(preset: Any) -> list[Any]:
    """Multi-process runs: each rank's own figures, and their sum."""
    from rich.table import Table

    if preset.world_size <= 1:
        return []
    table = Table(title=f"Speed per rank ({preset.world_size} ranks; total = sum of ranks)")
    for column in ("phase", "rank", "steps", "s/iter", "examples/s"):
        table.add_column(column, justify="left" if column == "phase" else "right")
    for phase, f in preset.phase_summaries().items():
        for r in f["per_rank"]:
            table.add_row(phase, str(r["rank"]), str(r["measured_steps"]),
                          _fmt(r["seconds_per_iteration"], ".4f"),
                          _fmt(r["examples_per_second"], ".1f"))
        total = "total" if f["ranks_measured"] == preset.world_size else "rank 0 x world"
        table.add_row(phase, total, "", "", _fmt(f["examples_per_second"], ".1f"),
                      end_section=True)
    return [table]
