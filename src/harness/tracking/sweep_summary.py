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
NOTE_TAG = "mlflow.note.content"  # the run's Description box in the UI (markdown)


def sweep_params(overrides: list[str], swept: dict[str, list[str]]) -> dict[str, str]:
    """Every key the sweep set: a swept key with its values ('2,4'), a fixed one with its value."""
    params = {key: ",".join(values) for key, values in swept.items()}
    for key, value in parse_overrides(overrides).items():
        params.setdefault(key, value)
    return {k: v[:MAX_PARAM_CHARS] for k, v in params.items()}


def best_and_baseline(comparison: dict[str, Any], sweep_dir: Path | None = None
                      ) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, tags): per phase the judge's fastest point with its band, its row's baseline and
    the speed-up over it (docs/tracking.md); an autotune sweep's best is autotune.json's."""
    metrics: dict[str, float] = {}
    tags: dict[str, str] = {}
    points = comparison.get("points") or []
    row_key = comparison.get("row_key")
    for phase, found in (comparison.get("fastest") or {}).items():
        rate, ratio = f"{phase}_examples_per_second", f"{phase}_speedup"
        best = next((p for p in points if p["variant"] == found.get("variant") and (
            row_key is None or str(p.get(row_key)) == found.get("row"))), {})
        metrics[f"best_{rate}"] = float(best.get(rate) or found["examples_per_second"])
        for end in ("low", "high"):
            if is_finite_number(found.get(end)):
                metrics[f"best_{rate}_{end}"] = float(found[end])
        tags[f"best_{phase}"] = found["point"] + ("" if found["decided"] else
                                                  f" (unproven: {found['why']})")
        base = next((p for p in points if p.get("baseline")
                     and (row_key is None or p.get(row_key) == best.get(row_key))), None)
        if base is None or not is_finite_number(base.get(rate)):
            continue
        metrics[f"baseline_{rate}"] = float(base[rate])
        if is_finite_number(best.get(ratio)):
            metrics[f"best_{ratio}"] = float(best[ratio])
        low, high = best.get(f"{ratio}_min"), best.get(f"{ratio}_max")
        if is_finite_number(low) and is_finite_number(high):
            metrics[f"best_{ratio}_min"], metrics[f"best_{ratio}_max"] = float(low), float(high)
            verdict = best.get(f"{ratio}_verdict")  # on the counted samples, where known
            within = verdict != "real" if verdict else best.get(f"{ratio}_within_spread")
            tags[f"best_{ratio}_noise"] = ("within noise: the samples overlap" if within
                                           else "beyond noise: the samples do not overlap")
        elif best is not base:
            tags[f"best_{ratio}_noise"] = "unknown: each point ran once (repeat=N measures it)"
    autotune = Path(sweep_dir or ".") / AUTOTUNE_FILE
    if sweep_dir is not None and autotune.is_file():
        params, metrics_, tags_ = tracking_summary(json.loads(autotune.read_text()))
        metrics.update(metrics_)
        tags.update({**tags_, **params})  # params of the parent run are set when it starts
    return metrics, tags


def tracking_summary(body: dict[str, Any]) -> tuple[dict[str, str], dict[str, float],
                                                     dict[str, str]]:
    """autotune.json as the sweep's parent run records it: (params, metrics, tags)."""
    from harness.autotune.verdict import line

    params = {f"autotune.best.{k}": v for k, v in (body.get("best") or {}).items()}
    params["autotune.objective"] = str(body["objective"])
    speedup = body.get("speedup") or {}
    winner = ((body.get("confirm") or {}).get("winner") or {}).get("examples_per_second")
    phase = {"training": "train", "inference": "inference"}.get(body["objective"], "both")
    found = {"autotune_speedup": speedup.get("value"), "autotune_speedup_min": speedup.get("low"),
             "autotune_speedup_max": speedup.get("high"), "autotune_jobs": body["jobs"],
             "autotune_points": body["points_tried"], "autotune_grid_points": body["grid_points"],
             "autotune_job_seconds": body["job_seconds"], "autotune_noise": body["noise"],
             "autotune_largest_batch_that_fits": body["largest_batch_that_fits"],
             f"best_{phase}_examples_per_second": winner}
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
