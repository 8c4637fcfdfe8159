"""A Comparison (harness.sweep.table) as text: comparison.md, .csv, .json and the terminal's
tables, laid out once (`sections`); docs/sweeps.md and docs/reading-results.md say how they read.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.measured import CAUTIONS, LEGACY_NOISY, MAIN_PHASES, USABLE, is_finite_number
from harness.reports.files import write_csv, write_json, write_text
from harness.sweep.table import (
    DEFAULT,
    KEEP_FREE,
    MAX_EXTRAPOLATION,
    METRIC_NAMES,
    METRICS,
    RATIO_SUFFIXES,
    RATIOS,
    RSS_INCREASE,
    SETTINGS_KEY,
    Comparison,
)

STEM = "comparison"
DOC = "docs/sweeps.md#comparisonjson"
BEST = "best"  # after the examples/s of a row's fastest variant, when it is beyond noise
UNDECIDED = "?"  # after a speed-up whose verdict is inconclusive (no range shown)
SAME = "*"  # after a speed-up that is no difference beyond the noise and the tolerance
MIB = 2**20
# A FLOP/s column's unit: the largest its figures reach, so a CPU's do not read 0.000 TFLOP/s.
FLOP_UNITS = ((1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s"))
CELL_FOR_STATUS = {
    "invalid": "invalid",
    "oom": "OOM",
    "failed": "failed",
    "interrupted": "interrupted",
    "missing": "no result",
    "unreadable": "unreadable",
}
PHASE_NAMES = {"train": "training", "inference": "inference"}
CAUTION_LEGEND = {  # <phase>_<caution> column -> its legend line
    "thin": "thin: the phase has fewer measured steps than profiler.speed.min_measured_steps: a"
            " figure on few samples.",
    "contended": "contended: other processes took the machine while a sample of the point"
                 " measured (result.json flag contended:<phase>, above"
                 " profiler.speed.contended_above); its figures are shown, but it counts in no"
                 " verdict, best or regression. Rerun on a quiet machine.",
    "noisy": "noisy: a sample's step times vary too much for its figures to be precise"
             " (result.json flag noisy:<phase>; in older results, a mean step over"
             f" {LEGACY_NOISY}x the median); it counts in no verdict, best or regression.",
    "nonfinite_loss": "NaN loss: a training loss of the point was NaN or infinite (result.json"
                      " flag nonfinite_loss): the timings stand, the model stopped learning.",
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


def missing_cell(point: Any, metric: str) -> str | None:
    """'-' (no job), the job's status, or 'failed' (a partial job's phase); None with a figure."""
    if point is None:
        return "-"
    if point["status"] not in USABLE:
        return CELL_FOR_STATUS.get(point["status"], str(point["status"]))
    phase = _phase(metric)
    return "failed" if phase and point.get(f"{phase}_error") else None


def _cautions(point: Any, metric: str) -> str:
    phase = _phase(metric)
    if not phase:
        return ""
    marks = ["thin"] if point.get(f"{phase}_thin") else []
    marks += [caution for caution in CAUTIONS if point.get(f"{phase}_{caution}")]
    marks += ["NaN loss"] if point.get(f"{phase}_nonfinite_loss") else []
    return "".join(f" {mark}" for mark in marks)


def significant(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant digits, never in e-notation: 4.1 -> '4.10'."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def flop_unit(values: Iterable[Any]) -> tuple[str, float]:
    """(label, scale) of a FLOP/s column (TFLOP/s when it has no figure)."""
    top = max((v for v in values if is_finite_number(v) and v > 0), default=1e12)
    return next(((label, scale) for scale, label in FLOP_UNITS if top >= scale),
                ("MFLOP/s", 1e6))


def value_cell(point: Any, metric: str, scale: float = 1e12) -> str:
    """A figure's cell (a FLOP/s one divided by `scale`) with its spread and cautions."""
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


def ratio_text(value: Any, verdict: str | None, within: bool | None, low: Any = None,
               high: Any = None) -> str:
    """A ratio as the table and harness-report A B show it, with its range and verdict mark."""
    if not is_finite_number(value):
        return "-"
    text = f"{value:.2f}x"
    if verdict == "inconclusive":
        return f"{text} {UNDECIDED}"
    if is_finite_number(low) and is_finite_number(high):
        text += f" ({low:.2f}-{high:.2f})"
    return text + (SAME if verdict == "same" or (verdict is None and within) else "")


