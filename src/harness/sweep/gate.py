"""Each comparison as a decision at its threshold (a regression, an improvement, no change, or undecided and
why), worded from the judge's verdict. Within one sweep (`decisions`: each variant against its row's baseline)
or between two (`changes`: B's points against A's); `harness-report --fail-if-worse F` exits by them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.judge import Verdict
from harness.measured import MAIN_PHASES, PHASE_NAMES, USABLE, is_finite_number
from harness.terminal import size

if TYPE_CHECKING:
    from harness.sweep.diff import Diff
    from harness.sweep.table import Comparison

REGRESSION, IMPROVEMENT, NO_CHANGE, UNDECIDED, FAILED = (
    "regression", "improvement", "no change", "undecided", "failed")
FOUND_REGRESSION, NOT_DECIDED = 1, 3  # exit statuses of the gate (0: decided, none worse)
MEMORY = "memory"


@dataclass(frozen=True)
class Decision:
    """One variant against its baseline (or B's point against A's), for one phase or memory."""

    phase: str  # train | inference | memory
    outcome: str  # REGRESSION | IMPROVEMENT | NO_CHANGE | UNDECIDED | FAILED
    line: str  # 'regression: training 9.8 % slower (7.1-12.4 %, 95 % CI over 12 pairs)'
    final: bool = False  # more rounds cannot change it (a side failed: no figure to decide on)

    @property
    def decided(self) -> bool:
        return self.outcome != UNDECIDED


def _said(verdict: Verdict) -> str:
    """'9.8 % slower (B/A 0.876-0.929, 95 % CI over 12 pairs)': what the verdict rests on; 'N %
    more' / 'less' for memory."""
    if verdict.ratio is None:
        return ""
    ratio = verdict.ratio or 1.0
    more, less = ("more", "less") if verdict.lower_is_better else ("faster", "slower")
    share = f"{abs(1 - ratio):.1%}".replace("%", " %")
    text = " the same" if ratio == 1 else f" {share} {more if ratio > 1 else less}"
    if verdict.low is None or verdict.high is None or verdict.low == verdict.high:
        return text
    if not verdict.pairs:
        what = "the repeated runs' range" if verdict.lower_is_better else "the two points' bands"
        return f"{text} (B/A {verdict.low:.3f}-{verdict.high:.3f}, {what})"
    left = f"; {verdict.unpaired} left out: one side loaded, the other not" if verdict.unpaired else ""
    return f"{text} (B/A {verdict.low:.3f}-{verdict.high:.3f}, 95 % CI over {verdict.pairs} pairs{left})"


def _no_baseline(label: str, why: str) -> Decision:
    return Decision(MAIN_PHASES[0], UNDECIDED, f"{UNDECIDED}: {label}: the baseline has no figure ({why})",
                    True)


def _no_figure(label: str, phase: str, why: str) -> Decision:
    return Decision(phase, FAILED, f"{FAILED}: {label}: {PHASE_NAMES[phase]}: no figure"
                    f" where the baseline has one ({why})", True)


def decision(label: str, phase: str, verdict: Verdict | None, tolerance: float,
             memory: tuple[float | None, float | None] = (None, None)) -> Decision:
    """The decision the judge's verdict makes, worded with the figures it rests on (`memory`:
    A's and B's peak bytes, for the line)."""
    name = f"{label}: {'peak memory' if phase == MEMORY else PHASE_NAMES[phase]}"
    if verdict is None:
        return Decision(phase, UNDECIDED, f"{UNDECIDED}: {name}: nothing to compare")
    said = f"{name}{_said(verdict)}"
    if phase == MEMORY:
        said += f" ({size(memory[0])} -> {size(memory[1])})"
    if verdict.kind == "real":
        outcome = REGRESSION if verdict.worse else IMPROVEMENT
        return Decision(phase, outcome, f"{outcome}: {said}, beyond {tolerance:.0%}")
    if verdict.kind == "same":
        return Decision(phase, NO_CHANGE, f"{NO_CHANGE}: {said}, within {tolerance:.0%}")
    return Decision(phase, UNDECIDED, f"{UNDECIDED}: {said}: {verdict.reason}")


def decisions(comparison: Comparison) -> Iterator[Decision]:
    """Every non-baseline point of every row, each phase the baseline measured."""
    for _, point in comparison.points.iterrows():
        ref = comparison.point(str(point["row"]), comparison.baseline)
        if point["variant"] == comparison.baseline or ref is None:
            continue
        label = comparison.point_label(point)
        if ref["status"] not in USABLE:
            yield _no_baseline(label, f"{ref['status']}: {ref['reason']}")
            continue
        verdicts = comparison.verdicts.get((str(point["row"]), point["variant"]), {})
        for phase in MAIN_PHASES:
            metric = f"{phase}_examples_per_second"
            if not is_finite_number(ref[metric]):
                continue
            if point["status"] not in USABLE or not is_finite_number(point[metric]):
                yield _no_figure(label, phase, f"{point['status']}: {point['reason']}")
                continue
            yield decision(label, phase, verdicts.get(f"{phase}_speedup"), comparison.tolerance)


def changes(result: Diff) -> Iterator[Decision]:
    """Every point B shares with A: each phase A measured, and peak memory."""
    no_baseline: set[str] = set()
    for change in result.changes:
        if change.status_a not in USABLE:
            if change.point not in no_baseline:
                no_baseline.add(change.point)
                yield _no_baseline(change.point, change.status_a)
        elif change.metric.endswith("_examples_per_second") and change.a is not None:
            phase = change.metric.split("_", 1)[0]
            yield (_no_figure(change.point, phase, change.status_b) if change.b is None
                   else decision(change.point, phase, change.verdict, result.tolerance))
        elif change.unit == "bytes" and change.verdict is not None:
            yield decision(change.point, MEMORY, change.verdict, result.tolerance, (change.a, change.b))


def exit_status(found: Iterable[Decision]) -> int:
    """1 on a regression or a side that failed where the baseline ran; else 3 if one is undecided; else 0."""
    found = list(found)
    if any(d.outcome in (REGRESSION, FAILED) for d in found):
        return FOUND_REGRESSION
    return NOT_DECIDED if any(not d.decided for d in found) else 0
