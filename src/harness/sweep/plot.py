"""comparison.png: throughput and peak memory against the row key, one line per variant.

Read at a glance: every axis says what it shows and in which unit; absolute axes start at
zero, so 604 vs 652 MiB looks like the 8 % it is; below them, each variant's speed-up over
the baseline with a line at 1.0; error bars span the samples' min..max when the points
were measured more than once; the title says which sweep, on what device, when, and on
how many measured steps. A sweep with a single row (one swept key that is not the row
key) gets bars per variant instead of lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.measured import USABLE, is_finite_number
from harness.sweep.render import MIB, missing_cell
from harness.sweep.table import Comparison

RATIO_LABELS = {"train_speedup": "training speed-up", "inference_speedup": "inference speed-up",
                "memory_ratio": "peak memory"}


def _panels(comparison: Comparison) -> list[tuple[str, str, str, float]]:
    """(absolute metric, its axis label, its ratio column, scale) with something to show."""
    source = " / ".join(sorted(set(comparison.points["memory_source"].dropna()))) or "n/a"
    found = [("train_examples_per_second", "training throughput (examples/s)",
              "train_speedup", 1.0),
             ("inference_examples_per_second", "inference throughput (examples/s)",
              "inference_speedup", 1.0),
             ("peak_memory_bytes", f"peak memory, {source} (MiB)", "memory_ratio", 1 / MIB)]
    return [p for p in found if not comparison.points[p[0]].isna().all()]


def measured_steps(comparison: Comparison) -> dict[str, str]:
    """Phase -> measured steps per job (warm-up excluded), '40' or a range '12-40'."""
    found: dict[str, str] = {}
    for phase in ("train", "inference"):
        steps = {int(j.figures[f"{phase}_measured_steps"]) for j in comparison.jobs
                 if j.status in USABLE and is_finite_number(j.figures.get(f"{phase}_measured_steps"))}
        if steps:
            found[phase] = (f"{min(steps)}" if len(steps) == 1
                            else f"{min(steps)}-{max(steps)}")
    return found


def sweep_name(comparison: Comparison) -> str:
    """'sweep=physicsnemo, 2026-11-22/17-27-42 (batch_size x precision)': its name when it
    has one, its directory (multirun/<date>/<time>: both parts) and what it varies."""
    root = comparison.root.resolve()
    where = f"{root.parent.name}/{root.name}" if root.parent.name else root.name
    named = comparison.fixed.get("sweep")
    keys = " x ".join(([comparison.row_key] if comparison.row_key else [])
                      + comparison.variant_keys)
    return ", ".join(filter(None, [f"sweep={named}" if named else "", where])) + (
        f" ({keys})" if keys else "")


def title(comparison: Comparison) -> str:
    """'<sweep>: cpu (AMD EPYC), 2026-11-22; measured steps per job: train 40, inference 20'
    and a second line on the baseline and the error bars."""
    ctx = comparison.context
    device = f"{ctx.get('accelerator')} ({ctx.get('device_name')})" if ctx else "device unknown"
    dates = sorted(j.result.started_at[:10] for j in comparison.jobs
                   if j.result is not None and j.result.started_at)
    when = dates[0] if dates and dates[0] == dates[-1] else (
        f"{dates[0]} to {dates[-1]}" if dates else "date unknown")
    steps = ", ".join(f"{phase} {n}" for phase, n in measured_steps(comparison).items())
    first = f"{sweep_name(comparison)}: {device}, {when}" + (
        f"; measured steps per job: {steps}" if steps else "")
    if comparison.repeated:
        bars = "points: median of each point's samples; bars: their min..max"
    else:
        bars = "each point ran once: no spread known, no error bars (repeat=N measures it)"
    if len(comparison.variants) > 1:
        bars = f"baseline: {comparison.baseline}; {bars}"
    return f"{first}\n{bars}"


def _series(comparison: Comparison, label: str, column: str, scale: float,
            spread: tuple[str, str] | None) -> tuple[list[int], list[float], list[list[float]]]:
    """(row indexes, values, [below, above]) of one variant's usable points."""
    index, values, below, above = [], [], [], []
    for n, row in enumerate(comparison.rows):
        p = comparison.point(row, label)
        if p is None or p["status"] not in USABLE or not is_finite_number(p[column]):
            continue
        low = p[spread[0]] if spread else None
        high = p[spread[1]] if spread else None
        index.append(n)
        values.append(p[column] * scale)
        below.append((p[column] - low) * scale if is_finite_number(low) else 0.0)
        above.append((high - p[column]) * scale if is_finite_number(high) else 0.0)
    return index, values, [below, above]


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _draw(ax: Any, comparison: Comparison, column: str, scale: float, ratio: bool) -> None:
    variants = [v for v in comparison.variants if not (ratio and v == comparison.baseline)]
    single_row = len(comparison.rows) == 1
    # numeric row values (batch sizes) sit at their value on the x axis, others side by side
    numeric = all(_is_number(r) for r in comparison.rows) and not single_row
    positions = [float(r) for r in comparison.rows] if numeric else list(range(len(comparison.rows)))
    log_x = numeric and min(positions) > 0 and max(positions) / min(positions) >= 4
    top = 0.0
    for k, label in enumerate(variants):
        spread = (f"{column}_min", f"{column}_max") if comparison.repeated else None
        index, values, errors = _series(comparison, label, column, scale, spread)
        if not index:
            continue
        name = comparison.short_label(label) or comparison.root.name
        color = f"C{comparison.variants.index(label)}"
        yerr = errors if spread else None
        top = max(top, *(v + e for v, e in zip(values, errors[1], strict=True)))
        if single_row:
            ax.bar([k], values, yerr=yerr, capsize=4, color=color, label=name)
        else:
            # Variants side by side, a little apart, so equal values do not hide each other.
            shift = (k - (len(variants) - 1) / 2) * 0.03
            xs = [positions[i] * 2 ** shift if log_x else positions[i] + shift * _step(positions)
                  for i in index]
            ax.errorbar(xs, values, yerr=yerr, marker="o", capsize=3, color=color, label=name)
    if not ratio:
        _mark_failed(ax, comparison, column, positions, single_row, variants)
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