def ratio_cell(point: Any, ratio: str) -> str:
    """A speed-up's cell (`ratio_text`), `thin` when either side rests on few steps."""
    missing = missing_cell(point, ratio)
    if missing is not None:
        return missing
    low, high = point.get(f"{ratio}_min"), point.get(f"{ratio}_max")
    ranged = is_finite_number(low) and is_finite_number(high)
    text = ratio_text(point[ratio], point.get(f"{ratio}_verdict"),
                      ranged and bool(point[f"{ratio}_within_spread"]), low, high)
    if text == "-" or text.endswith(UNDECIDED):
        return text
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
    # (row value, per variant: a text per figure (None: the baseline's ratios), per variant: not ok)
    rows: list[tuple[str, list[list[str | None]], list[bool]]] = field(default_factory=list)


def _unmeasured(comparison: Comparison, metric: str) -> bool:
    """Nobody measured this metric (mode=train: no inference); a failed phase still shows."""
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
            per_variant.append([None if f.ratio and label == comparison.baseline
                                else _cell(point, f) for f in section.figures])
            failed.append(missing_cell(point, section.figures[0].metric) is not None)
        section.rows.append((row, per_variant, failed))
    return section


def _versus(comparison: Comparison, what: str) -> str:
    """', speed-up vs fp32' (nothing when there is one variant: nothing to compare)."""
    alone = len(comparison.variants) < 2
    return "" if alone else f", {what} {comparison.short_label(comparison.baseline)}"


def sections(comparison: Comparison) -> list[Section]:
    """The training, inference, diagnosis and memory sections that have something to show."""
    found = []
    points = comparison.points
    for phase in MAIN_PHASES:
        title = PHASE_NAMES[phase].capitalize()
        if _unmeasured(comparison, f"{phase}_examples_per_second"):
            continue
        figures = [Figure("s/it", f"{phase}_seconds_per_iteration", terminal=False),
                   Figure("ex/s", f"{phase}_examples_per_second", best=f"{phase}_best"),
                   Figure("between steps %", f"{phase}_between_steps_share"),
                   Figure("speed-up x", f"{phase}_speedup", ratio=True)]
        found.append(_fill(Section(title, f"{title}{_versus(comparison, 'speed-up vs')}",
                                   figures), comparison))
    if points["bound_by"].notna().any():
        unit, scale = flop_unit(points["train_flop_per_s"])
        figures = [Figure("bound by", "bound_by"),
                   Figure(unit, "train_flop_per_s", scale=scale), Figure("MFU %", "train_mfu")]
        found.append(_fill(Section("Diagnosis (training)", "Diagnosis of training", figures),
                           comparison))
    if not _unmeasured(comparison, "peak_memory_bytes"):
        sources = memory_sources(comparison)
        figures = [Figure("peak MiB", "peak_memory_bytes"),
                   Figure("vs base x", "memory_ratio", ratio=True)]
        found.append(_fill(Section(f"Peak memory ({sources})",
                                   f"Peak memory ({sources}){_versus(comparison, 'vs')}",
                                   figures), comparison))
    return found


def memory_sources(comparison: Comparison) -> str:
    """The peak memory figures' memory_source values ('device allocated / process RSS')."""
    return " / ".join(sorted(set(comparison.points["memory_source"].dropna()))) or "n/a"


