"""Each comparison as a decision at its threshold: a regression, an improvement, no change,
or undecided (and why). Within one sweep (`decisions`: each variant against the baseline of its
row) or between two (`changes`: B's points against A's); `harness-report --fail-if-worse F`
exits by them (`exit_status`), and `repeat=auto` adds rounds while one is undecided
(docs/ci.md)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.judge import Band, Verdict, judge
from harness.measured import MAIN_PHASES, USABLE, is_finite_number

if TYPE_CHECKING:
    from harness.sweep.diff import Change, Diff
    from harness.sweep.table import Comparison

PHASE_NAMES = {"train": "training", "inference": "inference"}
REGRESSION, IMPROVEMENT, NO_CHANGE, UNDECIDED, FAILED = (
    "regression", "improvement", "no change", "undecided", "failed")
FOUND_REGRESSION, NOT_DECIDED = 1, 3  # exit statuses of the gate (0: decided, none worse)


@dataclass(frozen=True)
class Decision:
    """One variant against its baseline (or B's point against A's), for one phase or memory."""

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


def _no_baseline(label: str, why: str) -> Decision:
    return Decision(label, MAIN_PHASES[0], UNDECIDED,
                    f"{UNDECIDED}: {label}: the baseline has no figure ({why})", True)


def _no_figure(label: str, phase: str, why: str) -> Decision:
    return Decision(label, phase, FAILED, f"{FAILED}: {label}: {PHASE_NAMES[phase]}: no figure"
                    f" where the baseline has one ({why})", True)


def _speed(label: str, phase: str, verdict: Verdict | None,
           bands: Sequence[Band | None], tolerance: float) -> Decision:
    """The decision a speed verdict makes, worded with the figures it rests on."""
    name = f"{label}: {PHASE_NAMES[phase]}"
    if verdict is None:
        return Decision(label, phase, UNDECIDED,
                        f"{UNDECIDED}: {name}: each side ran once, with no spread known")
    said = f"{name}{_said(verdict)}"
    if (verdict.kind in ("real", "same") and not verdict.pairs
            and not all(band is not None and band.between_runs for band in bands)):
        # one counted job's own spread says nothing of the noise between processes
        return Decision(label, phase, UNDECIDED, f"{UNDECIDED}: {said}: a side rests on one"
                        " counted job, and nothing measured the noise between runs (repeat=3)")
    if verdict.kind == "real":
        outcome = REGRESSION if verdict.worse else IMPROVEMENT
        return Decision(label, phase, outcome, f"{outcome}: {said}, beyond {tolerance:.0%}")
    if verdict.kind == "same":
        return Decision(label, phase, NO_CHANGE, f"{NO_CHANGE}: {said}, within {tolerance:.0%}")
    return Decision(label, phase, UNDECIDED, f"{UNDECIDED}: {said}: {verdict.reason}")


def decisions(comparison: Comparison) -> Iterator[Decision]:
    """Every non-baseline point of every row, each phase the baseline measured."""
    frame = comparison.points
    for _, point in frame.iterrows():
        if point["variant"] == comparison.baseline:
            continue
        base = frame[(frame["row"] == point["row"]) & (frame["variant"] == comparison.baseline)]
        if base.empty:
            continue
        ref = base.iloc[0]
        label = comparison.point_label(point)
        if ref["status"] not in USABLE:
            yield _no_baseline(label, f"{ref['status']}: {ref['reason']}")
            continue
        for phase in MAIN_PHASES:
            metric = f"{phase}_examples_per_second"
            if not is_finite_number(ref[metric]):
                continue
            if point["status"] not in USABLE or not is_finite_number(point[metric]):
                yield _no_figure(label, phase, f"{point['status']}: {point['reason']}")
                continue
            yield _speed(label, phase, _decided(point, ref, phase, comparison.tolerance),
                         (ref[f"{phase}_band"], point[f"{phase}_band"]), comparison.tolerance)


def changes(result: Diff) -> Iterator[Decision]:
    """Every point B shares with A: each phase A measured, on the two points' bands, and
    peak memory (its own rule: beyond the threshold and the repeated runs' spread)."""
    no_baseline: set[str] = set()
    for change in result.changes:
        if change.status_a not in USABLE:
            if change.point not in no_baseline:
                no_baseline.add(change.point)
                yield _no_baseline(change.point, change.status_a)
        elif change.metric.endswith("_examples_per_second") and change.a is not None:
            phase = change.metric.split("_", 1)[0]
            if change.b is None:
                yield _no_figure(change.point, phase, change.status_b)
            else:
                yield _speed(change.point, phase, change.verdict, (change.band_a, change.band_b),
                             change.tolerance)
        elif change.unit == "bytes" and change.ratio is not None:
            yield _memory(change)


def _memory(change: Change) -> Decision:
    more = change.ratio - 1  # type: ignore[operator]
    share = f"{abs(more):.1%} {'more' if more > 0 else 'less'}".replace("%", " %", 1)
    said = (f"{change.point}: peak memory {share if more else 'the same'}"
            f" ({_mib(change.a)} -> {_mib(change.b)} MiB)")
    if change.within_spread:
        return Decision(change.point, "memory", NO_CHANGE,
                        f"{NO_CHANGE}: {said}, within the repeated runs' spread")
    if abs(more) <= change.tolerance:
        return Decision(change.point, "memory", NO_CHANGE,
                        f"{NO_CHANGE}: {said}, within {change.tolerance:.0%}")
    outcome = REGRESSION if more > 0 else IMPROVEMENT
    return Decision(change.point, "memory", outcome,
                    f"{outcome}: {said}, beyond {change.tolerance:.0%}")


def _mib(size: float | None) -> str:
    mib = (size or 0) / 2**20
    return f"{mib:,.1f}" if mib < 100 else f"{mib:,.0f}"


def exit_status(found: Iterable[Decision]) -> int:
    """1 on a regression or a side that failed where the baseline ran; else 3 when one is
    undecided; else 0."""
    found = list(found)
    if any(d.outcome in (REGRESSION, FAILED) for d in found):
        return FOUND_REGRESSION
    return NOT_DECIDED if any(not d.decided for d in found) else 0
