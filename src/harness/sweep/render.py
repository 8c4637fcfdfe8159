"""Write a Comparison as comparison.{md,csv,json} (+ .png, harness.sweep.plot) and show it.

Markdown and the terminal show the PhysicsNeMo-style layout (harness.sweep.layout):
rows by the row key, one column group per variant, training and inference side by
side; the CSV and JSON hold the same points in tidy form (one line per row x variant),
with medians, min..max and the speed-ups as plain numbers.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from harness.reports.files import write_csv, write_json, write_text
from harness.sweep.cells import CELL_FOR_STATUS
from harness.sweep.headroom import headroom_lines, largest_batches
from harness.sweep.layout import BEST, markdown_table, sections, terminal_table
from harness.sweep.points import METRIC_NAMES, METRICS, RATIOS, TABLE_PHASES
from harness.sweep.table import DEFAULT, Comparison

STEM = "comparison"


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
        "s/it: seconds per iteration (median over the samples of the point; comparison.md"
        " and .csv); ex/s: examples per second, examples per iteration / s/it; between steps:"
        " share of each iteration from the end of the previous step to the next batch's"
        " arrival (the batch fetch and Lightning's end-of-step work; the diagnose preset splits"
        " it). Warm-up steps excluded.",
    ]
    if len(comparison.variants) > 1:
        lines.append(
            f"speed-up: the variant's examples/s divided by the baseline's ({comparison.baseline})"
            f" at the same {comparison.row_key or 'row'}; above 1.00x is faster."
            " vs base: peak memory divided by the baseline's."
        )
        lines.append(
            f"{BEST}: the {comparison.row_key or 'row'}'s highest examples/s, marked only when"
            " its slowest sample beat every other variant's fastest (never when the points"
            " ran once: their noise is unknown)."
        )
    if comparison.rounds > 1:
        lines.append(
            f"Each point ran {comparison.rounds} times, in {comparison.rounds} rounds of the"
            " whole sweep (order alternating), so drift between jobs shows as spread."
        )
    if comparison.repeated:
        lines.append(
            "±: half the min..max range of the samples, as a share of the value shown."
            " (a-b): the speed-up over the samples, worst to best pairing; *: that range holds"
            " 1.00x, so the speed-up is within noise."
        )
    else:
        lines.append("Each point ran once: no spread is known, so no speed-up can be called"
                     " real (run with repeat=N to measure it in N rounds).")
    if any(comparison.points.get(f"{phase}_thin", False).any()
           for phase in ("train", "inference") if f"{phase}_thin" in comparison.points):
        lines.append("thin: the phase has fewer measured steps than"
                     " profiler.speed.min_measured_steps: a figure on few samples.")
    points = comparison.points
    if "train_nonfinite_loss" in points and points["train_nonfinite_loss"].astype(bool).any():
        lines.append("NaN loss: a training loss of the point was NaN or infinite (result.json"
                     " flag nonfinite_loss): the timings stand, the model stopped learning.")
    if (comparison.points["status"] == "invalid").any():
        lines.append("invalid: what ran contradicts a knob the job set (its batches, precision or"
                     " compile); its figures are in its result.json, not here. See below.")
    return lines + headroom_lines(comparison)


def failures(comparison: Comparison) -> list[str]:
    lines = []
    for job in comparison.jobs:
        where = ", ".join(f"{k}={job.settings.get(k, DEFAULT)}"
                          for k in ([comparison.row_key] if comparison.row_key else [])
                          + comparison.variant_keys)
        if job.status == "partial" and job.result is not None:
            for phase, why in job.result.phase_errors.items():
                lines.append(f"job {job.name} ({where or 'run'}): {phase} failed: {why}")
        elif not job.ok:
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
    for section in sections(comparison):
        out += [f"## {section.title}", "", _md_table(*markdown_table(section, comparison)), ""]
    out += [f"{line}  " for line in legend(comparison)] + [""]
    if failures(comparison):
        out += ["## Failed jobs", ""] + [f"- {line}" for line in failures(comparison)] + [""]
    if comparison.problems:
        out += ["## Problems reading the sweep", ""]
        out += [f"- {line}" for line in comparison.problems] + [""]
    return "\n".join(out)


def csv_columns(comparison: Comparison) -> list[str]:
    axes = ([comparison.row_key] if comparison.row_key else []) + comparison.variant_keys
    columns = [*axes, "variant", "baseline", "status", "reason", "samples", "rounds"]
    for name in METRIC_NAMES:
        columns += [name, f"{name}_min", f"{name}_max"]
    columns += ["memory_source", "bound_by"]
    for phase in TABLE_PHASES:
        columns += [f"{phase}_thin", f"{phase}_error", f"{phase}_best"]
    columns.append("train_nonfinite_loss")
    for ratio in RATIOS:
        columns += [ratio, f"{ratio}_min", f"{ratio}_max", f"{ratio}_within_spread",
                    f"{ratio}_thin"]
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
        "spread": "min..max over every sample of the point (repeats in a job, rounds of the"
                  " sweep); s/it = median, examples/s = examples per iteration / s/it",
        "ratio_range": "<ratio>_min..<ratio>_max: the ratio over the samples, worst to best"
                       " pairing of variant and baseline (null: ran once, unknown)",
        "within_spread": "true when the ratio's range holds 1.0: the samples overlap, the"
                         " difference is within noise (null: ran once, unknown)",
        "thin": "<phase>_thin: fewer measured steps than profiler.speed.min_measured_steps",
        "best": "<phase>_best: the row's highest examples/s, its lowest sample above every"
                " other variant's highest (false when any point of the row ran once)",
        "invalid": "status invalid: what ran contradicts a knob; no figures here",
        "headroom": largest_batches(comparison),
        "points": to_records(comparison),
        "failures": failures(comparison),
        "problems": comparison.problems,
    }


def write_all(comparison: Comparison, directory: Path, plot: bool = True) -> list[Path]:
    """comparison.md, .csv, .json (and .png) in `directory`."""
    from harness.sweep.plot import write_png

    written = [
        write_text(directory / f"{STEM}.md", to_markdown(comparison)),
        write_csv(directory / f"{STEM}.csv", comparison.points[csv_columns(comparison)]),
        write_json(directory / f"{STEM}.json", to_json(comparison)),
    ]
    if plot:
        png = write_png(comparison, directory / f"{STEM}.png")
        if png:
            written.append(png)
    return written


def show_tables(comparison: Comparison) -> None:
    """The comparison on the terminal (and in the log): preamble, tables, legend, problems."""
    from rich.table import Table

    from harness.terminal import show

    show(f"[bold]Sweep comparison:[/bold] {comparison.root}")
    for line in _preamble(comparison):
        show(line)
    for section in sections(comparison):
        header, rows = terminal_table(section, comparison)
        table = Table(title=section.terminal_title, show_lines=True)
        for n, column in enumerate(header):
            # the column naming a cell's stacked figures reads left to right
            table.add_column(column, justify="left" if n == 1 and not column else "right")
        for cells in rows:
            table.add_row(*[_style(c) for c in cells])
        show(table)
    for line in legend(comparison):
        show(f"[dim]{line}[/dim]")
    for line in failures(comparison):
        show(f"[red]not ok[/red] {line}")
    for line in comparison.problems:  # on stderr: `| head` does not hide them
        logging.getLogger(__name__).warning("%s", line)


def _style(cell: str) -> str:
    from rich.markup import escape

    if cell in CELL_FOR_STATUS.values():
        return f"[bold red]{cell}[/bold red]"
    return "\n".join(f"[bold green]{escape(line)}[/bold green]" if line.endswith(f" {BEST}")
                     else escape(line) for line in cell.split("\n"))
