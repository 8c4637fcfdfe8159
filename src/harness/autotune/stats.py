"""A candidate's figure in a stage: the objective's rate, charged for compile, with its spread.

Score of one job: examples per step / (seconds per step + compile charge / planned steps),
per phase; objective `both` is the geometric mean of training's and inference's (scale-free,
so no reference point is needed to rank). Several jobs (rounds) of a candidate in a stage:
the median score and the range from the lowest job to the highest, at least a factor
1 + noise_floor/2 either way; one job: a factor 1 + max(noise_floor, 2 x the sweep's
job-to-job noise) either way, since a figure measured once has an unknown spread, not a zero
one.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from harness.autotune.outcome import Outcome
from harness.autotune.settings import Settings

PHASES = {"training": ("train",), "inference": ("inference",), "both": ("train", "inference")}
PRIOR_DOF = 2  # weight of the noise prior: one calibration pair alone is a rough guess


def job_score(outcome: Outcome, settings: Settings) -> tuple[float, float, float] | None:
    """(score, low, high) of one job in examples/s, or None when it did not measure the
    objective."""
    if not outcome.measured:
        return None
    scores, lows, highs = [], [], []
    for phase in PHASES[settings.objective]:
        figures = outcome.phases.get(phase)
        if figures is None or figures.seconds_per_step <= 0 or figures.examples_per_step <= 0:
            return None
        charged = figures.seconds_per_step + outcome.compile_charge_s / settings.planned_steps
        score = figures.examples_per_step / charged
        scale = figures.seconds_per_step / charged  # the charge scales a job's own range too
        low, high = figures.rate_range or (None, None)
        scores.append(score)
        lows.append(low * scale if low else score)
        highs.append(high * scale if high else score)
    return _geomean(scores), _geomean(lows), _geomean(highs)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclass(frozen=True)
class Estimate:
    value: float  # examples/s
    low: float
    high: float
    jobs: int
    trusted: bool
    why: tuple[str, ...] = ()

    def overlaps(self, other: Estimate) -> bool:
        return self.low <= other.high and other.low <= self.high

    def tied(self, other: Estimate, min_gain: float) -> bool:
        """No difference worth a more complex setting: the spreads overlap, or the gain is
        under `min_gain`."""
        ratio = max(self.value, other.value) / min(self.value, other.value)
        return self.overlaps(other) or ratio < 1 + min_gain

    def ratio(self, base: Estimate) -> tuple[float, float, float]:
        """self / base: the value and its worst..best pairing (the sweep table's ratio_range)."""
        return self.value / base.value, self.low / base.high, self.high / base.low

    def describe(self) -> str:
        untrusted = f", untrusted: {', '.join(self.why)}" if not self.trusted else ""
        return (f"{self.value:,.1f} ex/s ({self.low:,.1f}-{self.high:,.1f}, {self.jobs}"
                f" job{'s' if self.jobs != 1 else ''}{untrusted})")

    def as_dict(self) -> dict[str, object]:
        return {"examples_per_second": self.value, "low": self.low, "high": self.high,
                "jobs": self.jobs, "trusted": self.trusted, "why": list(self.why)}


def estimate(outcomes: list[Outcome], settings: Settings, sigma: float = 0.0) -> Estimate | None:
    """The candidate's figure over `outcomes` (its jobs in one stage). `sigma`: the sweep's
    job-to-job noise (log scale), which widens a one-job figure."""
    scored = [(o, s) for o in outcomes if (s := job_score(o, settings)) is not None]
    if not scored:
        return None
    # untrusted jobs (thin, noisy, contended) count only while no trusted one exists; the
    # estimate is then untrusted itself: the candidate is measured again, never ranked on it
    scored = [(o, s) for o, s in scored if o.trusted] or scored
    values = [s[0] for _, s in scored]
    value = statistics.median(values)
    half = (settings.noise_floor / 2 if len(values) > 1
            else max(settings.noise_floor, 2 * sigma))
    # multiplicative (a ratio of rates is what is compared), so a wide spread stays positive
    low = min(min(s[1] for _, s in scored), value / (1 + half))
    high = max(max(s[2] for _, s in scored), value * (1 + half))
    why = tuple(dict.fromkeys(w for o, _ in scored for w in o.why))
    return Estimate(value, low, high, len(scored), all(o.trusted for o, _ in scored), why)


def pooled_sigma(groups: list[list[float]], prior: float) -> float:
    """Job-to-job noise: the pooled standard deviation of log scores within groups of jobs
    of one point (the prior while no point ran twice), shrunk towards the prior."""
    squares, free = 0.0, 0
    for scores in groups:
        if len(scores) < 2:
            continue
        logs = [math.log(v) for v in scores]
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        free += len(logs) - 1
    if not free:
        return prior
    return math.sqrt((squares + PRIOR_DOF * prior ** 2) / (free + PRIOR_DOF))
