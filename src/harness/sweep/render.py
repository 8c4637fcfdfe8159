"""A Comparison (harness.sweep.table) as text: comparison.md, .csv, .json and the terminal's tables.

Markdown and the terminal show the PhysicsNeMo-style layout: rows by the row key, one
column group per variant, training and inference side by side; the CSV and JSON hold the
same points in tidy form (one line per row x variant), with medians, min..max and the
speed-ups as plain numbers. comparison.png is harness.sweep.plot's.

The tables are laid out once for both (`sections`). A section (training, inference, the
diagnosis, peak memory) has one row per row value and, per variant, a few figures (s/it,
ex/s, speed-up). Markdown gives each figure its own column; the terminal stacks a variant's
figures in one cell, with a column naming the stacked figures and their units, when every
section's table fits the terminal at its natural width (nothing wrapped or cut); else each
variant gets a line of its own, one column per figure (`terminal_rows_table`), in every
section alike, so a figure never stands beside another figure's name. A sweep with one
variant (a single swept key) has no speed-ups: each figure gets its own column there too.
The baseline has no ratio column. A cell is a figure's number with its spread, or text: a
section may show a column of words (a verdict, a reason). Nothing is ever cut with `…`:
a cell too wide for its column folds onto the next line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.measured import MAIN_PHASES, USABLE, is_finite_number
from harness.reports.files import write_csv, write_json, write_text
from harness.sweep.table import (
    DEFAULT,
    KEEP_FREE,
    MAX_EXTRAPOLATION,
    METRIC_NAMES,
    METRICS,
    RATIOS,
    RSS_INCREASE,
    SETTINGS_KEY,
    Comparison,
)
from harness.sweep.verdict import CAUTIONS, LEGACY_NOISY, TABLE_TOLERANCE

STEM = "comparison"
# What comparison.json points to for the meaning of its fields (spread, ratio ranges...).
DOC = "docs/sweeps.md#comparisonjson"
BEST = "best"  # after the examples/s of a row's fastest variant, when it is beyond noise
UNDECIDED = "?"  # after a speed-up whose verdict is inconclusive (no range shown)
SAME = "*"  # after a speed-up that is no difference beyond the noise and the tolerance
MIB = 2**20
# The unit of a FLOP/s column: the largest whose figures are not all below 1, so a CPU's
# GFLOP/s do not read 0.000 TFLOP/s.
FLOP_UNITS = ((1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s"))
SIGNIFICANT_DIGITS = 3
CELL_FOR_STATUS = {
    "invalid": "invalid",
    "oom": "OOM",
    "failed": "failed",
    "interrupted": "interrupted",
    "missing": "no result",
    "unreadable": "unreadable",
}


# -- cells ------------------------------------------------------------------------------------
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


def _cautions(point: Any, metric: str) -> str:
    """The cautions of a figure: `thin` (few measured steps), `contended` (a busy machine),
    `noisy` (erratic steps), `NaN loss` (training)."""
    phase = _phase(metric)
    if not phase:
        return ""
    marks = ["thin"] if point.get(f"{phase}_thin") else []
    marks += [caution for caution in CAUTIONS if point.get(f"{phase}_{caution}")]
    marks += ["NaN loss"] if point.get(f"{phase}_nonfinite_loss") else []
    return "".join(f" {mark}" for mark in marks)


def significant(value: float, digits: int = SIGNIFICANT_DIGITS) -> str:
    """`value` to `digits` significant digits, trailing zeros kept, never in e-notation:
    412.3 -> '412', 4.1 -> '4.10', 0.00412 -> '0.00412'."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def flop_unit(values: Iterable[Any]) -> tuple[str, float]:
    """(label, scale) of a FLOP/s column: the largest unit of FLOP_UNITS that its largest
    figure reaches (TFLOP/s when there is none)."""
    top = max((v for v in values if is_finite_number(v) and v > 0), default=None)
    if top is None:
        return "TFLOP/s", 1e12
    return next(((label, scale) for scale, label in FLOP_UNITS if top >= scale),
                ("MFLOP/s", 1e6))