def markdown_table(section: Section, comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one column per figure of each variant."""
    header = [comparison.row_key or "run"]
    for label in comparison.variants:
        header += [f"{comparison.short_label(label)} {f.label}".strip() for f in section.figures
                   if not (f.ratio and label == comparison.baseline)]
    rows = [[row, *(text for cells in per_variant for text in cells if text is not None)]
            for row, per_variant, _ in section.rows]
    return header, rows


def terminal_table(section: Section, comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """(header, rows): a column per variant, its figures stacked (one variant: one per figure)."""
    header = [comparison.row_key or "run"]
    single = len(comparison.variants) == 1
    if single:  # the baseline: no ratio
        header += [f.label for f in section.figures if f.terminal and not f.ratio]
    else:
        header += ["", *(comparison.short_label(v) for v in comparison.variants)]
    names = "\n".join(f.label for f in section.figures if f.terminal)
    rows = []
    for row, per_variant, failed in section.rows:
        cells = [row] if single else [row, names]
        for variant_cells, not_ok in zip(per_variant, failed, strict=True):
            texts = [text for figure, text in zip(section.figures, variant_cells, strict=True)
                     if figure.terminal and text is not None]
            if single:
                cells += texts
            else:
                cells.append(texts[0] if not_ok else "\n".join(texts))
        rows.append(cells)
    return header, rows


def terminal_rows_table(section: Section,
                        comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one line per row value and variant, one column per figure."""
    figures = [f for f in section.figures if f.terminal]
    header = [comparison.row_key or "run", "variant", *(f.label for f in figures)]
    rows = []
    for row, per_variant, failed in section.rows:
        for n, (label, variant_cells, not_ok) in enumerate(
                zip(comparison.variants, per_variant, failed, strict=True)):
            values = ["" if text is None else text  # the baseline has no ratio
                      for f, text in zip(section.figures, variant_cells, strict=True) if f.terminal]
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
        start = fit["start_bytes"]
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
    tolerance = comparison.tolerance
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
            " the judge finds it faster than every other variant beyond their counted samples'"
            " bands and the 5% tolerance (never when the points ran once and no point of the"
            " sweep measured the noise between runs; never beside a contended or noisy point)."
        )
    points = comparison.points
    if comparison.repeat_keys:
        pooled = "; ".join(f"{k}={','.join(v)}" for k, v in comparison.repeat_keys.items())
        lines.append(
            f"Pooled: {pooled} are repeats of each point, not variants ({SETTINGS_KEY}"
            ".repeat_keys; harness-report --repeat-keys): a point's samples are its jobs over"
            " them, and its ± and the verdicts of its speed-ups come from their spread.")
    fewest = int(points["rounds"].min())
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
    verdicts = {v for phase in MAIN_PHASES for v in points[f"{phase}_speedup_verdict"]
                if isinstance(v, str)}
    paired = [n for phase in MAIN_PHASES for n in points[f"{phase}_speedup_pairs"]
              if is_finite_number(n)]
    if comparison.repeated:
        lines.append(
            "±: half the min..max range of the samples, as a share of the value shown."
            " (a-b): the speed-up over the samples, worst to best pairing"
            + ("; where the rounds gave 6 or more counted pairs (a round's variant and baseline"
               " jobs, both quiet or both loaded), the speed-up and its (a-b) come from them"
               " instead: the Hodges-Lehmann estimate of variant / baseline, and its 95 %"
               " confidence interval (Wilcoxon signed-rank)." if paired else ".")
        )
    elif verdicts:
        lines.append("Each point ran once: the spread between runs is not known; a speed-up's"
                     " verdict rests on each run's own step spread, and no best is named"
                     " (the fastest point is named unproven)"
                     " (run with repeat=N to measure it in N rounds).")
    else:
        lines.append("Each point ran once: no spread is known, so no speed-up can be called"
                     " real (run with repeat=N to measure it in N rounds).")
    counted = ("the counted samples (neither contended nor noisy; their examples per step /"
               " median step)")
    if verdicts:
        lines.append(f"{SAME}: no difference: on {counted}, the speed-up's range lies wholly"
                     f" within {tolerance:.0%} of 1.00x (vs base: the memory samples' range"
                     " holds 1.00x). A speed-up with neither * nor ? is real: its range lies"
                     f" wholly past {tolerance:.0%}.")
    elif comparison.repeated:
        lines.append(f"{SAME}: the speed-up's range holds 1.00x, so it is within noise.")
    if "inconclusive" in verdicts:
        lines.append(f"{UNDECIDED}: inconclusive: a side has no counted sample (all contended"
                     " or noisy), or on the counted samples the speed-up's range is neither"
                     f" wholly within nor wholly past {tolerance:.0%}: the noise is larger"
                     " than the change asked about (comparison.csv:"
                     " <phase>_speedup_verdict_reason).")
    if points["bound_by"].notna().any():
        unit = flop_unit(points["train_flop_per_s"])[0]
        lines.append(
            "Diagnosis of training (the diagnose preset): bound by: what sets the pace of a"
            " training step (data, host, compute or communication; the most common over the"
            f" point's samples, a tie names both); {unit}: the FLOPs of a training step / its"
            " s/it, per device; MFU: that over the device's dense peak (- where no peak is"
            " known, as on a CPU).")
    for caution, text in CAUTION_LEGEND.items():  # said where a point has it
        columns = [c for phase in MAIN_PHASES if (c := f"{phase}_{caution}") in points]
        if any(points[column].astype(bool).any() for column in columns):
            lines.append(text)
    if (points["memory_source"] == RSS_INCREASE).any():
        lines.append("peak RSS increase: on a CPU, the training phase's peak resident set minus"
                     " the resident set at its start: what the phase took from the machine,"
                     " with what the allocator kept (not the libraries loaded before it).")
    if (points["status"] == "invalid").any():
        lines.append("invalid: what ran contradicts a knob the job set (its batches, precision or"
                     " compile); its figures are in its result.json, not here. See below.")
    return lines + headroom_lines(comparison)


