"""comparison.png: throughput and peak memory against the row key, one line per variant
(bars per variant for a single row), from zero, the speed-ups below; docs/sweeps.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.measured import MAIN_PHASES, MIB, USABLE, is_finite_number
from harness.reports.files import atomic_path
from harness.sweep.render import memory_sources, missing_cell
from harness.sweep.table import Comparison, sort_key

# (figure, its axis label, its ratio column, the ratio's label, scale)
PANELS = (("train_examples_per_second", "training throughput (examples/s)", "train_speedup",
           "training speed-up", 1.0),
          ("inference_examples_per_second", "inference throughput (examples/s)", "inference_speedup",
           "inference speed-up", 1.0),
          ("peak_memory_bytes", "peak memory, {source} (MiB)", "memory_ratio", "peak memory", 1 / MIB))


def title(comparison: Comparison) -> str:
    """The sweep, its keys, device and measured steps; then a line on the baseline and the bars."""
    root = comparison.root.resolve()
    where = f"{root.parent.name}/{root.name}" if root.parent.name else root.name
    keys = " x ".join(comparison.axes)
    name = f"sweep={named}, {where}" if (named := comparison.fixed.get("sweep")) else where
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
    bars = ("points: median of each point's samples; bars: its band (the table's ±), the judge's"
            " interval under a ratio" if comparison.repeated
            else "each point ran once: no spread known, no error bars (repeat=N measures it)")
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
        shift = (k - (len(variants) - 1) / 2) * 0.03  # a little apart: equal values do not hide each other
        for n, row in enumerate(comparison.rows):
            p = comparison.point(row, label)
            word = None if ratio else missing_cell(p, column)
            if word not in (None, "-"):  # a red x at zero with the cell's word (OOM...)
                x = k if single_row else positions[n]
                ax.plot([x], [0], marker="x", color="red", markersize=9, clip_on=False)
                ax.annotate(word, (x, 0), textcoords="offset points", xytext=(0, 6), ha="center",
                            color="red", fontsize="small")
            if p is None or p["status"] not in USABLE or not is_finite_number(p[column]):
                continue
            low, high = (p[f"{column}_min"], p[f"{column}_max"]) if comparison.repeated else (None, None)
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
    panels = [p for p in PANELS if not comparison.points[p[0]].isna().all()]
    if not panels:
        return None
    with_ratios = len(comparison.variants) > 1
    rows = 1 + with_ratios
    fig, axes = _pyplot().subplots(rows, len(panels), figsize=(5.2 * len(panels), 3.8 * rows + 0.9),
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
    fig = figure(comparison)
    return None if fig is None else _save(fig, path)


def _pyplot() -> Any:
    """matplotlib.pyplot on its file-only backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    with atomic_path(path) as tmp:  # a reader never sees half a picture
        fig.savefig(tmp, dpi=100, format="png")
    _pyplot().close(fig)
    return path


def write_scaling_png(body: dict[str, Any], path: Path) -> Path | None:
    """scaling.png: speed-up and efficiency against the ideal line; per rank of each world size,
    where its optimizer step goes (stacked). None when nothing was measured."""
    points = body["points"]
    if not points:
        return None
    fig, (left, right) = _pyplot().subplots(1, 2, figsize=(11, 4.2))
    sizes = [p["world_size"] for p in points]
    base = body["baseline_world_size"]
    left.plot(sizes, [n / base for n in sizes], "k--", linewidth=1, label="ideal (N / N0)")
    for key, color, label in (("speedup", "tab:blue", "speed-up"),
                              ("efficiency", "tab:orange", "efficiency")):
        values = [p[key] for p in points]
        ci = [p[f"{key}_ci"] or [v, v] for p, v in zip(points, values, strict=True)]
        left.errorbar(sizes, values, yerr=[[v - c[0] for v, c in zip(values, ci, strict=True)],
                                           [c[1] - v for v, c in zip(values, ci, strict=True)]],
                      marker="o", color=color, capsize=4, label=f"{label} (95 % interval, where known)")
    left.set_xscale("log", base=2)
    left.set_xticks(sizes, [str(n) for n in sizes])
    left.set_xlabel("world size (ranks)")
    left.set_ylabel(f"speed-up over {base} rank(s) (x); efficiency")
    left.set_ylim(0, max(max(sizes) / base, *(p["speedup"] for p in points)) * 1.12)
    left.grid(True, alpha=0.3)
    left.legend(fontsize="small")
    labels, bottoms = [], []
    colors = {"compute_s": "tab:green", "comm_s": "tab:red", "data_wait_s": "tab:purple",
              "straggler_wait_s": "tab:gray"}
    x = 0
    for point in points:
        for rank in point["ranks"]:
            bottom = 0.0
            for part, color in colors.items():
                right.bar(x, rank[part], bottom=bottom, color=color, width=0.8,
                          label=part.removesuffix("_s").replace("_", " ") if x == 0 else None)
                bottom += rank[part]
            late = point["straggler"]
            if late and late["rank"] == rank["rank"]:
                right.annotate(f"late\n({late['late_in']})", (x, bottom), ha="center",
                               va="bottom", fontsize="small")
            labels.append(f"{point['world_size']}:{rank['rank']}")
            bottoms.append(x)
            x += 1
        x += 1  # a gap between world sizes
    right.set_xticks(bottoms, labels, fontsize="small")
    right.set_xlabel("world size : rank")
    right.set_ylabel("seconds per optimizer step")
    right.legend(fontsize="small")
    right.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"Scaling study ({body['mode']}, baseline {base} rank(s)): {path.parent.parent.name}/"
                 f"{path.parent.name}", fontsize="medium")
    fig.tight_layout()
    return _save(fig, path)
