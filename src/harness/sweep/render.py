"""Write a Comparison as comparison.{md,csv,json,png} and print it with rich.

Markdown and the terminal show the PhysicsNeMo-style layout: rows by the row
key, one column group per variant, training and inference side by side; the
CSV and JSON hold the same points in tidy form (one line per row x variant),
with medians, min..max and the speed-ups as plain numbers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from harness.reports.files import write_json
from harness.sweep.table import DEFAULT, METRIC_NAMES, METRICS, RATIOS, Comparison

STEM = "comparison"
CELL_FOR_STATUS = {
    "oom": "OOM",
    "failed": "failed",
    "interrupted": "interrupted",
    "missing": "no result",
    "unreadable": "unreadable",
}
MIB = 2**20


# -- cells -----------------------------------------------------------------------------
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _spread_suffix(point: Any, metric: str) -> str:
    if point["samples"] <= 1:
        return ""
    lo, hi, mid = point[f"{metric}_min"], point[f"{metric}_max"], point[metric]
    if not (_is_number(lo) and _is_number(hi) and _is_number(mid)) or mid == 0:
        return ""
    return f" ±{(hi - lo) / 2 / mid:.0%}"


def _missing_cell(point: Any) -> str | None:
    """What a cell shows when its job has no value: '-' (no job) or its status (OOM, failed)."""
    if point is None:
        return "-"
    if point["status"] != "ok":
        return CELL_FOR_STATUS.get(point["status"], str(point["status"]))
    return None


def value_cell(point: Any, metric: str) -> str:
    """A metric's cell: the value (with its spread when repeated), or why there is none."""
    missing = _missing_cell(point)
    if missing is not None:
        return missing
    value = point[metric]
    if not _is_number(value):
        return "-"
    if metric == "peak_memory_bytes":
        text = f"{value / MIB:.0f}"
    elif metric.endswith("seconds_per_iteration"):
        text = f"{value:.4f}"
    else:
        text = f"{value:.1f}"
    return text + _spread_suffix(point, metric)


def ratio_cell(point: Any, ratio: str) -> str:
    missing = _missing_cell(point)
    if missing is not None:
        return missing
    value = point[ratio]
    if not _is_number(value):
        return "-"
    flag = point[f"{ratio}_within_spread"]
    return f"{value:.2f}x" + ("*" if flag is True else "")


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


