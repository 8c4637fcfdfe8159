"""The comparison's tables, laid out once for both renderers.

A section (training, inference, peak memory) has one row per row value and, per
variant, a few figures (s/it, ex/s, speed-up). Markdown gives each figure its own
column; the terminal stacks a variant's figures in one cell, so a wide sweep
still fits. The baseline has no ratio column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.sweep.cells import missing_cell, ratio_cell, short_label, value_cell
from harness.sweep.points import USABLE
from harness.sweep.table import Comparison


@dataclass
class Figure:
    label: str  # column name after the variant's: "s/it", "speed-up"; "" for the value alone
    metric: str  # column of Comparison.points
    ratio: bool = False  # a ratio against the baseline (none for the baseline itself)


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


def _fill(section: Section, comparison: Comparison) -> Section:
    lookup = {(str(p["row"]), p["variant"]): p for _, p in comparison.points.iterrows()}
    for row in comparison.rows:
        per_variant, failed = [], []
        for label in comparison.variants:
            point = lookup.get((row, label))
            cells = []
            for figure in section.figures:
                if figure.ratio and label == comparison.baseline:
                    continue
                text = (ratio_cell(point, figure.metric) if figure.ratio
                        else value_cell(point, figure.metric))
                cells.append((figure, text))
            per_variant.append(cells)
            failed.append(missing_cell(point, section.figures[0].metric) is not None)
        section.rows.append((row, per_variant))
        section.failed.append(failed)
    return section


def sections(comparison: Comparison) -> list[Section]:
    """The training, inference and memory sections that have something to show."""
    found = []
    for title, phase in PHASES:
        if _unmeasured(comparison, f"{phase}_examples_per_second"):
            continue
        figures = [Figure("s/it", f"{phase}_seconds_per_iteration"),
                   Figure("ex/s", f"{phase}_examples_per_second"),
                   Figure("wait", f"{phase}_dataloader_wait_share"),
                   Figure("speed-up", f"{phase}_speedup", ratio=True)]
        found.append(_fill(Section(title, f"{title}: s/it, ex/s, data wait, speed-up vs"
                                   f" {comparison.baseline}", figures), comparison))
    if "bound_by" in comparison.points and comparison.points["bound_by"].notna().any():
        figures = [Figure("bound by", "bound_by"), Figure("TFLOP/s", "train_flop_per_s"),
                   Figure("MFU", "train_mfu")]
        found.append(_fill(Section("Diagnosis (training)", "Diagnosis of training: bound by,"
                                   " TFLOP/s, MFU", figures), comparison))
    if not _unmeasured(comparison, "peak_memory_bytes"):
        points = comparison.points
        sources = " / ".join(sorted({s for s in points["memory_source"].dropna()})) or "n/a"
        figures = [Figure("", "peak_memory_bytes"), Figure("vs base", "memory_ratio", ratio=True)]
        found.append(_fill(Section(f"Peak memory (MiB, {sources})",
                                   f"Peak memory, MiB ({sources}), and vs base", figures),
                           comparison))
    return found


def markdown_table(section: Section, comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one column per figure of each variant."""
    header = [comparison.row_key or "run"]
    for label in comparison.variants:
        name = short_label(comparison, label)
        for figure in section.figures:
            if figure.ratio and label == comparison.baseline:
                continue
            header.append(f"{name} {figure.label}".strip() or "MiB")
    rows = [[row, *(text for cells in per_variant for _, text in cells)]
            for row, per_variant in section.rows]
    return header, rows


def terminal_table(section: Section, comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one column per variant, its figures stacked; a failed point says so once."""
    header = [comparison.row_key or "run"]
    header += [short_label(comparison, v) or "value" for v in comparison.variants]
    rows = []
    for (row, per_variant), failed in zip(section.rows, section.failed, strict=True):
        cells = [row]
        for variant_cells, not_ok in zip(per_variant, failed, strict=True):
            texts = [text for _, text in variant_cells]
            cells.append(texts[0] if not_ok else "\n".join(texts))
        rows.append(cells)
    return header, rows