def value_cell(point: Any, metric: str, scale: float = 1e12) -> str:
    """A metric's cell: the value (with its spread when repeated), or why there is none.
    A FLOP/s figure is divided by `scale` (its column's unit, `flop_unit`) and shown to
    three significant digits."""
    missing = missing_cell(point, metric)
    if missing is not None:
        return missing
    value = point[metric]
    if isinstance(value, str):  # a column of words: a verdict, a reason
        return value
    if not is_finite_number(value):
        return "-"
    if metric.endswith("_flop_per_s"):
        return significant(value / scale)
    if metric.endswith("_mfu"):  # a few percent is common: 0.42%, not 0%
        return f"{value:.0%}" if value >= 0.1 else f"{significant(value * 100, 2)}%"
    if metric == "peak_memory_bytes":
        return f"{value / MIB:.0f}" + _spread_suffix(point, metric)
    if metric.endswith("_share"):
        return f"{value:.0%}"
    text = f"{value:.4f}" if metric.endswith("seconds_per_iteration") else f"{value:.1f}"
    return text + _spread_suffix(point, metric) + _cautions(point, metric)


def ratio_cell(point: Any, ratio: str) -> str:
    """A speed-up: the ratio, then `?` and nothing more when its verdict is inconclusive (a
    side contended or noisy, or a range wider than the tolerance); else its range over the
    samples when repeated, and `*` when it is no difference (the verdict `same`; without a
    verdict, the range holds 1.00x); `thin` when either side rests on few steps."""
    missing = missing_cell(point, ratio)
    if missing is not None:
        return missing
    value = point[ratio]
    if not is_finite_number(value):
        return "-"
    text = f"{value:.2f}x"
    verdict = point.get(f"{ratio}_verdict")
    if verdict == "inconclusive":
        return f"{text} {UNDECIDED}"
    low, high = point.get(f"{ratio}_min"), point.get(f"{ratio}_max")
    ranged = is_finite_number(low) and is_finite_number(high)
    if ranged:
        text += f" ({low:.2f}-{high:.2f})"
    if verdict == "same" or (verdict is None and ranged and point[f"{ratio}_within_spread"]):
        text += SAME
    return text + (" thin" if point.get(f"{ratio}_thin") else "")


# -- sections: the tables, laid out once for markdown and the terminal -----------------------
@dataclass
class Figure:
    label: str  # the figure's name with its unit: "ex/s", "between steps %", "speed-up x"
    metric: str  # column of Comparison.points
    ratio: bool = False  # a ratio against the baseline (none for the baseline itself)
    best: str | None = None  # bool column of Comparison.points marking the row's best variant
    terminal: bool = True  # shown on the terminal too (markdown shows every figure)
    scale: float = 1e12  # a FLOP/s figure's unit (the label names it: flop_unit)


@dataclass
class Section:
    title: str  # the markdown heading
    terminal_title: str
    figures: list[Figure]
    # row value -> one list of (figure, text) per variant, in Comparison.variants order
    rows: list[tuple[str, list[list[tuple[Figure, str]]]]] = field(default_factory=list)
    failed: list[list[bool]] = field(default_factory=list)  # per row, per variant: not ok


SECTION_PHASES = (("Training", "train"), ("Inference", "inference"))


def _unmeasured(comparison: Comparison, metric: str) -> bool:
    """Nobody measured this metric (mode=train: no inference); failed points, and a phase
    that failed in a partial job, still show."""
    points = comparison.points
    measured = points[points["status"].isin(USABLE)]
    error = f"{metric.split('_', 1)[0]}_error"
    if error in measured and measured[error].notna().any():
        return False
    return bool(len(measured)) and bool(measured[metric].isna().all())


def _cell(point: Any, figure: Figure) -> str:
    if figure.ratio:
        return ratio_cell(point, figure.metric)
    text = value_cell(point, figure.metric, figure.scale)
    if figure.best and point is not None and point.get(figure.best) is True:
        text += f" {BEST}"
    return text