# -- layout shared by markdown and rich ----------------------------------------------
def _sections(comparison: Comparison) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) for the training, inference and memory tables."""
    points = comparison.points
    lookup = {(str(p["row"]), p["variant"]): p for _, p in points.iterrows()}
    row_title = comparison.row_key or "run"
    sections = []
    phases = (("Training", "train"), ("Inference", "inference"))
    measured = points[points["status"] == "ok"]
    for title, phase in phases:
        # A phase nobody measured (mode=train) has no table; failed points still show.
        if len(measured) and measured[f"{phase}_examples_per_second"].isna().all():
            continue
        header = [row_title]
        for label in comparison.variants:
            name = short_label(comparison, label)
            header += [f"{name} s/it".strip(), f"{name} ex/s".strip()]
            if label != comparison.baseline:
                header.append(f"{name} speed-up")
        rows = []
        for row in comparison.rows:
            cells = [row]
            for label in comparison.variants:
                point = lookup.get((row, label))
                cells += [value_cell(point, f"{phase}_seconds_per_iteration"),
                          value_cell(point, f"{phase}_examples_per_second")]
                if label != comparison.baseline:
                    cells.append(ratio_cell(point, f"{phase}_speedup"))
            rows.append(cells)
        sections.append((title, header, rows))
    if not (len(measured) and measured["peak_memory_bytes"].isna().all()):
        sources = {s for s in points["memory_source"].dropna()}
        title = f"Peak memory (MiB, {' / '.join(sorted(sources)) or 'n/a'})"
        header = [row_title]
        for label in comparison.variants:
            name = short_label(comparison, label)
            header.append(name or "MiB")
            if label != comparison.baseline:
                header.append(f"{name} vs base")
        rows = []
        for row in comparison.rows:
            cells = [row]
            for label in comparison.variants:
                point = lookup.get((row, label))
                cells.append(value_cell(point, "peak_memory_bytes"))
                if label != comparison.baseline:
                    cells.append(ratio_cell(point, "memory_ratio"))
            rows.append(cells)
        sections.append((title, header, rows))
    return sections


def _preamble(comparison: Comparison) -> list[str]:
    lines = []
    ctx = comparison.context
    if ctx:
        lines.append(
            f"Device: {ctx.get('accelerator')} ({ctx.get('device_name')}), world size"
            f" {ctx.get('world_size')}; torch {ctx.get('torch')}, lightning {ctx.get('lightning')}"
        )
    counts = ", ".join(f"{n} {s}" for s, n in sorted(comparison.status_counts.items()))
    lines.append(f"Jobs: {len(comparison.jobs)} ({counts})")
    if comparison.fixed:
        fixed = ", ".join(f"{k}={v}" for k, v in comparison.fixed.items())
        lines.append(f"Fixed (not swept): {fixed}")
    if comparison.variant_keys:
        lines.append(
            f"Rows: {comparison.row_key or 'one (no row key)'}."
            f" Column groups: {', '.join(comparison.variant_keys)}."
            f" Baseline: {comparison.baseline}."
        )
    elif comparison.row_key:
        lines.append(f"Rows: {comparison.row_key}.")
    return lines


def legend(comparison: Comparison) -> list[str]:
    lines = [
        "s/it: mean seconds per iteration; ex/s: examples per second (warm-up steps excluded).",
    ]
    if len(comparison.variants) > 1:
        lines.append(
            f"speed-up: the variant's examples/s divided by the baseline's ({comparison.baseline})"
            f" at the same {comparison.row_key or 'row'}; above 1.00x is faster."
            " vs base: peak memory divided by the baseline's."
        )
    if comparison.repeated:
        lines.append(
            "±: half the min..max range of the repeated runs, as a share of their median"
            " (the value shown). *: the spread of this cell or of its baseline is larger than"
            " the difference between them, so the speed-up is within noise."
        )
    else:
        lines.append("Each point ran once: no spread is known (run with repeat=N to get one).")
    return lines


def failures(comparison: Comparison) -> list[str]:
    lines = []
    for job in comparison.jobs:
        if not job.ok:
            where = ", ".join(f"{k}={job.settings.get(k, DEFAULT)}"
                              for k in ([comparison.row_key] if comparison.row_key else [])
                              + comparison.variant_keys)
            lines.append(f"job {job.name} ({where or 'run'}): {job.status}: {job.reason}")
    return lines


# -- writers -----------------------------------------------------------------------------
def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    aligns = ["---"] + ["---:"] * (len(header) - 1)
    return "\n".join([line(header), "| " + " | ".join(aligns) + " |", *map(line, rows)])


def to_markdown(comparison: Comparison) -> str:
    out = [f"# Sweep comparison: {comparison.root.name}", ""]
    out += [f"{line}  " for line in _preamble(comparison)] + [""]
    for title, header, rows in _sections(comparison):
        out += [f"## {title}", "", _md_table(header, rows), ""]
    out += [f"{line}  " for line in legend(comparison)] + [""]
    if failures(comparison):
        out += ["## Failed jobs", ""] + [f"- {line}" for line in failures(comparison)] + [""]
    if comparison.problems:
        out += ["## Problems reading the sweep", ""]
        out += [f"- {line}" for line in comparison.problems] + [""]
    return "\n".join(out)


def csv_columns(comparison: Comparison) -> list[str]:
    axes = ([comparison.row_key] if comparison.row_key else []) + comparison.variant_keys
    columns = [*axes, "variant", "baseline", "status", "reason", "samples"]
    for name in METRIC_NAMES:
        columns += [name, f"{name}_min", f"{name}_max"]
    columns.append("memory_source")
    for ratio in RATIOS:
        columns += [ratio, f"{ratio}_within_spread"]
    columns.append("jobs")
    return columns


def to_records(comparison: Comparison) -> list[dict[str, Any]]:
    frame = comparison.points[csv_columns(comparison)]
    frame = frame.astype(object).where(frame.notna(), None)
    return frame.to_dict(orient="records")


def to_json(comparison: Comparison) -> dict[str, Any]:
    return {
        "sweep_dir": str(comparison.root),
        "row_key": comparison.row_key,
        "variant_keys": comparison.variant_keys,
        "variants": comparison.variants,
        "baseline": comparison.baseline,
        "fixed": comparison.fixed,
        "context": comparison.context,
        "jobs": {"total": len(comparison.jobs), **comparison.status_counts},
        "metrics": {m.name: {"unit": m.unit, "what": m.what} for m in METRICS},
        "ratios": {r: f"{m} of the variant / {m} of the baseline, same row"
                   for r, m in RATIOS.items()},
        "spread": "min..max over every repeat of every job of the point; value = median",
        "within_spread": "true when the min..max range of the point or of its baseline is wider"
                         " than the difference of their medians (null: ran once, unknown)",
        "points": to_records(comparison),
        "failures": failures(comparison),
        "problems": comparison.problems,
    }


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
                if match.empty or match.iloc[0]["status"] != "ok":
                    continue
                p = match.iloc[0]
                if not _is_number(p[metric]):
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
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _numeric(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def write_all(comparison: Comparison, directory: Path, plot: bool = True) -> list[Path]:
    """comparison.md, .csv, .json (and .png) in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    md = directory / f"{STEM}.md"
    md.write_text(to_markdown(comparison))
    written.append(md)
    csv = directory / f"{STEM}.csv"
    comparison.points[csv_columns(comparison)].to_csv(csv, index=False)
    written.append(csv)
    written.append(write_json(directory / f"{STEM}.json", to_json(comparison)))
    if plot:
        png = write_png(comparison, directory / f"{STEM}.png")
        if png:
            written.append(png)
    return written


