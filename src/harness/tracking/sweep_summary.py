"""A sweep's parent run at a glance: its settings as params (named as the children's), the
fastest point and its figures from comparison.json and autotune.json (harness.judge's
decisions, marked unproven where undecided), and its table as the run's description."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.config.overrides import parse_overrides
from harness.measured import is_finite_number
from harness.tracking.store_access import MAX_PARAM_CHARS, MAX_TAG_CHARS

AUTOTUNE_FILE = "autotune.json"
SCALING_FILE = "scaling.json"
NOTE_TAG = "mlflow.note.content"  # the run's Description box in the UI (markdown)


def sweep_params(overrides: list[str], swept: dict[str, list[str]]) -> dict[str, str]:
    """Every key the sweep set: a swept key with its values ('2,4'), a fixed one with its value."""
    params = {key: ",".join(values) for key, values in swept.items()}
    for key, value in parse_overrides(overrides).items():
        params.setdefault(key, value)
    return {k: v[:MAX_PARAM_CHARS] for k, v in params.items()}


def best_and_baseline(comparison: dict[str, Any], sweep_dir: Path | None = None
                      ) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, tags) of the parent run (docs/tracking.md): an autotune sweep's are its verdict
    (autotune.json: the winner, its speed-up over the default and that interval); else, per phase,
    the table's fastest point (harness.judge's figure and band, marked unproven where undecided),
    its row's baseline and the judge's verdict of the speed-up over it."""
    autotune = Path(sweep_dir) / AUTOTUNE_FILE if sweep_dir is not None else None
    if autotune is not None and autotune.is_file():
        params, metrics, tags = tracking_summary(json.loads(autotune.read_text()))
        return metrics, {**tags, **params}  # params of the parent run are set when it starts
    metrics: dict[str, float] = {}
    tags: dict[str, str] = {}
    scaling = Path(sweep_dir) / SCALING_FILE if sweep_dir is not None else None
    if scaling is not None and scaling.is_file():
        metrics, tags = scaling_summary(json.loads(scaling.read_text()))
    points = comparison.get("points") or []
    row_key = comparison.get("row_key")
    for phase, found in (comparison.get("fastest") or {}).items():
        rate, ratio = f"{phase}_examples_per_second", f"{phase}_speedup"
        metrics[f"best_{rate}"] = float(found["examples_per_second"])
        metrics.update({f"best_{rate}_{end}": float(found[end]) for end in ("low", "high")
                        if is_finite_number(found.get(end))})
        tags[f"best_{phase}"] = found["point"] + ("" if found["decided"] else f" (unproven: {found['why']})")
        best = next((p for p in points if p["variant"] == found.get("variant") and (
            row_key is None or str(p.get(row_key)) == found.get("row"))), {})
        base = next((p for p in points if p.get("baseline")
                     and (row_key is None or p.get(row_key) == best.get(row_key))), None)
        if base is None or not is_finite_number(base.get(rate)):
            continue
        metrics[f"baseline_{rate}"] = float(base[rate])
        metrics.update({f"best_{ratio}{end}": float(best[f"{ratio}{end}"]) for end in ("", "_min", "_max")
                        if is_finite_number(best.get(f"{ratio}{end}"))})
        if best.get(f"{ratio}_verdict"):
            tags[f"best_{ratio}_verdict"] = str(best[f"{ratio}_verdict"])
    return metrics, tags


def scaling_summary(body: dict[str, Any]) -> tuple[dict[str, float], dict[str, str]]:
    """scaling.json as the parent run's metrics, one per world size (`scaling_speedup_4ranks`),
    and a tag naming each world size's late rank."""
    metrics: dict[str, float] = {}
    tags = {"scaling.mode": str(body.get("mode"))}
    for point in body.get("points", []):
        n = point["world_size"]
        for key in ("examples_per_second", "speedup", "efficiency", "serial_fraction"):
            if is_finite_number(point.get(key)):
                metrics[f"scaling_{key}_{n}ranks"] = float(point[key])
        for key, ends in (("speedup", point.get("speedup_ci")), ("efficiency", point.get("efficiency_ci"))):
            if ends:
                metrics[f"scaling_{key}_min_{n}ranks"], metrics[f"scaling_{key}_max_{n}ranks"] = ends
        if point.get("straggler"):
            late = point["straggler"]
            tags[f"scaling.straggler_{n}ranks"] = (f"rank {late['rank']} ({late['node']}),"
                                                   f" {late['wait_s']:.4f} s, {late['late_in']}")
    return metrics, tags


def tracking_summary(body: dict[str, Any]) -> tuple[dict[str, str], dict[str, float], dict[str, str]]:
    """autotune.json as the sweep's parent run records it: (params, metrics, tags), the
    best_<phase>_* names of any sweep's parent run carrying autotune's own figures."""
    from harness.autotune.verdict import line

    params = {f"autotune.best.{k}": v for k, v in (body.get("best") or {}).items()}
    params["autotune.objective"] = str(body["objective"])
    speedup = body.get("speedup") or {}
    confirm = body.get("confirm") or {}
    phase = {"training": "train", "inference": "inference"}.get(body["objective"], "both")
    found = {"autotune_jobs": body["jobs"],
             "autotune_points": body["points_tried"], "autotune_grid_points": body["grid_points"],
             "autotune_job_seconds": body["job_seconds"], "autotune_noise": body["noise"],
             "autotune_largest_batch_that_fits": body["largest_batch_that_fits"],
             f"best_{phase}_examples_per_second": (confirm.get("winner") or {}).get("examples_per_second"),
             f"baseline_{phase}_examples_per_second": (confirm.get("default") or {}).get(
                 "examples_per_second"),
             f"best_{phase}_speedup": speedup.get("value"), f"best_{phase}_speedup_min": speedup.get("low"),
             f"best_{phase}_speedup_max": speedup.get("high")}
    metrics = {k: float(v) for k, v in found.items() if is_finite_number(v)}
    tags = {"autotune.verdict": line(body)[:MAX_TAG_CHARS], "autotune.status": str(body["status"])}
    if body.get("command"):
        tags["autotune.command"] = str(body["command"])[:MAX_TAG_CHARS]
    if body.get("best"):
        notes = [n for n, on in (("a tie", body.get("tie")),
                                 ("the default stands", body.get("default_stands"))) if on]
        tags[f"best_{phase}"] = " ".join(f"{k}={v}" for k, v in body["best"].items()) + (
            f" ({'; '.join(notes)})" if notes else "")
    return params, metrics, tags


def note(markdown: str, limit: int = MAX_TAG_CHARS) -> str:
    """The comparison as the parent run's description, cut to what a tag holds."""
    if len(markdown) <= limit:
        return markdown
    tail = "\n\n(cut here: the whole table is the run's comparison.md artifact)"
    return markdown[:limit - len(tail)] + tail
