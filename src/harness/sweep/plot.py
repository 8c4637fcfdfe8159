"""comparison.png: throughput and peak memory against the row key, one line per variant."""

from __future__ import annotations

from pathlib import Path

from harness.measured import is_finite_number
from harness.sweep.cells import MIB, _numeric, short_label
from harness.sweep.points import USABLE
from harness.sweep.table import Comparison


def write_png(comparison: Comparison, path: Path) -> Path | None:
    """Throughput and peak memory against the row key, one line per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(f"{phase} examples/s", f"{key}_examples_per_second", 1.0)
              for phase, key in (("training", "train"), ("inference", "inference"))]
    panels.append(("peak memory (MiB)", "peak_memory_bytes", 1 / MIB))
    points = comparison.points
    panels = [p for p in panels if not points[p[1]].isna().all()]
    if not panels:
        return None
    numeric = all(_numeric(r) for r in comparison.rows)
    positions = ([float(r) for r in comparison.rows] if numeric
                 else list(range(len(comparison.rows))))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (title, metric, scale) in zip(axes[0], panels, strict=True):
        for label in comparison.variants:
            xs, ys, lo, hi = [], [], [], []
            for x, row in zip(positions, comparison.rows, strict=True):
                match = points[(points["row"].astype(str) == row) & (points["variant"] == label)]
                if match.empty or match.iloc[0]["status"] not in USABLE:
                    continue
                p = match.iloc[0]
                if not is_finite_number(p[metric]):
                    continue
                xs.append(x)
                ys.append(p[metric] * scale)
                lo.append((p[metric] - p[f"{metric}_min"]) * scale)
                hi.append((p[f"{metric}_max"] - p[metric]) * scale)
            if xs:
                name = short_label(comparison, label) or comparison.root.name
                if comparison.repeated:
                    ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=name)
                else:
                    ax.plot(xs, ys, marker="o", label=name)
        ax.set_title(title)
        ax.set_xlabel(comparison.row_key or "run")
        if numeric and min(positions) > 0 and max(positions) / min(positions) >= 4:
            ax.set_xscale("log", base=2)
        ax.set_xticks(positions)
        ax.set_xticklabels(comparison.rows)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"{comparison.root.name}: baseline {comparison.baseline}", fontsize="medium")
    fig.tight_layout()
    from harness.reports.files import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path
