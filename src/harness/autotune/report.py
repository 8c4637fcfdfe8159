"""What autotune shows and writes: every point it tried with the stage that measured it, the
one verdict line, and autotune.json. The sweep's end and `harness-report DIR` both get here
through harness.sweep.report_cli (after the comparison table), from the job directories."""

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
    """autotune.json's body for the search of the sweep in `sweep_dir` (its run command:
    the command's own overrides, less the named sweep, and the winner's values)."""
    own = [o for o in setup.fixed if o.partition("=")[0].lstrip("+") != NAMED_SWEEP]
    return summary(search, {"fixed": own, "sweep_dir": str(sweep_dir),
                            "notes": setup.notes, "launcher": setup.launcher})


def write_summary(sweep_dir: Path, body: dict[str, Any]) -> Path:
    return write_json(Path(sweep_dir) / SUMMARY_FILE, body)


def rebuild(sweep_dir: Path, write: bool = True) -> dict[str, Any] | None:
    """The autotune verdict of `sweep_dir` rebuilt from its jobs: the points table and the
    verdict line on the terminal, autotune.json rewritten (unless `write` is false). None
    when the sweep is no autotune sweep."""
    sweep_dir = Path(sweep_dir)
    if not (sweep_dir / SPACE_FILE).is_file():
        return None
    search, setup = replay(sweep_dir)
    body = body_of(search, setup, sweep_dir)
    show_points(body)
    if write:
        write_summary(sweep_dir, body)
    show_verdict(body)
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

    def order(point: dict[str, Any]) -> tuple[int, float]:
        figure = point["figure"]
        return (0, -figure["examples_per_second"]) if figure and point["status"] == "ok" else (1, 0.0)

    for point in sorted(body["points"], key=order):
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


def show_verdict(body: dict[str, Any]) -> None:
    from harness.terminal import show

    verdict = line(body)
    colour = "green" if body["best"] is not None and body["status"] == "done" else "yellow"
    show(f"[bold {colour}]{_escape(verdict)}[/bold {colour}]")
    for note in body.get("notes") or []:
        log.info("autotune: %s", note)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def tracking_summary(body: dict[str, Any]) -> tuple[dict[str, str], dict[str, float],
                                                     dict[str, str]]:
    """autotune.json as the sweep's MLflow parent run records it: (params, metrics, tags).
    Params: the winner's value of each searched key (`autotune.best.<key>`) and the
    objective; metrics: the speed-up and its range, jobs, points, job-seconds, the largest
    batch that fits, the noise; tags: the verdict line, the status, the command to run."""
    params = {f"autotune.best.{k}": v for k, v in (body.get("best") or {}).items()}
    params["autotune.objective"] = str(body["objective"])
    speedup = body.get("speedup") or {}
    found = {"autotune_speedup": speedup.get("value"), "autotune_speedup_min": speedup.get("low"),
             "autotune_speedup_max": speedup.get("high"), "autotune_jobs": body["jobs"],
             "autotune_points": body["points_tried"], "autotune_grid_points": body["grid_points"],
             "autotune_job_seconds": body["job_seconds"], "autotune_noise": body["noise"],
             "autotune_largest_batch_that_fits": body["largest_batch_that_fits"]}
    metrics = {k: float(v) for k, v in found.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    tags = {"autotune.verdict": line(body)[:5000], "autotune.status": str(body["status"])}
    if body.get("command"):
        tags["autotune.command"] = str(body["command"])[:5000]
    return params, metrics, tags