def _compact_sections(comparison: Comparison) -> list[tuple[str, list[str], list[list[str]]]]:
    """The terminal layout: one column per variant, each cell stacking its figures.

    The markdown layout has three columns per variant and wraps badly in a terminal.
    """
    points = comparison.points
    lookup = {(str(p["row"]), p["variant"]): p for _, p in points.iterrows()}
    measured = points[points["status"] == "ok"]
    header = [comparison.row_key or "run"]
    header += [short_label(comparison, v) or "value" for v in comparison.variants]
    sections = []
    for title, phase in (("Training", "train"), ("Inference", "inference")):
        if len(measured) and measured[f"{phase}_examples_per_second"].isna().all():
            continue
        rows = []
        for row in comparison.rows:
            cells = [row]
            for label in comparison.variants:
                point = lookup.get((row, label))
                lines = [value_cell(point, f"{phase}_seconds_per_iteration"),
                         value_cell(point, f"{phase}_examples_per_second")]
                if point is None or point["status"] != "ok":
                    lines = [value_cell(point, f"{phase}_examples_per_second")]
                elif label != comparison.baseline:
                    lines.append(ratio_cell(point, f"{phase}_speedup"))
                cells.append("\n".join(lines))
            rows.append(cells)
        sections.append((f"{title}: s/it, ex/s, speed-up vs {comparison.baseline}", header, rows))
    if not (len(measured) and measured["peak_memory_bytes"].isna().all()):
        sources = " / ".join(sorted({s for s in points["memory_source"].dropna()})) or "n/a"
        rows = []
        for row in comparison.rows:
            cells = [row]
            for label in comparison.variants:
                point = lookup.get((row, label))
                lines = [value_cell(point, "peak_memory_bytes")]
                if point is not None and point["status"] == "ok" and label != comparison.baseline:
                    lines.append(ratio_cell(point, "memory_ratio"))
                cells.append("\n".join(lines))
            rows.append(cells)
        sections.append((f"Peak memory, MiB ({sources}), and vs base", header, rows))
    return sections


def print_rich(comparison: Comparison, console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    console.print(f"[bold]Sweep comparison:[/bold] {comparison.root}")
    for line in _preamble(comparison):
        console.print(line, highlight=False)
    for title, header, rows in _compact_sections(comparison):
        table = Table(title=title, show_lines=True)
        for column in header:
            table.add_column(column, justify="right")
        for cells in rows:
            table.add_row(*[_style(c) for c in cells])
        console.print(table)
    for line in legend(comparison):
        console.print(line, style="dim", highlight=False)
    for line in failures(comparison):
        console.print(f"[red]not ok[/red] {line}", highlight=False)
    for line in comparison.problems:
        console.print(f"[yellow]warning[/yellow] {line}", highlight=False)


def _style(cell: str) -> str:
    from rich.markup import escape

    if cell in CELL_FOR_STATUS.values():
        return f"[bold red]{cell}[/bold red]"
    return escape(cell)
