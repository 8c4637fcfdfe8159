"""The one judge of differences: samples of a point -> its band; two bands, or the jobs two
points ran side by side, -> a verdict; a set of bands -> the fastest, decided or not. The
standard library only. The table, harness-report, the MLflow parent run and autotune all decide
through it (docs/sweeps.md, "Verdicts: real, same, inconclusive", states the rules)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace

TOLERANCE = 0.05  # a change smaller than 5 % is not called real (the table, harness-report)
MIN_SPREAD = 0.01  # a single sample's own band is at least +/- 1 %
MAX_SPREAD = 0.9
JOB_Z = 1.39  # job-to-job noise (log sd) x this / sqrt(n): the least half-width of a band;
# two bands that just do not overlap then differ at about the 5 % level (Goldstein & Healy 1995)
PRIOR_DOF = 2  # weight of a noise prior against the groups measured
CONFIDENCE = 0.95  # of a paired interval (Wilcoxon's signed-rank interval)


@dataclass(frozen=True)
class Sample:
    """One measurement of a point (a repeat, a round's job, a seed's job) for one phase."""

    figure: float  # examples/s, higher is better
    spread: float | None = None  # its own band's half-width, a share of the figure
    contended: bool = False  # other processes took the machine during its window
    noisy: bool = False  # its step times vary too much for its figure to be precise
    # examples/s over its whole measured window: a fair scheduler's share of the CPUs settles
    # over a window, while which steps a neighbour preempts does not (a loaded job's median
    # step jumps between modes: pair ratios of identical code spread 0.26 on medians, 0.10 on
    # windows, measured beside two CPU hogs). None: the figure stands for it.
    rate: float | None = None
    # `rate` over the window less the time its threads waited, runnable, for a CPU (x 1 / (1 -
    # run_delay_share)): what a loaded pair compares. Others' load comes and goes within a pair;
    # this takes it out where the window rate keeps it (pair ratios of identical code spread
    # 0.04-0.06 on it, 0.08-0.11 on windows, beside two CPU hogs). None: no schedstat.
    on_cpu: float | None = None

    @property
    def counted(self) -> bool:
        return not (self.contended or self.noisy)


@dataclass(frozen=True)
class Band:
    """A point's figure and interval over its counted samples."""

    value: float | None  # the counted samples' median; None: none counted
    low: float | None  # None: not known (one sample with no spread) or none counted
    high: float | None
    counted: int
    total: int
    left_out: str | None = None  # 'contended 1/3, noisy 1/3'
    noise_known: bool = False  # the job-to-job noise widened it (measured, or a prior)

    @property
    def why(self) -> str | None:
        """Why no band: 'contended 2/2' (None when a sample counted)."""
        return None if self.counted else self.left_out or "no sample"

    @property
    def known(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def between_runs(self) -> bool:
        """Two or more counted samples, or a band widened by the job-to-job noise."""
        return self.known and (self.counted > 1 or self.noise_known)

    def describe(self) -> str:
        if self.value is None:
            return f"no figure ({self.why})"
        if not self.known:
            return f"{self.value:,.1f} ex/s ({self.counted} job)"
        jobs = f"{self.counted} job{'s' if self.counted != 1 else ''}"
        left = f", {self.left_out}" if self.left_out else ""
        return f"{self.value:,.1f} ex/s ({self.low:,.1f}-{self.high:,.1f}, {jobs}{left})"


def band_of(samples: Sequence[Sample], job_noise: float = 0.0) -> Band | None:
    """The band of a point's samples: their median with min..max, at least as wide as
    JOB_Z x `job_noise` (the log sd between runs of one point) / sqrt(counted). One sample
    with no known own spread and no job noise has no interval. None without a sample."""
    if not samples:
        return None
    total = len(samples)
    contended = sum(s.contended for s in samples)
    noisy = sum(s.noisy and not s.contended for s in samples)
    left_out = ", ".join(f"{name} {count}/{total}" for name, count
                         in (("contended", contended), ("noisy", noisy)) if count) or None
    counted = [s for s in samples if s.counted]
    if not counted:
        return Band(None, None, None, 0, total, left_out)
    figures = [s.figure for s in counted]
    value = statistics.median(figures)
    own = counted[0].spread if len(counted) == 1 else None
    if len(counted) == 1 and own is None and not job_noise:
        return Band(value, None, None, 1, total, left_out)
    half = JOB_Z * job_noise / math.sqrt(len(counted))
    lows, highs = [min(figures), value * math.exp(-half)], [max(figures), value * math.exp(half)]
    if own is not None:
        own = min(max(own, MIN_SPREAD), MAX_SPREAD)
        lows.append(value * (1 - own))
        highs.append(value * (1 + own))
    low, high = min(lows), max(highs)
    return Band(value, low, high, len(counted), total, left_out, bool(job_noise))


def job_noise(groups: Sequence[Sequence[float]], prior: float = 0.0) -> float:
    """The pooled sd of log figures within groups (one point's jobs), shrunk towards `prior`."""
    squares, free = 0.0, 0
    for figures in groups:
        if len(figures) < 2:
            continue
        logs = [math.log(v) for v in figures]
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        free += len(logs) - 1
    if not free:
        return prior
    weight = PRIOR_DOF if prior else 0
    return math.sqrt((squares + weight * prior ** 2) / (free + weight))


@dataclass(frozen=True)
class Verdict:
    """B against A on rates (higher is better)."""

    kind: str  # real | same | inconclusive
    ratio: float | None  # B / A: of the bands' values, or the pairs' estimate; None when a side
    # counted no sample
    low: float | None
    high: float | None
    reason: str | None = None  # why inconclusive: 'B: contended 2/2', 'noisy: B/A could be ...'
    pairs: int | None = None  # paired: the pairs of jobs it stands on; None: from two bands
    unpaired: int = 0  # paired: pairs left out (one side contended or noisy, the other not)

    @property
    def worse(self) -> bool:
        """B is slower than A."""
        return self.ratio is not None and self.ratio < 1

    @property
    def regression(self) -> bool:
        return self.kind == "real" and self.worse

    @property
    def real(self) -> bool:
        return self.kind == "real"


def past(ratio: float, tolerance: float) -> bool:
    """`ratio` is further from 1.0 than `tolerance` either way (0.1: below 0.9 or above 1/0.9)."""
    return ratio < 1 - tolerance or ratio * (1 - tolerance) > 1


def decide(ratio: float, low: float, high: float, tolerance: float) -> Verdict:
    """`real` when the interval lies wholly past the tolerance on one side, `same` when it lies
    wholly within it, `inconclusive` otherwise (the noise is larger than the change asked about)."""
    if (past(low, tolerance) and past(high, tolerance)) and (low > 1) == (high > 1):
        return Verdict("real", ratio, low, high)
    if not (past(low, tolerance) or past(high, tolerance)):
        return Verdict("same", ratio, low, high)
    return Verdict("inconclusive", ratio, low, high,
                   f"noisy: B/A could be {low:.2f}-{high:.2f}x, not wholly beyond or within the"
                   f" {tolerance:.0%} asked about")


def judge(a: Band | None, b: Band | None, tolerance: float = TOLERANCE) -> Verdict | None:
    """B against A by their bands: ratio B/A within [B.low / A.high, B.high / A.low], decided
    by `decide`; `inconclusive` when a side counted no sample. None where there is nothing to
    judge (a side has no sample, or one sample with no interval known)."""
    if a is None or b is None:
        return None
    undecided = [f"{side}: {band.why}" for side, band in (("A", a), ("B", b)) if not band.counted]
    if undecided:
        return Verdict("inconclusive", None, None, None, "; ".join(undecided))
    if not (a.known and b.known) or not a.value:
        return None
    return decide(b.value / a.value, b.low / a.high, b.high / a.low,  # type: ignore[operator]
                  tolerance)


def signed_rank_cut(n: int, confidence: float = CONFIDENCE) -> int | None:
    """The largest c with P(W <= c) <= (1 - confidence) / 2 for Wilcoxon's signed-rank statistic
    W of n pairs, from its exact null distribution; None when even c = 0 is more likely than
    that (under 6 pairs at 95 %)."""
    counts = [1] + [0] * (n * (n + 1) // 2)  # ways to reach each rank sum
    for rank in range(1, n + 1):
        for total in range(len(counts) - 1, rank - 1, -1):
            counts[total] += counts[total - rank]
    tail, cut, seen = (1 - confidence) / 2 * 2 ** n, None, 0
    for c, ways in enumerate(counts):
        seen += ways
        if seen > tail:
            break
        cut = c
    return cut


def paired_interval(ratios: Sequence[float], confidence: float = CONFIDENCE
                    ) -> tuple[float, float, float] | None:
    """(estimate, low, high) of B/A from paired ratios: the Hodges-Lehmann estimate and
    Wilcoxon's signed-rank interval on the log scale. Free of any assumed distribution but a
    symmetric one, and one pair hit by a burst moves it little. None with too few pairs."""
    cut = signed_rank_cut(len(ratios), confidence)
    if cut is None:
        return None
    logs = [math.log(r) for r in ratios]
    walsh = sorted((x + y) / 2 for i, x in enumerate(logs) for y in logs[i:])
    return (math.exp(statistics.median(walsh)), math.exp(walsh[cut]),
            math.exp(walsh[len(walsh) - 1 - cut]))


def _pair_rates(a: Sample, b: Sample) -> tuple[float, float]:
    """What a pair compares: both contended, the rates on a CPU (Sample.on_cpu); else the
    windows' rates. Never for a quiet pair: a change's own threads waiting for each other's CPUs
    (more threads than cores) is a real cost, and only others' load is taken out."""
    if a.contended and b.contended and a.on_cpu and b.on_cpu:
        return a.on_cpu, b.on_cpu
    return a.rate or a.figure, b.rate or b.figure


def paired(pairs: Sequence[tuple[Sample, Sample]], tolerance: float = TOLERANCE) -> Verdict | None:
    """B against A through jobs that ran side by side (a round's (A, B)), each by its window's
    examples/s (Sample.rate; both contended: Sample.on_cpu): a load that outlasts a pair slows
    both alike. A pair counts when both sides were quiet, or both were contended or noisy (the
    load then shows in the pairs' spread); a quiet side against a loaded one is left out
    (`unpaired`). None with fewer counted pairs than an interval at CONFIDENCE needs."""
    kept = [_pair_rates(a, b) for a, b in pairs if a.counted == b.counted]
    found = paired_interval([b / a for a, b in kept if a > 0 and b > 0])
    if found is None:
        return None
    verdict = decide(*found, tolerance)
    return replace(verdict, pairs=len(kept), unpaired=len(pairs) - len(kept))


def beyond(slower: Band | None, faster: Band | None, tolerance: float = TOLERANCE) -> bool:
    """`faster` is faster than `slower` beyond noise and tolerance."""
    verdict = judge(slower, faster, tolerance)
    return verdict is not None and verdict.real and not verdict.worse


@dataclass(frozen=True)
class Fastest:
    """The fastest of a set of points, and whether it is beyond the others' noise."""

    key: Hashable
    band: Band
    decided: bool
    ties: tuple[Hashable, ...]  # the points it is not beyond
    why: str | None  # why not decided


def fastest(bands: Mapping[Hashable, Band | None], tolerance: float = TOLERANCE,
            simplest: Callable[[Hashable], object] | None = None) -> Fastest | None:
    """The point with the highest counted figure; decided when it is beyond every other's
    noise (`judge` says real) and every band holds the noise between runs. `simplest`, when
    given, picks among the tied the one it ranks lowest (the tie rule of autotune)."""
    measured = {k: b for k, b in bands.items() if b is not None and b.value is not None}
    if not measured:
        return None
    top = max(measured, key=lambda k: measured[k].value)  # type: ignore[arg-type,return-value]
    ties = tuple(k for k, b in measured.items() if k != top and not beyond(b, measured[top], tolerance))
    if simplest is not None and ties:
        chosen = min((top, *ties), key=simplest)  # type: ignore[arg-type]
        ties = tuple(k for k in (top, *ties) if k != chosen)
        top = chosen
    why = None
    if ties:
        why = "within the noise of " + str(len(ties)) + (" other" if len(ties) == 1 else " others")
    elif len(measured) < 2:
        why = "the only point measured"
    elif not all(b.between_runs for b in measured.values()):
        why = "a point ran once: repeat=N measures the noise between runs"
    uncounted = [k for k, b in bands.items() if b is not None and b.value is None]
    if uncounted and why is None:
        why = f"{len(uncounted)} point(s) counted no sample (contended or noisy)"
    return Fastest(top, measured[top], why is None, ties, why)
