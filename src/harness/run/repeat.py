"""`repeat=N`: what result.json says about N measurements of the same point in one job.

Each repetition builds a fresh model, data module and trainer from the same
config and seed, after `isolation.start_clean` (see harness.run.job). result.json
then holds the median of each metric in `metrics` (what tables and trackers read),
and every repetition's metrics plus their min and max under `repeats`.
"""

from __future__ import annotations

import statistics
from typing import Any

from harness.measured import is_finite_number
from harness.result.schema import Repeats


def summarize(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(median, min, max) of every numeric metric over the runs; others from the last run."""
    median: dict[str, Any] = {}
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    keys = [k for run in runs for k in run]
    for key in dict.fromkeys(keys):
        values = [run[key] for run in runs if is_finite_number(run.get(key))]
        if values:
            median[key] = statistics.median(values)
            low[key], high[key] = min(values), max(values)
        else:
            median[key] = runs[-1].get(key)
    return median, low, high


def repeats_record(requested: int, runs: list[dict[str, Any]]) -> tuple[dict[str, Any], Repeats]:
    """(metrics for result.json, its `repeats` block) from each repeat's metrics."""
    median, low, high = summarize(runs)
    return median, Repeats(
        requested=requested,
        completed=len(runs),
        what="metrics holds the median over the runs; min and max are their range",
        min=low,
        max=high,
        per_repeat=runs,
    )