def _fill(section: Section, comparison: Comparison) -> Section:
    for row in comparison.rows:
        per_variant, failed = [], []
        for label in comparison.variants:
            point = comparison.point(row, label)
            cells = [(figure, _cell(point, figure)) for figure in section.figures
                     if not (figure.ratio and label == comparison.baseline)]
            per_variant.append(cells)
            failed.append(missing_cell(point, section.figures[0].metric) is not None)
        section.rows.append((row, per_variant))
        section.failed.append(failed)
    return section


def _versus(comparison: Comparison, what: str) -> str:
    """', speed-up vs fp32' (nothing when there is one variant: nothing to compare)."""
    if len(comparison.variants) < 2:
        return ""
    return f", {what} {comparison.short_label(comparison.baseline)}"


def sections(comparison: Comparison) -> list[Section]:
    """The training, inference, diagnosis and memory sections that have something to show."""
    found = []
    points = comparison.points
    for title, phase in SECTION_PHASES:
        if _unmeasured(comparison, f"{phase}_examples_per_second"):
            continue
        figures = [Figure("s/it", f"{phase}_seconds_per_iteration", terminal=False),
                   Figure("ex/s", f"{phase}_examples_per_second", best=f"{phase}_best"),
                   Figure("between steps %", f"{phase}_between_steps_share"),
                   Figure("speed-up x", f"{phase}_speedup", ratio=True)]
        found.append(_fill(Section(title, f"{title}{_versus(comparison, 'speed-up vs')}",
                                   figures), comparison))
    if "bound_by" in points and points["bound_by"].notna().any():
        unit, scale = flop_unit(points["train_flop_per_s"])
        figures = [Figure("bound by", "bound_by"),
                   Figure(unit, "train_flop_per_s", scale=scale), Figure("MFU %", "train_mfu")]
        found.append(_fill(Section("Diagnosis (training)", "Diagnosis of training", figures),
                           comparison))
    if not _unmeasured(comparison, "peak_memory_bytes"):
        sources = " / ".join(sorted({s for s in points["memory_source"].dropna()})) or "n/a"
        figures = [Figure("peak MiB", "peak_memory_bytes"),
                   Figure("vs base x", "memory_ratio", ratio=True)]
        found.append(_fill(Section(f"Peak memory ({sources})",
                                   f"Peak memory ({sources}){_versus(comparison, 'vs')}",
                                   figures), comparison))
    return found


def _figures(section: Section, comparison: Comparison, label: str,
             terminal: bool = False) -> list[Figure]:
    return [f for f in section.figures if not (f.ratio and label == comparison.baseline)
            and (f.terminal or not terminal)]


