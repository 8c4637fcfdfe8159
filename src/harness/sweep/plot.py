"""comparison.png: throughput and peak memory against the row key, one line per variant
(bars per variant for a single row), from zero, the speed-ups below; docs/sweeps.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.measured import MAIN_PHASES, USABLE, is_finite_number
from harness.sweep.render import MIB, memory_sources, missing_cell
from harness.sweep.table import Comparison, sort_key

# (figure, its axis label, its ratio column, the ratio's label, scale)
PANELS = (
    ("train_examples_per_second", "training throughput (examples/s)", "train_speedup",
     "training speed-up", 1.0),
    ("inference_examples_per_second", "inference throughput (examples/s)", "inference_speedup",
     "inference speed-up", 1.0),
    ("peak_memory_bytes", "peak memory, {source} (MiB)", "memory_ratio", "peak memory", 1 / MIB),
)


def title(comparison: Comparison) -> str:
    """The sweep, its keys, device and measured steps; then a line on the baseline and the bars."""
    root = comparison.root.resolve()
    named = comparison.fixed.get("sweep")
    where = f"{root.parent.name}/{root.name}" if root.parent.name else root.name
    keys = " x ".join(comparison.axes)
    name = ", ".join(filter(None, [f"sweep={named}" if named else "", where]))
    ctx = comparison.context
    device = f"{ctx.get('accelerator')} ({ctx.get('device_name')})" if ctx else "device unknown"
    dates = sorted(j.result.started_at[:10] for j in comparison.jobs
                   if j.result is not None and j.result.started_at)
    when = dates[0] if dates and dates[0] == dates[-1] else (
        f"{dates[0]} to {dates[-1]}" if dates else "date unknown")
    steps = []  # measured per job (warm-up excluded): '40', or a range '12-40'
    for phase in MAIN_PHASES:
        found = sorted({int(j.figures[f"{phase}_measured_steps"]) for j in comparison.jobs if
                        j.status in USABLE and is_finite_number(j.figures.get(f"{phase}_measured_steps"))})
        if found:
            steps.append(f"{phase} {found[0]}" + (f"-{found[-1]}" if len(found) > 1 else ""))
    first = f"{name}{f' ({keys})' if keys else ''}: {device}, {when}" + (
        f"; measured steps per job: {', '.join(steps)}" if steps else "")
    if comparison.repeated:
        bars = "points: median of each point's samples; bars: their min..max"
    else:
        bars = "each point ran once: no spread known, no error bars (repeat=N measures it)"
    if len(comparison.variants) > 1:
        bars = f"baseline: {comparison.baseline}; {bars}"
    return f"{first}\n{bars}"


def _draw(ax: Any, comparison: Comparison, column: str, scale: float, ratio: bool) -> None:
    variants = [v for v in comparison.variants if not (ratio and v == comparison.baseline)]
    single_row = len(comparison.rows) == 1
    # numeric row values (batch sizes) sit at their value on the x axis, others side by side
    numeric = all(sort_key(r)[0] == 0 for r in comparison.rows) and not single_row
    positions = [float(r) for r in comparison.rows] if numeric else list(range(len(comparison.rows)))
    log_x = numeric and min(positions) > 0 and max(positions) / min(positions) >= 4
    top = 0.0
    step = (max(positions) - min(positions)) / max(len(positions) - 1, 1)
    for k, label in enumerate(variants):
        xs, values, below, above = [], [], [], []  # of the variant's usable points
        for n, row in enumerate(comparison.rows):
            p = comparison.point(row, label)
            if p is None or p["status"] not in USABLE or not is_finite_number(p[column]):
                continue
            low, high = (p[f"{column}_min"], p[f"{column}_max"]) if comparison.repeated else (None, None)
            # a little apart, so equal values do not hide each other
            shift = (k - (len(variants) - 1) / 2) * 0.03
            xs.append(k if single_row else positions[n] * 2 ** shift if log_x
                      else positions[n] + shift * step)
            values.append(p[column] * scale)
            below.append((p[column] - low) * scale if is_finite_number(low) else 0.0)
            above.append((high - p[column]) * scale if is_finite_number(high) else 0.0)
        if not xs:
            continue
        name = comparison.short_label(label) or comparison.root.name
        color = f"C{comparison.variants.index(label)}"
        yerr = [below, above] if comparison.repeated else None
        top = max(top, *(v + e for v, e in zip(values, above, strict=True)))
        if single_row:
            ax.bar(xs, values, yerr=yerr, capsize=4, color=color, label=name)
        else:
            ax.errorbar(xs, values, yerr=yerr, marker="o", capsize=3, color=color, label=name)
    for k, label in enumerate(variants if not ratio else ()):
        for n, row in enumerate(comparison.rows):  # a red x at zero with the cell's word (OOM...)
            word = missing_cell(comparison.point(row, label), column)
            if word in (None, "-"):
                continue
            x = k if single_row else positions[n]
            ax.plot([x], [0], marker="x", color="red", markersize=9, clip_on=False)
            ax.annotate(word, (x, 0), textcoords="offset points", xytext=(0, 6), ha="center",
                        color="red", fontsize="small")
    if single_row:
        ax.set_xticks(range(len(variants)))
        ax.set_xticklabels([comparison.short_label(v) for v in variants], rotation=15)
        ax.set_xlabel(", ".join(comparison.variant_keys) or "variant")
    else:
        if log_x:
            ax.set_xscale("log", base=2)
        ax.set_xticks(positions)
        ax.set_xticklabels(comparison.rows)
        ax.set_xlabel(comparison.row_key or "run")
    if ratio:
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1,
                   label=f"baseline ({comparison.short_label(comparison.baseline)})")
    # From zero, with room above the highest bar: a gap on the axis is the gap in the numbers.
    ax.set_ylim(0, max(top, 1.0 if ratio else 0.0) * 1.12 or 1.0)
    ax.grid(True, alpha=0.3)


def figure(comparison: Comparison) -> Any:
    """The matplotlib figure; None when nothing was measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in PANELS if not comparison.points[p[0]].isna().all()]
    if not panels:
        return None
    with_ratios = len(comparison.variants) > 1
    rows = 2 if with_ratios else 1
    fig, axes = plt.subplots(rows, len(panels), figsize=(5.2 * len(panels), 3.8 * rows + 0.9),
                             squeeze=False)
    base = comparison.short_label(comparison.baseline)
    for n, (column, label, ratio, ratio_label, scale) in enumerate(panels):
        _draw(axes[0][n], comparison, column, scale, ratio=False)
        axes[0][n].set_ylabel(label.format(source=memory_sources(comparison)))
        if with_ratios:
            _draw(axes[1][n], comparison, ratio, 1.0, ratio=True)
            axes[1][n].set_ylabel(f"{ratio_label} vs {base} (x)")
    handles: dict[str, Any] = {}
    for ax in axes.flat:
        for handle, text in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(text, handle)
    if with_ratios:  # one variant: the title names it, a legend would only repeat it
        fig.legend(list(handles.values()), list(handles), loc="lower center",
                   ncol=min(len(handles), 5), fontsize="small", frameon=False)
    fig.suptitle(title(comparison), fontsize="medium")
    fig.tight_layout(rect=(0, 0.04 if with_ratios else 0, 1, 1))
    return fig


def write_png(comparison: Comparison, path: Path) -> Path | None:
    """comparison.png; None when there is nothing to plot."""
    fig = figure(comparison)  # first: it picks matplotlib's file-only backend
    if fig is None:
        return None
    import matplotlib.pyplot as plt

    from harness.reports.files import atomic_path

    with atomic_path(path) as tmp:  # a reader never sees half a picture
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path
