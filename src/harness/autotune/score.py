"""A candidate's figure in a stage as harness.judge sees it (docs/autotune.md, "Ranking"): a job's
compile-charged rate a Sample, a stage's jobs a Band, a Verdict in words. Every ratio is the judge's."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from harness.autotune.outcome import Outcome
from harness.autotune.settings import Settings
from harness.judge import Band, Sample, Verdict, band_of, past

PHASES = {"training": ("train",), "inference": ("inference",), "both": ("train", "inference")}


def job_sample(outcome: Outcome, settings: Settings) -> Sample | None:
    """One job's score as a judge Sample, or None when it did not measure the objective."""
    if not outcome.measured:
        return None
    scores, spreads = [], []
    for phase in PHASES[settings.objective]:
        figures = outcome.phases.get(phase)
        if figures is None or figures.seconds_per_step <= 0 or figures.examples_per_step <= 0:
            return None
        charged = figures.seconds_per_step + outcome.compile_charge_s / settings.planned_steps
        scores.append(figures.examples_per_step / charged)
        if figures.spread is not None:
            spreads.append(figures.spread)
    score = math.exp(sum(math.log(v) for v in scores) / len(scores))
    return Sample(score, max(spreads) if spreads else None,
                  contended="contended" in outcome.why, noisy="noisy" in outcome.why)


@dataclass(frozen=True)
class Estimate(Band):
    """A candidate's band in a stage; untrusted (no job counted) ranks never beside a trusted one."""

    trusted: bool = True
    cautions: tuple[str, ...] = ()  # contended, noisy: why a job did not count

    def describe(self) -> str:
        said = super().describe()
        return said if self.trusted else f"{said[:-1]}, untrusted: {', '.join(self.cautions)})"

    def as_dict(self) -> dict[str, object]:
        return {"examples_per_second": self.value, "low": self.low, "high": self.high,
                "jobs": self.total, "trusted": self.trusted, "why": list(self.cautions)}


def estimate(outcomes: list[Outcome], settings: Settings, noise: float) -> Estimate | None:
    """The Estimate of a candidate's jobs in one stage; `noise`: the job-to-job noise (log sd)."""
    samples = [s for o in outcomes if (s := job_sample(o, settings)) is not None]
    if not samples:
        return None
    cautions = tuple(dict.fromkeys(w for o in outcomes if o.measured for w in o.why)
                     ) if not all(s.counted for s in samples) else ()
    trusted = any(s.counted for s in samples)
    if not trusted:  # ranked on only while nothing else is
        samples = [replace(s, contended=False, noisy=False) for s in samples]
    band = band_of(samples, noise)  # never None: there are samples
    return Estimate(**vars(band), trusted=trusted, cautions=cautions)  # type: ignore[arg-type]


def ahead(verdict: Verdict | None, tolerance: float) -> bool:
    """B's estimate over A is past the tolerance on the faster side, proven or not."""
    ratio = verdict.ratio if verdict is not None else None
    return ratio is not None and ratio > 1 and past(ratio, tolerance)


def in_words(verdict: Verdict) -> str:
    """B/A as the judge found it: '0.91x (0.86-0.95x, 3 paired rounds)'."""
    how = f", {verdict.pairs} paired round{'s' if verdict.pairs != 1 else ''}" if verdict.pairs else ""
    if verdict.low is None or verdict.high is None:
        return f"{verdict.ratio:.2f}x (no interval: {verdict.reason})"
    return f"{verdict.ratio:.2f}x ({verdict.low:.2f}-{verdict.high:.2f}x{how})"