def markdown_table(section: Section, comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one column per figure of each variant."""
    header = [comparison.row_key or "run"]
    for label in comparison.variants:
        name = comparison.short_label(label)
        header += [f"{name} {figure.label}".strip()
                   for figure in _figures(section, comparison, label)]
    rows = [[row, *(text for cells in per_variant for _, text in cells)]
            for row, per_variant in section.rows]
    return header, rows


def terminal_table(section: Section, comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """(header, rows): per variant one column, its figures stacked beside a column naming
    them; with a single variant, one column per figure. A failed point says so once."""
    header = [comparison.row_key or "run"]
    single = len(comparison.variants) == 1
    if single:
        header += [f.label for f in _figures(section, comparison, comparison.variants[0], True)]
    else:
        header += ["", *(comparison.short_label(v) for v in comparison.variants)]
    names = "\n".join(f.label for f in section.figures if f.terminal)
    rows = []
    for (row, per_variant), failed in zip(section.rows, section.failed, strict=True):
        cells = [row] if single else [row, names]
        for variant_cells, not_ok in zip(per_variant, failed, strict=True):
            texts = [text for figure, text in variant_cells if figure.terminal]
            if single:
                cells += texts
            else:
                cells.append(texts[0] if not_ok else "\n".join(texts))
        rows.append(cells)
    return header, rows


def terminal_rows_table(section: Section,
                        comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """(header, rows) with the variants as rows, for a terminal too narrow for them side by
    side: one line per row value and variant, one column per figure under its own heading,
    the row value on its variant's first line only. A failed point says so once."""
    figures = [f for f in section.figures if f.terminal]
    header = [comparison.row_key or "run", "variant", *(f.label for f in figures)]
    rows = []
    for (row, per_variant), failed in zip(section.rows, section.failed, strict=True):
        for n, (label, variant_cells, not_ok) in enumerate(
                zip(comparison.variants, per_variant, failed, strict=True)):
            texts = {id(figure): text for figure, text in variant_cells}
            values = [texts.get(id(f), "") for f in figures]  # the baseline has no ratio
            if not_ok:
                values = [values[0], *[""] * (len(values) - 1)]
            rows.append([row if n == 0 else "", comparison.short_label(label), *values])
    return header, rows


# -- the words around the tables ---------------------------------------------------------------
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


def headroom_lines(comparison: Comparison) -> list[str]:
    """One legend line per variant with a memory headroom (Comparison.headroom)."""
    lines = []
    memory = "GPU memory" if comparison.context.get("accelerator") == "cuda" else "RAM"
    for label, fit in comparison.headroom.items():
        name = f" ({label})" if len(comparison.variants) > 1 else ""
        size = (f"at least {fit['largest_batch_size']:,} (as far as the line is trusted:"
                f" {MAX_EXTRAPOLATION}x the largest size measured)" if fit["at_least"]
                else f"~{fit['largest_batch_size']:,}")
        start = fit.get("start_bytes") or 0
        resident = (f" ({start / 2**30:.2f} GiB of it resident before training started)"
                    if start else "")
        lines.append(
            f"Memory headroom{name}: about {fit['bytes_per_example'] / 2**20:.1f} MiB per"
            f" example over {fit['fixed_bytes'] / 2**30:.2f} GiB fixed{resident}, so batch_size up to"
            f" {size} should fit in the {memory}'s {fit['capacity_bytes'] / 2**30:.0f} GiB"
            f" ({KEEP_FREE:.0%} kept free; a straight line through batch sizes"
            f" {fit['measured_batch_sizes']}: run that size to check)")
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
            " its slowest counted sample beat every other variant's fastest, and only in a"
            f" {comparison.row_key or 'row'} whose every point rests on two or more counted"
            " samples (never when the points ran once: their noise is unknown; never beside a"
            " contended or noisy point)."
        )
    lines += _pooling_lines(comparison)
    lines += _verdict_lines(comparison)
    points = comparison.points
    if "bound_by" in points and points["bound_by"].notna().any():
        unit = flop_unit(points["train_flop_per_s"])[0]
        lines.append(
            "Diagnosis of training (the diagnose preset): bound by: what sets the pace of a"
            " training step (data, host, compute or communication; the most common over the"
            f" point's samples, a tie names both); {unit}: the FLOPs of a training step / its"
            " s/it, per device; MFU: that over the device's dense peak (- where no peak is"
            " known, as on a CPU).")
    if any(points[f"{phase}_thin"].any() for phase in MAIN_PHASES if f"{phase}_thin" in points):
        lines.append("thin: the phase has fewer measured steps than"
                     " profiler.speed.min_measured_steps: a figure on few samples.")
    if _any(points, "contended"):
        lines.append("contended: other processes took the machine while a sample of the point"
                     " measured (result.json flag contended:<phase>, above"
                     " profiler.speed.contended_above); its figures are shown, but it counts in"
                     " no verdict, best or regression. Rerun on a quiet machine.")
    if _any(points, "noisy"):
        lines.append("noisy: a sample's step times vary too much for its figures to be precise"
                     " (result.json flag noisy:<phase>; in older results, a mean step over"
                     f" {LEGACY_NOISY}x the median); it counts in no verdict, best or regression.")
    if "train_nonfinite_loss" in points and points["train_nonfinite_loss"].astype(bool).any():
        lines.append("NaN loss: a training loss of the point was NaN or infinite (result.json"
                     " flag nonfinite_loss): the timings stand, the model stopped learning.")
    if (points["memory_source"] == RSS_INCREASE).any():
        lines.append("peak RSS increase: on a CPU, the training phase's peak resident set minus"
                     " the resident set at its start: what the phase took from the machine,"
                     " with what the allocator kept (not the libraries loaded before it).")
    if (points["status"] == "invalid").any():
        lines.append("invalid: what ran contradicts a knob the job set (its batches, precision or"
                     " compile); its figures are in its result.json, not here. See below.")
    return lines + headroom_lines(comparison)


