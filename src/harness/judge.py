"""The one judge of differences: samples of a point -> its band; two points (their bands, and the jobs they
ran side by side) -> a verdict; a set of points -> the fastest, decided or not; peak memory sizes -> a verdict
by the same rule. The standard library only. The table, the gate, harness-report, the MLflow parent run and
autotune all decide through it (docs/sweeps.md, "Verdicts: real, same, inconclusive", states the rules)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace

TOLERANCE = 0.05  # a change smaller than 5 % is not called real (the table, harness-report)
MIN_SPREAD = 0.01  # a single sample's own band is at least +/- 1 %
MAX_SPREAD = 0.9
JOB_Z = 1.39  # job-to-job noise (log sd) x this / sqrt(n): the least half-width of a band;
# two bands that just do not overlap then differ at about the 5 % level (Goldstein & Healy 1995)
PAIR_Z = 1.96  # a few pairs' mean log-ratio +/- this x its standard error: a 95 % interval
PRIOR_DOF = 2  # weight of a noise prior against the groups measured
CONFIDENCE = 0.95  # of a paired interval (Wilcoxon's signed-rank interval)
# An outlier: this many times further from the median than any other, and this many noise sds away (sweeps.md)
OUTLIER, OUTLIER_SDS = 2.0, 4.0
SIZE_FLOOR = 2 * 2**20  # bytes: one setting's peak memory readings vary by this much (a CPU's resident set)
WITHIN_FLOOR = f"within {SIZE_FLOOR // 2**20} MiB"  # a size verdict's reason, and the tables' legends
ONE_JOB = "a side rests on one counted job, and nothing measured the noise between runs (repeat=3)"
ACROSS_ROUNDS = "no round where both ran quiet: jobs of different rounds differ by the machine's drift"
ONE_ORDER = "both ran quiet only in rounds of one order: drift within a round would read as a difference"


@dataclass(frozen=True)
class Sample:
    """One measurement of a point (a repeat, a round's job, a seed's job) for one phase."""

    # examples/s over its measured window, the run's own figure: a fair scheduler's share of the
    # CPUs settles over a window, while which steps a neighbour preempts does not (a loaded
    # job's median step jumps between modes: pair ratios of identical code spread 0.26 on
    # medians, 0.10 on windows, beside two CPU hogs). Higher is better.
    figure: float
    spread: float | None = None  # its own band's half-width, a share of the figure
    contended: bool = False  # other processes took the machine during its window
    noisy: bool = False  # its step times vary too much for its figure to be precise
    # `figure` less the time its threads waited, runnable, for a CPU (x 1 / (1 -
    # run_delay_share)): what a loaded pair compares. Others' load comes and goes within a pair;
    # this takes it out where the window's figure keeps it (pair ratios of identical code
    # spread 0.04-0.06 on it, 0.08-0.11 on windows, beside two CPU hogs). None: no schedstat.
    on_cpu: float | None = None

    @property
    def counted(self) -> bool:
        return not (self.contended or self.noisy)


@dataclass(frozen=True)
class Band:
    """A point's figure and interval over its counted samples."""

    value: float | None  # the counted samples' median (none counted: all samples'); None: none
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
        return self.counted > 0 and self.low is not None and self.high is not None

    @property
    def between_runs(self) -> bool:
        """Two or more counted samples, or a band widened by the job-to-job noise."""
        return self.known and (self.counted > 1 or self.noise_known)

    def describe(self) -> str:
        if not self.counted:
            return f"no figure ({self.why})"
        if not self.known:
            return f"{self.value:,.1f} ex/s ({self.counted} job)"
        jobs = f"{self.counted} job{'s' if self.counted != 1 else ''}"
        left = f", {self.left_out}" if self.left_out else ""
        return f"{self.value:,.1f} ex/s ({self.low:,.1f}-{self.high:,.1f}, {jobs}{left})"


def _without_outlier(figures: Sequence[float], noise: float) -> list[float]:
    """Of three or more figures, all but the farthest from their median where it lies OUTLIER times
    further than any other and OUTLIER_SDS x `noise` away (the noise between runs; unknown: their
    own robust_noise): one job widens no band, nor the noise, past what the others show."""
    if len(figures) < 3:
        return list(figures)
    noise = noise or robust_noise([figures])
    middle = statistics.median(figures)
    far = sorted(range(len(figures)), key=lambda i: -abs(math.log(figures[i] / middle)))
    first, second = (abs(math.log(figures[i] / middle)) for i in far[:2])
    far_out = first > OUTLIER * second and first > OUTLIER_SDS * noise
    return [f for i, f in enumerate(figures) if i != far[0]] if far_out else list(figures)


