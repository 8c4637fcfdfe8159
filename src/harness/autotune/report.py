"""What autotune shows and writes: every point it tried, the verdict line, autotune.json. The
sweep's end and `harness-report DIR` both get here through harness.sweep.report_cli."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from harness.autotune.replay import SPACE_FILE, SUMMARY_FILE, Setup, replay
from harness.autotune.search import Search
from harness.autotune.verdict import line, summary
from harness.reports.files import write_json

log = logging.getLogger(__name__)
NAMED_SWEEP = "sweep"  # the config group of named sweeps (harness.sweep.named.GROUP)


def body_of(search: Search, setup: Setup, sweep_dir: Path) -> dict[str, Any]:
    """autotune.json's body for the search of the sweep in `sweep_dir`."""
    own = [o for o in setup.fixed if o.partition("=")[0].lstrip("+") != NAMED_SWEEP]
    return summary(search, {"fixed": own, "sweep_dir": str(sweep_dir),
                            "notes": setup.notes, "launcher": setup.launcher})


def write_summary(sweep_dir: Path, body: dict[str, Any]) -> Path:
    return write_json(Path(sweep_dir) / SUMMARY_FILE, body)


def rebuild(sweep_dir: Path, write: bool = True) -> dict[str, Any] | None:
    """The autotune verdict of `sweep_dir` rebuilt, shown and (`write`) written; None: no autotune."""
    sweep_dir = Path(sweep_dir)
    if not (sweep_dir / SPACE_FILE).is_file():
        return None
    from rich.markup import escape

    from harness.terminal import show

    search, setup = replay(sweep_dir)
    body = body_of(search, setup, sweep_dir)
    show_points(body)
    if write:
        write_summary(sweep_dir, body)
    colour = "green" if body["best"] is not None and body["status"] == "done" else "yellow"
    show(f"[bold {colour}]{escape(line(body))}[/bold {colour}]")
    for note in body.get("notes") or []:
        log.info("autotune: %s", note)
    return body


def show_points(body: dict[str, Any]) -> None:
    """Every point tried, fastest first, with the deepest stage that measured it."""
    from rich.table import Table

    from harness.config.sweep_keys import short_key, short_setting
    from harness.terminal import show

    table = Table(title=f"autotune: every point tried ({body['objective']} examples/s; compile"
                  f" charged over {body['settings']['planned_steps']} planned steps)")
    for column in ("point", "stage", "jobs", "ex/s", "range", "note"):
        table.add_column(column, justify="right" if column in ("jobs", "ex/s", "range")
                         else "left")

    for point in sorted(body["points"], key=lambda p: (0, -p["figure"]["examples_per_second"])
                        if p["figure"] and p["status"] == "ok" else (1, 0.0)):  # fastest first
        figure, values = point["figure"], point["candidate"]
        notes = [word for word, same in (("best", body["best"]), ("default", body["default"]))
                 if values == same]
        if point["status"] != "ok":
            notes.append(point["status"])
        elif figure and not figure["trusted"]:
            notes.append("untrusted: " + ", ".join(figure["why"]))
        label = " ".join(short_setting(short_key(k.lstrip("+")), v) for k, v in values.items())
        table.add_row(label, point["stage"], str(point["jobs"]),
                      f"{figure['examples_per_second']:,.0f}" if figure else "-",
                      f"{figure['low']:,.0f}-{figure['high']:,.0f}" if figure else "-",
                      ", ".join(notes))
    show(table)
