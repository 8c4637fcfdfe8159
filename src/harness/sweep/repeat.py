"""`repeat=N`: measure the same point N times inside its job and keep every run.

Each repetition builds a fresh model, data module and trainer from the same
config and seed, after `isolation.start_clean`. result.json then holds the
median of each metric in `metrics` (what tables and trackers read), and every
repetition's metrics plus their min and max under `repeats`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from harness.config.checks import positive_int
from harness.sweep.isolation import start_clean


def read_repeat(cfg: Any) -> int:
    return positive_int("repeat", cfg.get("repeat", 1), 3, "a positive integer (runs of each point)")


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def summarize(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(median, min, max) of every numeric metric over the runs; others from the last run."""
    median: dict[str, Any] = {}
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    keys = [k for run in runs for k in run]
    for key in dict.fromkeys(keys):
        values = [run[key] for run in runs if _numeric(run.get(key))]
        if values:
            median[key] = statistics.median(values)
            low[key], high[key] = min(values), max(values)
        else:
            median[key] = runs[-1].get(key)
    return median, low, high


def run_repeated(
    cfg: Any, knobs: Any, record: Any, measure_once: Callable[[Any, Any, Any], None]
) -> None:
    """Call `measure_once(cfg, knobs, record)` `repeat` times from a clean state each time."""
    count = read_repeat(cfg)
    record.knobs["repeat"] = count
    runs: list[dict[str, Any]] = []
    try:
        for _ in range(count):
            record.metrics = {}
            record.details["isolation"] = start_clean()
            try:
                measure_once(cfg, knobs, record)
            finally:
                runs.append(dict(record.metrics))
    finally:
        if count > 1:
            median, low, high = summarize(runs)
            record.metrics = median
            record.details["repeats"] = {
                "requested": count,
                "completed": len(runs),
                "what": "metrics holds the median over the runs; min and max are their range",
                "min": low,
                "max": high,
                "per_repeat": runs,
            }
