"""With a sweep over batch_size: the largest batch that should fit, from memory vs batch.

Peak memory grows about linearly with the batch: a fixed part (weights, optimizer state,
the framework) plus a part per example. A straight line through a variant's measured
points (least squares, at least two batch sizes) gives both; the largest batch that keeps
10 % of the memory free is read off it. It is an estimate: fragmentation and kernels that
pick other algorithms at other sizes bend the line, so the next step is a run at that size.

No estimate is given where the line is noise: when memory grows over the measured batch
sizes by less than 3x the spread between a point's repeated samples, or by less than 5 %
of the memory used (on a CPU the process RSS, mostly libraries and the allocator's pool,
hides what a batch adds). Past MAX_EXTRAPOLATION x the largest measured batch the figure
is only a lower bound.
"""

from __future__ import annotations

from typing import Any

from harness.measured import USABLE, is_finite_number

KEEP_FREE = 0.10
MIN_GROWTH_OVER_NOISE = 3.0
MIN_GROWTH_SHARE = 0.05
MAX_EXTRAPOLATION = 4


def _line(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """(intercept, slope) of the least-squares line, None when it cannot be fitted."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return mean_y - slope * mean_x, slope


def _noise(rows: Any) -> float:
    """The widest min..max of peak memory over a point's samples (0 when each ran once)."""
    widths = [float(r["peak_memory_bytes_max"]) - float(r["peak_memory_bytes_min"])
              for _, r in rows.iterrows()
              if is_finite_number(r.get("peak_memory_bytes_max"))
              and is_finite_number(r.get("peak_memory_bytes_min"))]
    return max(widths, default=0.0)


def largest_batches(comparison: Any) -> dict[str, dict[str, Any]]:
    """Variant -> per-example bytes, fixed bytes and the largest batch_size that should fit
    (`at_least`: only a lower bound, the line extrapolated past MAX_EXTRAPOLATION x)."""
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
        sizes = sorted(int(x) for x, _ in pairs)
        growth = per_example * (sizes[-1] - sizes[0])
        if (growth < MIN_GROWTH_OVER_NOISE * _noise(rows)
                or growth < MIN_GROWTH_SHARE * max(y for _, y in pairs)):
            continue
        fits = max(int(((1 - KEEP_FREE) * capacity - fixed) // per_example), 0)
        cap = MAX_EXTRAPOLATION * sizes[-1]
        found[label] = {"bytes_per_example": per_example, "fixed_bytes": fixed,
                        "largest_batch_size": min(fits, cap), "at_least": fits > cap,
                        "capacity_bytes": capacity, "measured_batch_sizes": sizes}
    return found


def headroom_lines(comparison: Any) -> list[str]:
    """One line per variant for the table's legend."""
    lines = []
    memory = "GPU memory" if comparison.context.get("accelerator") == "cuda" else "RAM"
    for label, fit in largest_batches(comparison).items():
        name = f" ({label})" if len(comparison.variants) > 1 else ""
        size = (f"at least {fit['largest_batch_size']:,} (as far as the line is trusted:"
                f" {MAX_EXTRAPOLATION}x the largest size measured)" if fit["at_least"]
                else f"~{fit['largest_batch_size']:,}")
        lines.append(
            f"Memory headroom{name}: about {fit['bytes_per_example'] / 2**20:.1f} MiB per"
            f" example over {fit['fixed_bytes'] / 2**30:.2f} GiB fixed, so batch_size up to"
            f" {size} should fit in the {memory}'s {fit['capacity_bytes'] / 2**30:.0f} GiB"
            f" ({KEEP_FREE:.0%} kept free; a straight line through batch sizes"
            f" {fit['measured_batch_sizes']}: run that size to check)")
    return lines