def robust_noise(groups: Sequence[Sequence[float]]) -> float:
    """The noise between runs that one far figure cannot move: 1.4826 x the median distance of a log
    figure from its group's median (an odd group's own median left out; x sqrt(n / (n - 1)), as
    residuals are); 0: no group of two or more."""
    distances: list[float] = []
    for figures in groups:
        if len(figures) < 2:
            continue
        logs = [math.log(v) for v in figures]
        middle, scale = statistics.median(logs), math.sqrt(len(logs) / (len(logs) - 1))
        distances += sorted(abs(x - middle) * scale for x in logs)[len(logs) % 2:]
    return 1.4826 * statistics.median(distances) if distances else 0.0


def band_of(samples: Sequence[Sample], job_noise: float = 0.0) -> Band | None:
    """The band of a point's samples: their median with min..max (an outlier left out of the
    range), at least as wide as JOB_Z x `job_noise` (the log sd between runs of one point) /
    sqrt(counted). One sample with no known own spread and no job noise has no interval. With no
    sample counted, the value is all samples' median and there is no interval. None: no sample."""
    if not samples:
        return None
    total = len(samples)
    contended = sum(s.contended for s in samples)
    noisy = sum(s.noisy and not s.contended for s in samples)
    left_out = ", ".join(f"{name} {count}/{total}" for name, count
                         in (("contended", contended), ("noisy", noisy)) if count) or None
    counted = [s for s in samples if s.counted]
    if not counted:
        return Band(statistics.median(s.figure for s in samples), None, None, 0, total, left_out)
    figures = [s.figure for s in counted]
    value = statistics.median(figures)
    own = counted[0].spread if len(counted) == 1 else None
    if len(counted) == 1 and own is None and not job_noise:
        return Band(value, None, None, 1, total, left_out)
    half = JOB_Z * job_noise / math.sqrt(len(counted))
    kept = _without_outlier(figures, job_noise)
    lows, highs = [min(kept), value * math.exp(-half)], [max(kept), value * math.exp(half)]
    if own is not None:
        own = min(max(own, MIN_SPREAD), MAX_SPREAD)
        lows.append(value * (1 - own))
        highs.append(value * (1 + own))
    return Band(value, min(lows), max(highs), len(counted), total, left_out, bool(job_noise))


def job_noise(groups: Sequence[Sequence[float]], prior: float = 0.0) -> float:
    """The pooled sd of log figures within groups (one point's jobs, an outlier left out), shrunk
    towards `prior`."""
    squares, free, robust = 0.0, 0, robust_noise(groups)
    for figures in groups:
        logs = [math.log(v) for v in _without_outlier(figures, robust)]
        if len(logs) < 2:
            continue
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        free += len(logs) - 1
    if not free:
        return prior
    weight = PRIOR_DOF if prior else 0
    return math.sqrt((squares + weight * prior ** 2) / (free + weight))


@dataclass(frozen=True)
class Verdict:
    """B against A: rates (higher is better) or, `lower_is_better`, memory."""

    kind: str  # real | same | inconclusive
    ratio: float | None  # B / A: of the bands' values, or the pairs' estimate
    low: float | None
    high: float | None
    reason: str | None = None  # why inconclusive: 'B: contended 2/2', 'noisy: B/A could be ...'
    pairs: int | None = None  # paired: the pairs of jobs it stands on; None: from two bands
    unpaired: int = 0  # paired: pairs left out (one side contended or noisy, the other not)
    lower_is_better: bool = False

    @property
    def worse(self) -> bool:
        """B is worse than A: slower, or (lower_is_better) larger."""
        if self.ratio is None:
            return False
        return self.ratio > 1 if self.lower_is_better else self.ratio < 1

    @property
    def real(self) -> bool:
        return self.kind == "real"


def past(ratio: float, tolerance: float) -> bool:
    """`ratio` is further from 1.0 than `tolerance` either way (0.1: below 0.9 or above 1/0.9)."""
    return ratio < 1 - tolerance or ratio * (1 - tolerance) > 1


def faster(verdict: Verdict | None) -> bool:
    """B is faster than A beyond the noise and the tolerance the verdict was asked about."""
    return verdict is not None and verdict.real and not verdict.worse