def _any(points: Any, caution: str) -> bool:
    columns = [f"{phase}_{caution}" for phase in MAIN_PHASES if f"{phase}_{caution}" in points]
    return any(points[column].astype(bool).any() for column in columns)


def _pooling_lines(comparison: Comparison) -> list[str]:
    """What a point's samples are: rounds, seeds (repeat keys), repeats; or a single run."""
    lines = []
    if comparison.repeat_keys:
        pooled = "; ".join(f"{k}={','.join(v)}" for k, v in comparison.repeat_keys.items())
        lines.append(
            f"Pooled: {pooled} are repeats of each point, not variants ({SETTINGS_KEY}"
            ".repeat_keys; harness-report --repeat-keys): a point's samples are its jobs over"
            " them, and its ± and the verdicts of its speed-ups come from their spread.")
    fewest = int(comparison.points["rounds"].min()) if len(comparison.points) else 0
    if comparison.rounds > 1 and fewest == comparison.rounds:
        lines.append(
            f"Each point ran {comparison.rounds} times, in {comparison.rounds} rounds of the"
            " whole sweep (order alternating), so drift between jobs shows as spread."
        )
    elif comparison.rounds > 1:  # autotune measures the candidates still in the running longer
        lines.append(
            f"Points ran in {max(fewest, 1)} to {comparison.rounds} rounds (not every point ran"
            " in every round), so a point's ± spans only the rounds it ran in."
        )
    if comparison.repeated:
        lines.append(
            "±: half the min..max range of the samples, as a share of the value shown."
            " (a-b): the speed-up over the samples, worst to best pairing."
        )
    elif _verdicts(comparison):
        lines.append("Each point ran once: the spread between runs is not known; a speed-up's"
                     " verdict rests on each run's own step spread, and no best is named"
                     " (run with repeat=N to measure it in N rounds).")
    else:
        lines.append("Each point ran once: no spread is known, so no speed-up can be called"
                     " real (run with repeat=N to measure it in N rounds).")
    return lines


def _verdicts(comparison: Comparison) -> set[str]:
    points = comparison.points
    return {v for phase in MAIN_PHASES if f"{phase}_speedup_verdict" in points
            for v in points[f"{phase}_speedup_verdict"] if isinstance(v, str)}


def _verdict_lines(comparison: Comparison) -> list[str]:
    """The marks of the speed-ups' verdicts that the table shows."""
    verdicts, lines = _verdicts(comparison), []
    counted = ("the counted samples (neither contended nor noisy; their examples per step /"
               " median step)")
    if verdicts:
        lines.append(f"{SAME}: no difference: on {counted}, the speed-up's range holds 1.00x"
                     f" within the {TABLE_TOLERANCE:.0%} tolerance, or the speed-up is smaller"
                     " than that (vs base: the memory samples' range holds 1.00x). A speed-up"
                     " with neither * nor ? is real.")
    elif comparison.repeated:
        lines.append(f"{SAME}: the speed-up's range holds 1.00x, so it is within noise.")
    if "inconclusive" in verdicts:
        lines.append(f"{UNDECIDED}: inconclusive: a side has no counted sample (all contended"
                     " or noisy), or on the counted samples the speed-up's range holds 1.00x"
                     f" and reaches past {TABLE_TOLERANCE:.0%}: no difference shown, none ruled"
                     " out (comparison.csv: <phase>_speedup_verdict_reason).")
    return lines


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


