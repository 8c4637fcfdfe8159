"""The text of one cell of the comparison: a value with its spread, a ratio, or why there is none."""

from __future__ import annotations

from typing import Any

from harness.config.sweep_keys import short_setting
from harness.measured import USABLE, is_finite_number
from harness.sweep.table import Comparison

CELL_FOR_STATUS = {
    "invalid": "invalid",
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


def _phase(metric: str) -> str | None:
    phase = metric.split("_", 1)[0]
    return phase if phase in ("train", "validation", "inference") else None


def missing_cell(point: Any, metric: str | None = None) -> str | None:
    """What a cell shows when there is no figure: '-' (no job), the job's status (OOM,
    failed, invalid: a knob did not take effect), or 'failed' for the phase of a partial job."""
    if point is None:
        return "-"
    if point["status"] not in USABLE:
        return CELL_FOR_STATUS.get(point["status"], str(point["status"]))
    phase = _phase(metric) if metric else None
    if phase and point.get(f"{phase}_error"):
        return "failed"
    return None


def _thin(point: Any, metric: str) -> str:
    """The cautions of a figure: `thin` (few measured steps), `NaN loss` (training)."""
    phase = _phase(metric)
    text = " thin" if phase and point.get(f"{phase}_thin") else ""
    return text + (" NaN loss" if phase and point.get(f"{phase}_nonfinite_loss") else "")


def value_cell(point: Any, metric: str) -> str:
    """A metric's cell: the value (with its spread when repeated), or why there is none."""
    missing = missing_cell(point, metric)
    if missing is not None:
        return missing
    value = point[metric]
    if isinstance(value, str):  # a column of words: a verdict, a reason
        return value
    if not is_finite_number(value):
        return "-"
    if metric.endswith("_flop_per_s"):
        return f"{value / 1e12:.3f}"
    if metric.endswith("_mfu"):
        return f"{value:.0%}"
    if metric == "peak_memory_bytes":
        return f"{value / MIB:.0f}" + _spread_suffix(point, metric)
    if metric.endswith("_share"):
        return f"{value:.0%}"
    text = f"{value:.4f}" if metric.endswith("seconds_per_iteration") else f"{value:.1f}"
    return text + _spread_suffix(point, metric) + _thin(point, metric)


def ratio_cell(point: Any, ratio: str) -> str:
    """A speed-up: the ratio, its range over the samples when repeated (* when that range
    holds 1.00x: within noise), and `thin` when either side rests on few steps."""
    missing = missing_cell(point, ratio)
    if missing is not None:
        return missing
    value = point[ratio]
    if not is_finite_number(value):
        return "-"
    text = f"{value:.2f}x"
    low, high = point.get(f"{ratio}_min"), point.get(f"{ratio}_max")
    if is_finite_number(low) and is_finite_number(high):
        text += f" ({low:.2f}-{high:.2f})" + ("*" if point[f"{ratio}_within_spread"] else "")
    return text + (" thin" if point.get(f"{ratio}_thin") else "")


def is_number(value: str) -> bool:
    """Whether a cell or sweep value reads as a number (the plot's x axis is numeric then)."""
    try:
        float(value)
    except ValueError:
        return False
    return True


def short_label(comparison: Comparison, label: str) -> str:
    """'precision=bf16, compile=true' -> 'bf16 compile=true': bare words stand alone."""
    if not comparison.variant_keys:
        return ""
    return " ".join(short_setting(*part.split("=", 1)) for part in label.split(", "))
