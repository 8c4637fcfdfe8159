"""With a sweep over batch_size: the largest batch that should fit, from memory vs batch.

Peak memory grows about linearly with the batch: a fixed part (weights, optimizer state,
the framework) plus a part per example. A straight line through a variant's measured
points (least squares, at least two batch sizes) gives both; the largest batch that keeps
10 % of the memory free is read off it. It is an estimate: fragmentation and kernels that
pick other algorithms at other sizes bend the line, so the next step is a run at that size.
"""

from __future__ import annotations

from typing import Any

from harness.measured import is_finite_number
from harness.sweep.points import USABLE

KEEP_FREE = 0.10


def _line(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """(intercept, slope) of the least-squares line, None when it cannot be fitted."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return mean_y - slope * mean_x, slope


def largest_batches(comparison: Any) -> dict[str, dict[str, Any]]:
    """Variant -> per-example bytes, fixed bytes and the largest batch_size that should fit."""
    capacity = comparison.context.get("memory_bytes")
    if comparison.row_key != "batch_size" or not capacity:
        return {}
    found = {}
    for label in comparison.variants:
        rows = comparison.points[(comparison.points["variant"] == label)
                                 & comparison.points["status"].isin(USABLE)]
        pairs = [(float(r["row"]), float(r["peak_memory_bytes"])) for _, r in rows.iterrows()
                 if is_finite_number(r["peak_memory_bytes"]) and str(r["row"]).isdigit()]
        line = _line(*map(list, zip(*pairs, strict=True))) if len(pairs) >= 2 else None
        if line is None or line[1] <= 0:
            continue
        fixed, per_example = line
        fits = int(((1 - KEEP_FREE) * capacity - fixed) // per_example)
        found[label] = {"bytes_per_example": per_example, "fixed_bytes": fixed,
                        "largest_batch_size": max(fits, 0), "capacity_bytes": capacity,
                        "measured_batch_sizes": sorted(int(x) for x, _ in pairs)}
    return found


def headroom_lines(comparison: Any) -> list[str]:
    """One line per variant for the table's legend."""
    lines = []
    memory = "GPU memory" if comparison.context.get("accelerator") == "cuda" else "RAM"
    for label, fit in largest_batches(comparison).items():
        name = f" ({label})" if len(comparison.variants) > 1 else ""
        lines.append(
            f"Memory headroom{name}: about {fit['bytes_per_example'] / 2**20:.1f} MiB per"
            f" example over {fit['fixed_bytes'] / 2**30:.2f} GiB fixed, so batch_size up to"
            f" ~{fit['largest_batch_size']:,} should fit in the {memory}'s"
            f" {fit['capacity_bytes'] / 2**30:.0f} GiB ({KEEP_FREE:.0%} kept free; a straight"
            f" line through batch sizes {fit['measured_batch_sizes']}: run that size to check)")
    return lines
