"""The text of one cell of the comparison: a value with its spread, a ratio, or why there is none."""

from __future__ import annotations

from typing import Any

from harness.measured import is_finite_number
from harness.sweep.table import DEFAULT, Comparison

CELL_FOR_STATUS = {
    "oom": "OOM",
    "failed": "failed",
    "interrupted": "interrupted",
    "missing": "no result",
    "unreadable": "unreadable",
}
MIB = 2**20


def _spread_suffix(point: Any, metric: str) -> str:
    if point["samples"] <= 1:
        return ""
    lo, hi, mid = point[f"{metric}_min"], point[f"{metric}_max"], point[metric]
    if not (is_finite_number(lo) and is_finite_number(hi) and is_finite_number(mid)) or mid == 0:
        return ""
    return f" ±{(hi - lo) / 2 / mid:.0%}"


def missing_cell(point: Any) -> str | None:
    """What a cell shows when its job has no value: '-' (no job) or its status (OOM, failed)."""
    if point is None:
        return "-"
    if point["status"] != "ok":
        return CELL_FOR_STATUS.get(point["status"], str(point["status"]))
    return None


def value_cell(point: Any, metric: str) -> str:
    """A metric's cell: the value (with its spread when repeated), or why there is none."""
    missing = missing_cell(point)
    if missing is not None:
        return missing
    value = point[metric]
    if not is_finite_number(value):
        return "-"
    if metric == "peak_memory_bytes":
        text = f"{value / MIB:.0f}"
    elif metric.endswith("seconds_per_iteration"):
        text = f"{value:.4f}"
    else:
        text = f"{value:.1f}"
    return text + _spread_suffix(point, metric)


def ratio_cell(point: Any, ratio: str) -> str:
    missing = missing_cell(point)
    if missing is not None:
        return missing
    value = point[ratio]
    if not is_finite_number(value):
        return "-"
    flag = point[f"{ratio}_within_spread"]
    return f"{value:.2f}x" + ("*" if flag is True else "")


def _numeric(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def short_label(comparison: Comparison, label: str) -> str:
    """'precision=bf16, compile=true' -> 'bf16 compile=true': bare words stand alone."""
    if not comparison.variant_keys:
        return ""
    parts = []
    for part in label.split(", "):
        key, _, value = part.partition("=")
        bare = not _numeric(value) and value.lower() not in (
            "true", "false", "null", "none") and value != DEFAULT
        parts.append(value if bare else f"{key}={value}")
    return " ".join(parts)