def failures(comparison: Comparison) -> list[str]:
    lines = []
    for job in comparison.jobs:
        where = ", ".join(f"{k}={job.settings.get(k, DEFAULT)}" for k in comparison.axes)
        if job.status == "partial" and job.result is not None:
            for phase, why in job.result.phase_errors.items():
                lines.append(f"job {job.name} ({where or 'run'}): {phase} failed: {why}")
        elif not job.ok:
            lines.append(f"job {job.name} ({where or 'run'}): {job.status}: {job.reason}")
    return lines


def fastest_lines(comparison: Comparison) -> list[str]:
    """Per phase, the fastest point of the whole sweep (Comparison.fastest), decided or not."""
    found = getattr(comparison, "fastest", None) or {}
    lines = []
    for phase, best in sorted(found.items(), key=lambda item: item[0] != "train"):
        text = (f"fastest ({PHASE_NAMES[phase]}): {best['point']}:"
                f" {best['examples_per_second']:,.0f} ex/s")
        if is_finite_number(best.get("low")) and is_finite_number(best.get("high")):
            text += f" ({best['low']:,.0f}-{best['high']:,.0f})"
        text += ", beyond the others' noise" if best.get("decided") else f", unproven: {best['why']}"
        if best.get("ties"):
            text += f", tied with: {'; '.join(best['ties'])}"
        lines.append(text)
    return lines