def decide(ratio: float, low: float, high: float, tolerance: float) -> Verdict:
    """`real` when the interval lies wholly past the tolerance on one side, `same` when it lies
    wholly within it, `inconclusive` otherwise (the noise is larger than the change asked about)."""
    if (past(low, tolerance) and past(high, tolerance)) and (low > 1) == (high > 1):
        return Verdict("real", ratio, low, high)
    if not (past(low, tolerance) or past(high, tolerance)):
        return Verdict("same", ratio, low, high)
    return Verdict("inconclusive", ratio, low, high, f"noisy: B/A could be {low:.2f}-{high:.2f}x, not wholly"
                   f" beyond or within the {tolerance:.0%} asked about")


def judge(a: Band | None, b: Band | None, tolerance: float = TOLERANCE) -> Verdict | None:
    """B against A by their bands: ratio B/A within [B.low / A.high, B.high / A.low], decided
    by `decide`; `inconclusive` when a side counted no sample, has no interval, or rests on one
    counted job with no noise between runs measured (ONE_JOB). None: a side has no sample."""
    if a is None or b is None:
        return None
    ratio = b.value / a.value if a.value else None
    undecided = [f"{side}: {band.why}" for side, band in (("A", a), ("B", b)) if not band.counted]
    if undecided:
        return Verdict("inconclusive", ratio, None, None, "; ".join(undecided))
    if not (a.known and b.known):
        return Verdict("inconclusive", ratio, None, None,
                       "each side ran once, with no spread known (repeat=3)")
    verdict = decide(ratio, b.low / a.high, b.high / a.low, tolerance)  # type: ignore[arg-type,operator]
    if verdict.kind != "inconclusive" and not (a.between_runs and b.between_runs):
        return replace(verdict, kind="inconclusive", reason=ONE_JOB)
    return verdict


def judge_sizes(a: Sequence[float], b: Sequence[float], tolerance: float = TOLERANCE) -> Verdict | None:
    """B's sizes (peak memory) against A's, lower is better: B/A of the medians, within the
    min..max pairing of repeated runs (a single run on each side: the ratio alone), by `decide`;
    `same` within SIZE_FLOOR either way. None: A's is 0, or every size is below the floor."""
    if not a or not b or min(a) <= 0 or max(*a, *b) < SIZE_FLOOR:
        return None
    ratio = statistics.median(b) / statistics.median(a)
    low, high = min(b) / max(a), max(b) / min(a)
    if max(b) - min(a) <= SIZE_FLOOR and max(a) - min(b) <= SIZE_FLOOR:
        return Verdict("same", ratio, low, high, WITHIN_FLOOR, lower_is_better=True)
    return replace(decide(ratio, low, high, tolerance), lower_is_better=True)


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


def paired_interval(ratios: Sequence[float], confidence: float = CONFIDENCE, noise: float = 0.0
                    ) -> tuple[float, float, float] | None:
    """(estimate, low, high) of B/A from paired ratios: the Hodges-Lehmann estimate on the log scale with
    Wilcoxon's signed-rank interval, free of any assumed distribution but a symmetric one. Under the pairs
    that interval needs, with the job-to-job `noise` known: the estimate +/- PAIR_Z x its standard error (a
    pair's log-ratio has sd sqrt(2) x noise, or the pairs' own sd where larger). None with too few pairs."""
    if not ratios:
        return None
    logs = [math.log(r) for r in ratios]
    walsh = sorted((x + y) / 2 for i, x in enumerate(logs) for y in logs[i:])
    estimate = statistics.median(walsh)
    cut = signed_rank_cut(len(ratios), confidence)
    if cut is not None:
        return math.exp(estimate), math.exp(walsh[cut]), math.exp(walsh[len(walsh) - 1 - cut])
    if not noise:
        return None
    sd = max(math.sqrt(2) * noise, statistics.stdev(logs) if len(logs) > 2 else 0.0)
    half = PAIR_Z * sd / math.sqrt(len(logs))
    return math.exp(estimate), math.exp(estimate - half), math.exp(estimate + half)


def _pair_rates(a: Sample, b: Sample) -> tuple[float, float]:
    """What a pair compares: both contended, the rates on a CPU (Sample.on_cpu); else their
    figures. Never for a quiet pair: a change's own threads waiting for each other's CPUs (more
    threads than cores) is a real cost, and only others' load is taken out."""
    if a.contended and b.contended and a.on_cpu and b.on_cpu:
        return a.on_cpu, b.on_cpu
    return a.figure, b.figure


