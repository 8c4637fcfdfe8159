"""What a sweep's parent run shows at a glance: its settings as params, its best and baseline
figures as metrics, and its table as the run's description.

Params carry the same names as the children's (`batch_size`), so the UI's column of a swept
key reads `2,4` on the parent and `2`, `4` on its children. The figures come from
comparison.json, so they are the table's numbers, with the table's noise verdicts: the best
is a point the table marks `best` (beyond the noise of its row, every point of the row on
counted samples), never the fastest of a contended or noisy row.
"""

from __future__ import annotations

from typing import Any

from harness.config.overrides import parse_overrides
from harness.measured import MAIN_PHASES, USABLE, is_finite_number
from harness.tracking.run_facts import MAX_PARAM_CHARS, MAX_TAG_CHARS

NOTE_TAG = "mlflow.note.content"  # the run's Description box in the UI (markdown)


def sweep_params(overrides: list[str], swept: dict[str, list[str]]) -> dict[str, str]:
    """Every key the sweep set: a swept key with its values ('2,4'), a fixed one with its value."""
    params = {key: ",".join(values) for key, values in swept.items()}
    for key, value in parse_overrides(overrides).items():
        params.setdefault(key, value)
    return {k: v[:MAX_PARAM_CHARS] for k, v in params.items()}


def _where(point: dict[str, Any], comparison: dict[str, Any]) -> str:
    keys = ([comparison["row_key"]] if comparison.get("row_key") else [])
    return ", ".join([*(f"{k}={point.get(k)}" for k in keys), point["variant"]])


NO_BEST = ("none: no variant is beyond the noise of the others in its row (or a point of"
           " every row is contended or noisy, or ran once); see the table")


def best_and_baseline(comparison: dict[str, Any]) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, tags) per phase: the examples/s of the fastest point the table marks best,
    the baseline's in that row, the speed-up between them with its range over the samples,
    and where the best ran. A phase whose table marks no best gets the tag `best_<phase>` =
    NO_BEST and no figures."""
    metrics: dict[str, float] = {}
    tags: dict[str, str] = {}
    points = comparison.get("points") or []
    row_key = comparison.get("row_key")
    for phase in MAIN_PHASES:
        rate = f"{phase}_examples_per_second"
        usable = [p for p in points if p["status"] in USABLE and is_finite_number(p.get(rate))]
        if not usable:
            continue
        marked = [p for p in usable if p.get(f"{phase}_best") is True]
        if not marked:
            tags[f"best_{phase}"] = NO_BEST
            continue
        best = max(marked, key=lambda p: p[rate])
        metrics[f"best_{rate}"] = float(best[rate])
        tags[f"best_{phase}"] = _where(best, comparison)
        base = next((p for p in usable if p.get("baseline")
                     and (row_key is None or p.get(row_key) == best.get(row_key))), None)
        if base is None:
            continue
        metrics[f"baseline_{rate}"] = float(base[rate])
        ratio = f"{phase}_speedup"
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
    return metrics, tags


def note(markdown: str, limit: int = MAX_TAG_CHARS) -> str:
    """The comparison as the parent run's description, cut to what a tag holds."""
    if len(markdown) <= limit:
        return markdown
    tail = "\n\n(cut here: the whole table is the run's comparison.md artifact)"
    return markdown[:limit - len(tail)] + tail