# -- comparison.md, .csv, .json -------------------------------------------------------------------
def markdown(header: Sequence[str], rows: Iterable[Sequence[str]], left: int = 1) -> str:
    """A markdown table, its first `left` columns aligned left, the others right."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    aligns = ["---"] * left + ["---:"] * (len(header) - left)
    return "\n".join([line(header), line(aligns), *map(line, rows)])


def to_markdown(comparison: Comparison) -> str:
    out = [f"# Sweep comparison: {comparison.root.name}", ""]
    out += [f"{line}  " for line in _preamble(comparison)] + [""]
    for section in sections(comparison):
        out += [f"## {section.title}", "", markdown(*markdown_table(section, comparison)), ""]
    out += [f"{line}  " for line in fastest_lines(comparison) + legend(comparison)] + [""]
    for heading, lines in (("Failed jobs", failures(comparison)),
                           ("Problems reading the sweep", comparison.problems)):
        if lines:
            out += [f"## {heading}", "", *(f"- {line}" for line in lines), ""]
    return "\n".join(out)


def csv_columns(comparison: Comparison) -> list[str]:
    columns = [*comparison.axes, "variant", "baseline", "status", "reason", "samples", "rounds", "pooled"]
    for name in METRIC_NAMES:
        columns += [name, f"{name}_min", f"{name}_max"]
    columns += ["memory_source", "memory_start_bytes", "bound_by"]
    for phase in MAIN_PHASES:
        columns += [f"{phase}_thin", f"{phase}_contended", f"{phase}_noisy", f"{phase}_counted",
                    f"{phase}_error", f"{phase}_best"]
    columns.append("train_nonfinite_loss")
    for ratio in RATIOS:
        columns += [f"{ratio}{suffix}" for suffix in RATIO_SUFFIXES]
    columns.append("jobs")
    return columns


def to_json(comparison: Comparison) -> dict[str, Any]:
    """comparison.json; what each field means is in docs/sweeps.md (`doc`)."""
    frame = comparison.points[csv_columns(comparison)]
    return {
        "doc": DOC,
        "sweep_dir": str(comparison.root),
        "row_key": comparison.row_key,
        "variant_keys": comparison.variant_keys,
        "variants": comparison.variants,
        "baseline": comparison.baseline,
        "fixed": comparison.fixed,
        "repeat_keys": comparison.repeat_keys,
        "verdict_tolerance": comparison.tolerance,
        "context": comparison.context,
        "jobs": {"total": len(comparison.jobs), **comparison.status_counts},
        "metrics": {m.name: {"unit": m.unit, "what": m.what} for m in METRICS},
        "ratios": {r: f"{m} of the variant / {m} of the baseline, same row"
                   for r, m in RATIOS.items()},
        "headroom": comparison.headroom,
        "fastest": comparison.fastest,
        "job_noise": comparison.noise,
        "points": frame.astype(object).where(frame.notna(), None).to_dict(orient="records"),
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
@dataclass
class ByWidth:
    """Tables for the width they print at: `wide` when all fit unwrapped, else `narrow(width)`."""

    wide: list[Any]
    narrow: Callable[[int], list[Any]]

    def __rich_console__(self, console: Any, options: Any) -> Iterable[Any]:
        from rich.measure import Measurement

        roomy = console.options.update(max_width=10_000)  # each table's width unwrapped
        fits = all(Measurement.get(console, roomy, t).maximum <= options.max_width
                   for t in self.wide)
        yield from self.wide if fits else self.narrow(options.max_width)


def rich_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]],
               left: Sequence[int] = (0,), ends: Sequence[bool] = (),
               widths: Sequence[int | None] = (), **options: Any) -> Any:
    """A rich table of these cells (rich markup); a cell too wide folds."""
    from rich.table import Table

    table = Table(title=title, **options)
    for n, column in enumerate(header):
        table.add_column(column, justify="left" if n in left else "right", overflow="fold",
                         width=widths[n] if n < len(widths) else None)
    for n, cells in enumerate(rows):
        table.add_row(*cells, end_section=n < len(ends) and ends[n])
    return table


def fitted_widths(header: list[str], rows: list[list[str]], width: int) -> list[int] | None:
    """Column widths fitting the cells in `width` at word breaks; None when the borders take it all."""
    columns = [[line for cell in column for line in cell.split("\n")]
               for column in zip(header, *rows, strict=True)]
    widths = [max(map(len, lines)) for lines in columns]
    body = [max(map(len, lines[1:]), default=0) for lines in columns]
    words = [max((len(word) for line in lines for word in line.split()), default=0)
             for lines in columns]
    room = width - (3 * len(header) + 1)  # the borders and each cell's padding
    if room < len(widths):
        return None
    for n in sorted(range(len(widths)), key=lambda n: (body[n] >= widths[n], words[n] - widths[n])):
        excess = sum(widths) - room
        if excess > 0:
            heading_only = body[n] < widths[n]
            widths[n] = max(words[n], body[n] if heading_only else widths[n] - excess)
    while sum(widths) > room:
        widths[widths.index(max(widths))] -= 1
    return widths


def terminal_tables(comparison: Comparison) -> ByWidth:
    """The sections' tables for the terminal: variants as columns where they fit, else rows."""
    found, stacked = sections(comparison), []
    for section in found:
        header, rows = terminal_table(section, comparison)
        # the column naming a cell's stacked figures reads left to right
        stacked.append(rich_table(section.terminal_title, header, _styled(rows), show_lines=True,
                                  left=(1,) if len(header) > 1 and not header[1] else ()))

    def as_rows(section: Section, width: int) -> Any:
        header, rows = terminal_rows_table(section, comparison)
        # a rule between row values, none between the variants of one
        ends = [n + 1 == len(rows) or bool(rows[n + 1][0]) for n in range(len(rows))]
        return rich_table(section.terminal_title, header, _styled(rows), left=(1,), ends=ends,
                          widths=fitted_widths(header, rows, width) or ())

    if len(comparison.variants) < 2:  # one column per figure already
        return ByWidth(stacked, lambda width: stacked)
    return ByWidth(stacked, lambda width: [as_rows(s, width) for s in found])


def show_tables(comparison: Comparison) -> None:
    """The comparison on the terminal (and in the log); problems as warnings."""
    from rich.markup import escape

    from harness.terminal import show

    show(f"[bold]Sweep comparison:[/bold] {comparison.root}")
    for line in _preamble(comparison):
        show(escape(line))  # a fixed `profiler=[speed]` is not markup
    tables = terminal_tables(comparison)
    if tables.wide:  # else no section has anything to show
        show(tables)
    for line in fastest_lines(comparison):
        show(f"[bold]{escape(line)}[/bold]")
    for line in legend(comparison):
        show(f"[dim]{line}[/dim]")
    for line in failures(comparison):
        show(f"[red]not ok[/red] {line}")
    for line in comparison.problems:  # on stderr: `| head` does not hide them
        logging.getLogger(__name__).warning("%s", line)


def _styled(rows: list[list[str]]) -> list[list[str]]:
    """The cells as rich markup: a status in red, a row's best in green."""
    from rich.markup import escape

    def style(cell: str) -> str:
        if cell in CELL_FOR_STATUS.values():
            return f"[bold red]{cell}[/bold red]"
        return "\n".join(f"[bold green]{escape(line)}[/bold green]" if line.endswith(f" {BEST}")
                         else escape(line) for line in cell.split("\n"))

    return [[style(cell) for cell in row] for row in rows]
