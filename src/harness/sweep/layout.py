"""The comparison's tables, laid out once for both renderers.

A section (training, inference, peak memory) has one row per row value and, per
variant, a few figures (s/it, ex/s, speed-up). Markdown gives each figure its own
column; the terminal stacks a variant's figures in one cell, so a wide sweep
still fits, with a column naming the stacked figures and their units. A sweep with
one variant (a single swept key) has no speed-ups: each figure gets its own column
there too. The baseline has no ratio column. A cell is a figure's number with its
spread, or text: a section may show a column of words (a verdict, a reason).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.measured import USABLE
from harness.sweep.cells import missing_cell, ratio_cell, short_label, value_cell
from harness.sweep.table import Comparison

BEST = "best"  # after the examples/s of a row's fastest variant, when it is beyond noise


@dataclass
class Figure:
    label: str  # the figure's name with its unit: "ex/s", "between steps %", "speed-up x"
    metric: str  # column of Comparison.points
    ratio: bool = False  # a ratio against the baseline (none for the baseline itself)
    best: str | None = None  # bool column of Comparison.points marking the row's best variant
    terminal: bool = True  # shown on the terminal too (markdown shows every figure)


@dataclass
class Section:
    title: str  # the markdown heading
    terminal_title: str
    figures: list[Figure]
    # row value -> one list of (figure, text) per variant, in Comparison.variants order
    rows: list[tuple[str, list[list[tuple[Figure, str]]]]] = field(default_factory=list)
    failed: list[list[bool]] = field(default_factory=list)  # per row, per variant: not ok


PHASES = (("Training", "train"), ("Inference", "inference"))


def _measured(comparison: Comparison) -> Any:
    points = comparison.points
    return points[points["status"].isin(USABLE)]


def _unmeasured(comparison: Comparison, metric: str) -> bool:
    """Nobody measured this metric (mode=train: no inference); failed points, and a phase
    that failed in a partial job, still show."""
    measured = _measured(comparison)
    error = f"{metric.split('_', 1)[0]}_error"
    if error in measured and measured[error].notna().any():
        return False
    return bool(len(measured)) and bool(measured[metric].isna().all())


def _cell(point: Any, figure: Figure) -> str:
    if figure.ratio:
        return ratio_cell(point, figure.metric)
    text = value_cell(point, figure.metric)
    if figure.best and point is not None and point.get(figure.best) is True:
        text += f" {BEST}"
    return text


def _fill(section: Section, comparison: Comparison) -> Section:
    lookup = {(str(p["row"]), p["variant"]): p for _, p in comparison.points.iterrows()}
    for row in comparison.rows:
        per_variant, failed = [], []
        for label in comparison.variants:
            point = lookup.get((row, label))
            cells = [(figure, _cell(point, figure)) for figure in section.figures
                     if not (figure.ratio and label == comparison.baseline)]
            per_variant.append(cells)
            failed.append(missing_cell(point, section.figures[0].metric) is not None)
        section.rows.append((row, per_variant))
        section.failed.append(failed)
    return section


def _versus(comparison: Comparison) -> str:
    """', speed-up vs fp32' (nothing when there is one variant: nothing to compare)."""
    if len(comparison.variants) < 2:
        return ""
    return f", speed-up vs {short_label(comparison, comparison.baseline)}"


def sections(comparison: Comparison) -> list[Section]:
    """The training, inference and memory sections that have something to show."""
    found = []
    for title, phase in PHASES:
        if _unmeasured(comparison, f"{phase}_examples_per_second"):
            continue
        figures = [Figure("s/it", f"{phase}_seconds_per_iteration", terminal=False),
                   Figure("ex/s", f"{phase}_examples_per_second", best=f"{phase}_best"),
                   Figure("between steps %", f"{phase}_between_steps_share"),
                   Figure("speed-up x", f"{phase}_speedup", ratio=True)]
        found.append(_fill(Section(title, f"{title}{_versus(comparison)}", figures), comparison))
    if "bound_by" in comparison.points and comparison.points["bound_by"].notna().any():
        figures = [Figure("bound by", "bound_by"), Figure("TFLOP/s", "train_flop_per_s"),
                   Figure("MFU %", "train_mfu")]
        found.append(_fill(Section("Diagnosis (training)", "Diagnosis of training", figures),
                           comparison))
    if not _unmeasured(comparison, "peak_memory_bytes"):
        points = comparison.points
        sources = " / ".join(sorted({s for s in points["memory_source"].dropna()})) or "n/a"
        figures = [Figure("peak MiB", "peak_memory_bytes"),
                   Figure("vs base x", "memory_ratio", ratio=True)]
        versus = f", vs {short_label(comparison, comparison.baseline)}" if len(
            comparison.variants) > 1 else ""
        found.append(_fill(Section(f"Peak memory ({sources})",
                                   f"Peak memory ({sources}){versus}", figures), comparison))
    return found


def _figures(section: Section, comparison: Comparison, label: str,
             terminal: bool = False) -> list[Figure]:
    return [f for f in section.figures if not (f.ratio and label == comparison.baseline)
            and (f.terminal or not terminal)]


def markdown_table(section: Section, comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one column per figure of each variant."""
    header = [comparison.row_key or "run"]
    for label in comparison.variants:
        name = short_label(comparison, label)
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
        header += ["", *(short_label(comparison, v) for v in comparison.variants)]
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