# -- comparison.md, .csv, .json -------------------------------------------------------------------
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
    failed = failures(comparison)
    if failed:
        out += ["## Failed jobs", ""] + [f"- {line}" for line in failed] + [""]
    if comparison.problems:
        out += ["## Problems reading the sweep", ""]
        out += [f"- {line}" for line in comparison.problems] + [""]
    return "\n".join(out)


def csv_columns(comparison: Comparison) -> list[str]:
    axes = ([comparison.row_key] if comparison.row_key else []) + comparison.variant_keys
    columns = [*axes, "variant", "baseline", "status", "reason", "samples", "rounds", "pooled"]
    for name in METRIC_NAMES:
        columns += [name, f"{name}_min", f"{name}_max"]
    columns += ["memory_source", "memory_start_bytes", "bound_by"]
    for phase in MAIN_PHASES:
        columns += [f"{phase}_thin", f"{phase}_contended", f"{phase}_noisy", f"{phase}_counted",
                    f"{phase}_error", f"{phase}_best"]
    columns.append("train_nonfinite_loss")
    for ratio in RATIOS:
        columns += [ratio, f"{ratio}_min", f"{ratio}_max", f"{ratio}_within_spread",
                    f"{ratio}_thin", f"{ratio}_verdict", f"{ratio}_verdict_reason"]
    columns.append("jobs")
    return columns


def to_records(comparison: Comparison) -> list[dict[str, Any]]:
    frame = comparison.points[csv_columns(comparison)]
    frame = frame.astype(object).where(frame.notna(), None)
    return frame.to_dict(orient="records")


def to_json(comparison: Comparison) -> dict[str, Any]:
    """comparison.json; what each field means is in docs/sweeps.md (`doc`)."""
    return {
        "doc": DOC,
        "sweep_dir": str(comparison.root),
        "row_key": comparison.row_key,
        "variant_keys": comparison.variant_keys,
        "variants": comparison.variants,
        "baseline": comparison.baseline,
        "fixed": comparison.fixed,
        "repeat_keys": comparison.repeat_keys,
        "verdict_tolerance": TABLE_TOLERANCE,
        "context": comparison.context,
        "jobs": {"total": len(comparison.jobs), **comparison.status_counts},
        "metrics": {m.name: {"unit": m.unit, "what": m.what} for m in METRICS},
        "ratios": {r: f"{m} of the variant / {m} of the baseline, same row"
                   for r, m in RATIOS.items()},
        "headroom": comparison.headroom,
        "points": to_records(comparison),
        "failures": failures(comparison),
        "problems": comparison.problems,
    }


def write_tables(comparison: Comparison, directory: Path) -> list[Path]:
    """comparison.md, .csv and .json in `directory` (comparison.png: harness.sweep.plot)."""
    return [
        write_text(directory / f"{STEM}.md", to_markdown(comparison)),
        write_csv(directory / f"{STEM}.csv", comparison.points[csv_columns(comparison)]),
        write_json(directory / f"{STEM}.json", to_json(comparison)),
    ]


# -- the terminal -----------------------------------------------------------------------------------
class ByWidth:
    """Tables laid out for the width they are printed at (the terminal's, or 120 columns in
    the log): `wide` when every one of them fits at its natural width, no cell or heading
    wrapped or cut; else `narrow(width)`. One choice for all, so they read alike."""

    def __init__(self, wide: list[Any], narrow: Callable[[int], list[Any]]) -> None:
        self.wide = wide
        self.narrow = narrow

    def __rich_console__(self, console: Any, options: Any) -> Iterable[Any]:
        yield from (self.wide if all(natural_width(console, t) <= options.max_width
                                     for t in self.wide) else self.narrow(options.max_width))


def natural_width(console: Any, renderable: Any) -> int:
    """The columns `renderable` takes when nothing in it wraps."""
    from rich.measure import Measurement

    roomy = console.options.update(max_width=10_000)
    return Measurement.get(console, roomy, renderable).maximum


