"""What autotune shows and writes: every point it tried, the verdict line, autotune.json. The
sweep's end and `harness-report DIR` both get here through harness.sweep.report_cli."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from harness.autotune.knowledge import PROBE_STAGES, stage_rank
from harness.autotune.plot import MEMORY_PNG, point_label, write_memory_png
from harness.autotune.replay import SPACE_FILE, SUMMARY_FILE, Setup, replay
from harness.autotune.search import Search
from harness.autotune.verdict import line, summary
from harness.measured import MIB
from harness.reports.files import write_json
from harness.result.jobs import sweep_setting
from harness.terminal import show

log = logging.getLogger(__name__)
NAMED_SWEEP = "sweep"  # the config group of named sweeps (harness.sweep.named.GROUP)


def write_summary(search: Search, setup: Setup, sweep_dir: Path, write: bool = True) -> dict[str, Any]:
    """autotune.json's body for the search of the sweep in `sweep_dir`, written there (`write`)."""
    own = [o for o in setup.fixed if o.partition("=")[0].lstrip("+") != NAMED_SWEEP]
    body = summary(search, {"fixed": own, "sweep_dir": str(sweep_dir), "notes": setup.notes,
                            "launcher": setup.launcher})
    if write:
        write_json(Path(sweep_dir) / SUMMARY_FILE, body)
    return body


def rebuild(sweep_dir: Path, write: bool = True, plot: bool = True) -> dict[str, Any] | None:
    """The autotune verdict of `sweep_dir` rebuilt, shown, and (`write`) written with its plot (unless
    `plot` is off, or the sweep turned it off); None: none."""
    sweep_dir = Path(sweep_dir)
    if not (sweep_dir / SPACE_FILE).is_file():
        return None
    from rich.markup import escape

    body = write_summary(*replay(sweep_dir), sweep_dir, write)
    show_points(body)
    plots = plot and sweep_setting(sweep_dir, "hydra.callbacks.sweep_report.plot") is not False
    if write and plots and (png := write_memory_png(body, sweep_dir / MEMORY_PNG)):
        show(f"[bold]autotune:[/bold] {png}")
    colour = "green" if body["best"] is not None and body["status"] == "done" else "yellow"
    show(f"[bold {colour}]{escape(line(body))}[/bold {colour}]")
    for note in filter(None, [*(body.get("notes") or []), body["memory"]["note"]]):
        log.info("autotune: %s", note)
    return body


def show_points(body: dict[str, Any]) -> None:
    """Every point tried with its figure: the deepest stage that ranked it (confirm aside), its
    jobs there, its peak memory. The deepest stage first (its points ran side by side), then
    fastest first: figures of different stages, minutes apart, are not set against each other."""
    from rich.table import Table

    recipe = body.get("global_batch")
    at = (f" at global_batch_size={recipe['global_batch_size']}, micro-batch x accumulation"
          + (f" x {recipe['world_size']} ranks" if recipe["world_size"] > 1 else "")
          if recipe else "")
    sources = sorted({p["memory_source"] for p in body["points"] if p.get("memory_source")})
    table = Table(title=f"autotune: every point tried{at} ({body['objective']} examples/s;"
                  f" compile charged over {body['settings']['planned_steps']} planned steps)",
                  caption=f"peak MiB: {' / '.join(sources)}, the largest of the point's jobs"
                  if sources else None)
    for column in ("point", "stage", "jobs", "ex/s", "range", "peak MiB", "note"):
        table.add_column(column, justify="left" if column in ("point", "stage", "note") else "right")

    def order(point: dict[str, Any]) -> tuple[int, int, float]:  # failures last
        measured = point["figure"] and point["status"] in ("ok", "tight")
        depth = 0 if point["stage"] in PROBE_STAGES else stage_rank(point["stage"])  # probes pool
        return (0, -depth, -point["figure"]["examples_per_second"]) if measured else (1, 0, 0.0)

    for point in sorted(body["points"], key=order):
        figure, values = point["figure"], point["candidate"]
        notes = [word for word, same in (("best", body["best"]), ("default", body["default"]))
                 if values == same]
        if point["status"] != "ok":
            notes.append(point["status"])
        elif figure and not figure["trusted"]:
            notes.append("untrusted: " + ", ".join(figure["why"]))
        peak = point.get("peak_memory_bytes")
        table.add_row(point_label(values, recipe), point["stage"],
                      str(figure["jobs"] if figure else point["jobs"]),
                      f"{figure['examples_per_second']:,.0f}" if figure else "-",
                      f"{figure['low']:,.0f}-{figure['high']:,.0f}" if figure else "-",
                      f"{peak / MIB:,.0f}" if peak is not None else "-", ", ".join(notes))
    show(table)