def _step(positions: list[float]) -> float:
    return (max(positions) - min(positions)) / max(len(positions) - 1, 1) if positions else 1.0


def _mark_failed(ax: Any, comparison: Comparison, column: str, positions: list[float],
                 single_row: bool, variants: list[str]) -> None:
    """A red x at zero, with the cell's word (OOM, failed...), where a job gave no figure."""
    for k, label in enumerate(variants):
        for n, row in enumerate(comparison.rows):
            point = comparison.point(row, label)
            word = missing_cell(point, column) if point is not None else None
            if word is None or word == "-":
                continue
            x = k if single_row else positions[n]
            ax.plot([x], [0], marker="x", color="red", markersize=9, clip_on=False)
            ax.annotate(word, (x, 0), textcoords="offset points", xytext=(0, 6), ha="center",
                        color="red", fontsize="small")


def figure(comparison: Comparison) -> Any:
    """The matplotlib figure: absolute panels (examples/s, peak memory) and, with 2+
    variants, speed-up panels below them; None when nothing was measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _panels(comparison)
    if not panels:
        return None
    with_ratios = len(comparison.variants) > 1
    rows = 2 if with_ratios else 1
    fig, axes = plt.subplots(rows, len(panels), figsize=(5.2 * len(panels), 3.8 * rows + 0.9),
                             squeeze=False)
    base = comparison.short_label(comparison.baseline)
    for n, (column, label, ratio, scale) in enumerate(panels):
        _draw(axes[0][n], comparison, column, scale, ratio=False)
        axes[0][n].set_ylabel(label)
        if with_ratios:
            _draw(axes[1][n], comparison, ratio, 1.0, ratio=True)
            axes[1][n].set_ylabel(f"{RATIO_LABELS[ratio]} vs {base} (x)")
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
    """comparison.png (module docstring); None when there is nothing to plot."""
    fig = figure(comparison)  # first: it picks matplotlib's file-only backend
    if fig is None:
        return None
    import matplotlib.pyplot as plt

    from harness.reports.files import atomic_path

    with atomic_path(path) as tmp:  # a reader never sees half a picture
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path