def paired(pairs: Sequence[tuple[Sample, Sample]], tolerance: float = TOLERANCE,
           noise: float = 0.0) -> Verdict | None:
    """B against A through jobs that ran side by side (a round's (A, B)), each by its figure (both contended:
    Sample.on_cpu): a load that outlasts a pair slows both alike. A pair counts when both sides were quiet, or
    both were contended or noisy (the load then shows in the pairs' spread); a quiet side against a loaded one
    is left out (`unpaired`). Under 6 counted pairs, only quiet pairs with the job `noise` known decide (the
    noise then sizes the interval). None where there is no interval."""
    kept = [(a, b) for a, b in pairs if a.counted == b.counted]
    quiet = all(a.counted for a, _ in kept)
    rates = [_pair_rates(a, b) for a, b in kept]
    found = paired_interval([rb / ra for ra, rb in rates if ra > 0 and rb > 0], noise=noise if quiet else 0.0)
    if found is None:
        return None
    verdict = decide(*found, tolerance)
    return replace(verdict, pairs=len(kept), unpaired=len(pairs) - len(kept))


@dataclass(frozen=True)
class Evidence:
    """What a point offers a comparison: its band, and its sample in each round (or stage and
    round) where it ran one job, to pair with another point's of the same round."""

    band: Band | None
    rounds: Mapping[Hashable, Sample] = field(default_factory=dict)


def compare(a: Evidence, b: Evidence, tolerance: float = TOLERANCE, noise: float = 0.0) -> Verdict | None:
    """B against A: by their rounds' pairs where those decide (`paired`), else by bands (`judge`) of the
    rounds where both were counted (none: ACROSS_ROUNDS; all even or all odd: ONE_ORDER). None: no sample."""
    shared = sorted((r for r in a.rounds if r in b.rounds), key=str)
    verdict = paired([(a.rounds[r], b.rounds[r]) for r in shared], tolerance, noise)
    if verdict is not None:
        return verdict
    both = [r for r in shared if a.rounds[r].counted and b.rounds[r].counted]
    alone = any(s.counted and r not in both for side in (a, b) for r, s in side.rounds.items())
    one_order = len({r % 2 for r in shared if isinstance(r, int)}) == 2 and len({r % 2 for r in both}) == 1
    if not (shared and (alone or one_order) and a.band and a.band.counted and b.band and b.band.counted):
        return judge(a.band, b.band, tolerance)
    if not both:  # counted bands' values are rates, never 0
        return Verdict("inconclusive", b.band.value / a.band.value, None, None, ACROSS_ROUNDS)
    verdict = judge(*(band_of([side.rounds[r] for r in both], noise) for side in (a, b)), tolerance)
    decided = verdict.kind != "inconclusive"  # by rounds of one order, nothing is
    return replace(verdict, kind="inconclusive", reason=ONE_ORDER) if one_order and decided else verdict


@dataclass(frozen=True)
class Fastest:
    """The fastest of a set of points, and whether it is beyond the others' noise."""

    key: Hashable
    band: Band
    decided: bool
    ties: tuple[Hashable, ...]  # the points it is not beyond
    why: str | None  # why not decided
    settled: bool  # decided, or every tie the same within the tolerance: no round would decide more


def fastest(points: Mapping[Hashable, Evidence], tolerance: float = TOLERANCE,
            noise: float = 0.0) -> Fastest | None:
    """The point with the highest figure (counted ones first); decided when `compare` calls it faster than
    every other beyond the tolerance (through their shared rounds where those decide). None: no point has a
    sample."""
    measured = {k: e for k, e in points.items() if e.band is not None}
    if not measured:
        return None
    top = max(measured, key=lambda k: (measured[k].band.counted > 0, measured[k].band.value))
    verdicts = {k: compare(e, measured[top], tolerance, noise) for k, e in measured.items() if k != top}
    ties = tuple(k for k, v in verdicts.items() if not faster(v))
    same = all(verdicts[k] is not None and verdicts[k].kind == "same" for k in ties)
    why = None
    if len(measured) < 2:
        why = "the only point measured"
    elif ties and all((v := verdicts.get(k)) is not None and v.reason == ONE_JOB for k in ties):
        why = "a point ran once: repeat=N measures the noise between runs"
    elif ties:
        why = f"within the noise of {len(ties)} other" + ("" if len(ties) == 1 else "s")
    settled = why is None or len(measured) < 2 or (bool(ties) and same)
    return Fastest(top, measured[top].band, why is None, ties, why, settled)
