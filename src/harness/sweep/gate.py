"""Each speed-up of a sweep's table as a decision at its threshold: a regression, an
improvement, no change, or undecided (and why). `harness-report DIR --fail-if-worse F` exits by
them; `repeat=auto` adds rounds while one is undecided (docs/ci.md)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.judge import Verdict, judge
from harness.measured import MAIN_PHASES, USABLE, is_finite_number

if TYPE_CHECKING:
    from harness.sweep.table import Comparison

PHASE_NAMES = {"train": "training", "inference": "inference"}
REGRESSION, IMPROVEMENT, NO_CHANGE, UNDECIDED, FAILED = (
    "regression", "improvement", "no change", "undecided", "failed")


@dataclass(frozen=True)
class Decision:
    """One variant against the baseline of its row, for one phase."""

    point: str  # 'code_dir=., batch_size=32'
    phase: str
    outcome: str  # REGRESSION | IMPROVEMENT | NO_CHANGE | UNDECIDED | FAILED
    line: str  # 'regression: training 9.8 % slower (7.1-12.4 %, 95 % CI over 12 pairs)'
    final: bool = False  # more rounds cannot change it (a side failed: no figure to decide on)

    @property
    def decided(self) -> bool:
        return self.outcome != UNDECIDED


def _share(ratio: float) -> str:
    """B/A of rates as 'N % slower' / 'N % faster' (of examples/s)."""
    return f"{abs(1 - ratio):.1%} {'slower' if ratio < 1 else 'faster'}".replace("%", " %", 1)


def _decided(point: Any, ref: Any, phase: str, tolerance: float) -> Verdict | None:
    """The verdict the table's speed-up has, with the figures it was decided on: the pairs',
    else the two bands' (the table's ratio is of the ex/s shown, contended samples included)."""
    ratio = f"{phase}_speedup"
    if is_finite_number(point.get(f"{ratio}_pairs")):
        return Verdict(point[f"{ratio}_verdict"], point[ratio], point[f"{ratio}_min"],
                       point[f"{ratio}_max"], point[f"{ratio}_verdict_reason"],
                       int(point[f"{ratio}_pairs"]), int(point.get(f"{ratio}_unpaired") or 0))
    return judge(ref[f"{phase}_band"], point[f"{phase}_band"], tolerance)


def _said(verdict: Verdict) -> str:
    """'9.8 % slower (B/A 0.876-0.929, 95 % CI over 12 pairs)': what the verdict rests on."""
    if verdict.ratio is None:
        return ""
    text = f" {_share(verdict.ratio)}"
    if verdict.low is None or verdict.high is None:
        return text
    if not verdict.pairs:
        return f"{text} (B/A {verdict.low:.3f}-{verdict.high:.3f}, the two points' bands)"
    left = (f"; {verdict.unpaired} left out: one side loaded, the other not"
            if verdict.unpaired else "")
    return (f"{text} (B/A {verdict.low:.3f}-{verdict.high:.3f}, 95 % CI over {verdict.pairs}"
            f" pairs{left})")


def decisions(comparison: Comparison) -> Iterator[Decision]:
    """Every non-baseline point of every row, each phase the baseline measured."""
    frame = comparison.points
    tolerance = comparison.tolerance
    for _, point in frame.iterrows():
        if point["variant"] == comparison.baseline:
            continue
        base = frame[(frame["row"] == point["row"]) & (frame["variant"] == comparison.baseline)]
        if base.empty:
            continue
        ref = base.iloc[0]
        label = comparison.point_label(point)
        if ref["status"] not in USABLE:
            yield Decision(label, MAIN_PHASES[0], UNDECIDED, f"{UNDECIDED}: {label}: the"
                           f" baseline has no figure ({ref['status']}: {ref['reason']})", True)
            continue
        for phase in MAIN_PHASES:
            metric = f"{phase}_examples_per_second"
            name = f"{label}: {PHASE_NAMES[phase]}"
            measured = {side: is_finite_number(p[metric]) for side, p in (("a", ref), ("b", point))}
            if not measured["a"]:
                continue
            if point["status"] not in USABLE or not measured["b"]:
                yield Decision(label, phase, FAILED, f"{FAILED}: {name}: no figure where the"
                               f" baseline has one ({point['status']}: {point['reason']})", True)
                continue
            decided = _decided(point, ref, phase, tolerance)
            if decided is None:
                yield Decision(label, phase, UNDECIDED, f"{UNDECIDED}: {name}: each side ran"
                               " once, with no spread known")
                continue
            verdict, said = decided.kind, f"{name}{_said(decided)}"
            bands = (ref[f"{phase}_band"], point[f"{phase}_band"])
            if (verdict in ("real", "same") and not decided.pairs
                    and not all(band is not None and band.between_runs for band in bands)):
                # one counted job's own spread says nothing of the noise between processes
                yield Decision(label, phase, UNDECIDED, f"{UNDECIDED}: {said}: a side rests on one"
                               " counted job, and no point of the sweep measured the noise"
                               " between runs")
                continue
            if verdict == "real":
                outcome = REGRESSION if decided.worse else IMPROVEMENT
                yield Decision(label, phase, outcome, f"{outcome}: {said}, beyond {tolerance:.0%}")
            elif verdict == "same":
                yield Decision(label, phase, NO_CHANGE,
                               f"{NO_CHANGE}: {said}, within {tolerance:.0%}")
            else:
                yield Decision(label, phase, UNDECIDED, f"{UNDECIDED}: {said}: {decided.reason}")