def fitted_widths(header: list[str], rows: list[list[str]], width: int) -> list[int] | None:
    """Column widths that fit a table of these cells in `width` columns: every column at its
    widest line; if that is too wide, first the columns whose heading is wider than their
    cells ("between steps %" over two lines), then those whose cells have spaces, the one
    that gives up most first ("1.54x (1.40-1.69)" over two lines), each no narrower than
    its longest word; if even that is too wide, the widest column loses a column at a time
    (its cells fold inside words). None when the borders alone take the width."""
    columns = [[line for cell in column for line in cell.split("\n")]
               for column in zip(header, *rows, strict=True)]
    natural = [max(len(line) for line in lines) for lines in columns]
    body = [max((len(line) for line in lines[1:]), default=0) for lines in columns]
    longest_word = [max((len(word) for line in lines for word in line.split()), default=0)
                    for lines in columns]
    room = width - (3 * len(header) + 1)  # the borders and each cell's padding
    widths = list(natural)
    order = sorted(range(len(widths)),
                   key=lambda n: (body[n] >= natural[n], longest_word[n] - natural[n]))
    for n in order:
        excess = sum(widths) - room
        if excess <= 0:
            break
        target = max(longest_word[n], natural[n] - excess)
        widths[n] = (_snug(header[n], target, max(body[n], longest_word[n]))
                     if body[n] < natural[n] else target)
    if room < len(widths):
        return None
    while sum(widths) > room:
        widths[widths.index(max(widths))] -= 1
    return widths


def _snug(heading: str, at_most: int, at_least: int) -> int:
    """The narrowest width from `at_least` up that wraps `heading` into as few lines as
    `at_most` does: "between steps %" at 14 columns is "between" / "steps %", 7 wide, not
    "between steps" / "%"."""
    import textwrap

    lines = len(textwrap.wrap(heading, at_most))
    return next((w for w in range(at_least, at_most)
                 if len(textwrap.wrap(heading, w)) <= lines), at_most)


def _stacked(section: Section, comparison: Comparison) -> Any:
    from rich.table import Table

    header, rows = terminal_table(section, comparison)
    table = Table(title=section.terminal_title, show_lines=True)
    for n, column in enumerate(header):
        # the column naming a cell's stacked figures reads left to right
        table.add_column(column, justify="left" if n == 1 and not column else "right",
                         overflow="fold")
    for cells in rows:
        table.add_row(*[_style(c) for c in cells])
    return table


def _variants_as_rows(section: Section, comparison: Comparison, width: int) -> Any:
    from rich.table import Table

    header, rows = terminal_rows_table(section, comparison)
    widths: list[int | None] = list(fitted_widths(header, rows, width) or [None] * len(header))
    table = Table(title=section.terminal_title)
    for n, (column, fixed) in enumerate(zip(header, widths, strict=True)):
        table.add_column(column, justify="left" if n == 1 else "right", overflow="fold",
                         width=fixed)
    for n, cells in enumerate(rows):
        # a rule between row values, none between the variants of one
        last = n + 1 == len(rows) or bool(rows[n + 1][0])
        table.add_row(*[_style(c) for c in cells], end_section=last)
    return table


def terminal_tables(comparison: Comparison) -> ByWidth:
    """The sections' tables for the terminal: variants as columns where they fit, else as
    rows (see the module docstring)."""
    found = sections(comparison)
    stacked = [_stacked(s, comparison) for s in found]
    if len(comparison.variants) < 2:  # one column per figure already
        return ByWidth(stacked, lambda width: stacked)
    return ByWidth(stacked,
                   lambda width: [_variants_as_rows(s, comparison, width) for s in found])


def show_tables(comparison: Comparison) -> None:
    """The comparison on the terminal (and in the log): preamble, tables, legend, problems."""
    from harness.terminal import show

    show(f"[bold]Sweep comparison:[/bold] {comparison.root}")
    for line in _preamble(comparison):
        show(line)
    tables = terminal_tables(comparison)
    if tables.wide:  # else no section has anything to show
        show(tables)
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
