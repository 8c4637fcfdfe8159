"""Whether a difference between two points is real: which samples count, each point's band,
and a three-valued verdict on a ratio (real, same, inconclusive).

A *sample* is one measurement of a point: a repeat inside a job, a round's job, a seed's job.
It is *counted* only when its phase is neither `contended` (other processes took the machine
during its measured window: result.json flag `contended:<phase>`) nor `noisy` (its step
times vary too much for its headline figures to be precise: flag `noisy:<phase>`). A result
written before those flags existed is noisy when its mean step is more than LEGACY_NOISY x
its median step, the part of the rule its figures still tell. Uncounted samples stay in the
table's figures, marked; they never make a real speed-up, a best or a regression, because
no spread of two samples can absorb what a busy machine does to them (one run beside two
CPU-bound processes read 0.12x of an identical one).

A sample's *figure* is robust: examples per step / its median step (`<phase>_median_step_s`),
so a few stalled steps do not move it; a result without the median gives its examples/s.

A point's *band*: with two or more counted samples, their min..max; with one, that sample's
own band from its step spread, figure x (1 +/- Z x 1.4826 x MAD / median / sqrt(steps)), at
least MIN_BAND (about three standard errors of its median step); with none, no band, and
why ("contended 2/2"). A single sample of an older result.json (no MAD) has no band known:
its comparisons keep the rule of the table before verdicts (`judge` returns None).

B against A (rates: higher is better), ratio = B/A of the figures, band [B.low / A.high,
B.high / A.low], tolerance t (a fraction: --fail-if-worse, or TABLE_TOLERANCE):
- `inconclusive` when a side has no counted sample, or when the band holds 1.0 and reaches
  past the tolerance (below 1 - t or above 1 / (1 - t)): the noise is larger than the change
  asked about, so "no regression" would be a false pass;
- `real` when the band excludes 1.0 and the ratio is past the tolerance (a regression when
  B is the slower);
- `same` otherwise.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.measured import is_finite_number

# A speed-up in the table is `real` or `same` against this tolerance (harness-report A B
# without --fail-if-worse too): a change smaller than 5% is not called real.
TABLE_TOLERANCE = 0.05
CAUTIONS = ("contended", "noisy")  # result.json flags `<caution>:<phase>`, in cell order
LEGACY_NOISY = 1.5  # older results: a mean step this many times the median step is noisy
Z = 3.0  # standard errors of a single sample's median step in its band
MAD_TO_SD = 1.4826  # the MAD of a normal distribution x this = its standard deviation
MIN_BAND = 0.01  # a single sample's band is at least +/- 1%
MAX_BAND = 0.9


def cautions(flags: Collection[str], phase: str) -> list[str]:
    """The cautions result.json flags about one phase: ['contended'], ['noisy'], both or []."""
    return [caution for caution in CAUTIONS if f"{caution}:{phase}" in flags]


@dataclass(frozen=True)
class Sample:
    """One measurement of a point, for one phase."""

    figure: float  # examples/s at the median step (robust), else the run's examples/s
    spread: float | None  # its own band's half-width, a share of the figure; None: not known
    contended: bool = False
    noisy: bool = False

    @property
    def counted(self) -> bool:
        return not (self.contended or self.noisy)


def _positive(value: Any) -> bool:
    return is_finite_number(value) and value > 0


def sample_of(figures: Mapping[str, Any], flags: Collection[str], phase: str) -> Sample | None:
    """The sample one run's figures (RunResult.figures(), or one repeat's) and its job's flags
    give for `phase`; None when the phase has no examples/s."""
    rate = figures.get(f"{phase}_examples_per_second")
    if not _positive(rate):
        return None
    per_iteration = figures.get(f"{phase}_seconds_per_iteration")
    median = figures.get(f"{phase}_median_step_s")
    mad = figures.get(f"{phase}_mad_step_s")
    steps = figures.get(f"{phase}_measured_steps")
    figure, spread = float(rate), None
    if _positive(median) and _positive(per_iteration):
        figure = rate * per_iteration / median  # examples per step / the median step
    if _positive(median) and is_finite_number(mad) and is_finite_number(steps) and steps > 1:
        spread = min(max(MIN_BAND, Z * MAD_TO_SD * mad / median / math.sqrt(steps)), MAX_BAND)
    noisy = f"noisy:{phase}" in flags
    if mad is None and _positive(median) and _positive(per_iteration):
        noisy = noisy or per_iteration > LEGACY_NOISY * median  # written before the flag
    return Sample(figure, spread, f"contended:{phase}" in flags, noisy)


@dataclass(frozen=True)
class Band:
    """A point's robust figure and band over its counted samples."""

    value: float | None  # the counted samples' median figure; None: no sample counted
    low: float | None  # None: not known (one sample without step spread) or none counted
    high: float | None
    counted: int
    total: int
    left_out: str | None = None  # 'contended 1/3, noisy 1/3': the samples not counted

    @property
    def why(self) -> str | None:
        """Why no band: 'contended 2/2', 'noisy 1/1' (None when a sample counted)."""
        return None if self.counted else self.left_out or "no sample"

    @property
    def known(self) -> bool:
        return self.low is not None and self.high is not None


def band_of(samples: Sequence[Sample]) -> Band | None:
    """The band of a point's samples (module docstring); None without any sample."""
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
    if len(counted) > 1:
        return Band(value, min(figures), max(figures), len(counted), total, left_out)
    spread = counted[0].spread
    if spread is None:
        return Band(value, None, None, 1, total, left_out)
    return Band(value, value * (1 - spread), value * (1 + spread), 1, total, left_out)


@dataclass(frozen=True)
class Verdict:
    """B against A on rates (higher is better)."""

    kind: str  # real | same | inconclusive
    ratio: float | None  # B / A of the bands' values; None when a side counted no sample
    low: float | None
    high: float | None
    reason: str | None = None  # why inconclusive: 'B: contended 2/2', 'noisy: B/A could be ...'

    @property
    def worse(self) -> bool:
        """B is slower than A."""
        return self.ratio is not None and self.ratio < 1

    @property
    def regression(self) -> bool:
        return self.kind == "real" and self.worse


def past(ratio: float, tolerance: float) -> bool:
    """Whether `ratio` is further from 1.0 than `tolerance`, either way (0.1: below 0.9 or
    above 1/0.9: the same 10% of throughput lost, seen from either side)."""
    return ratio < 1 - tolerance or ratio * (1 - tolerance) > 1


def judge(a: Band | None, b: Band | None, tolerance: float) -> Verdict | None:
    """The verdict on B against A (module docstring). None where there is nothing to judge (a
    side has no sample of the phase) or a side's band is not known (one sample of an older
    result.json): the caller keeps its rule for those."""
    if a is None or b is None:
        return None
    undecided = [f"{side}: {band.why}" for side, band in (("A", a), ("B", b)) if not band.counted]
    if undecided:
        return Verdict("inconclusive", None, None, None, "; ".join(undecided))
    if not (a.known and b.known) or not a.value:
        return None
    ratio = b.value / a.value  # type: ignore[operator]
    low, high = b.low / a.high, b.high / a.low  # type: ignore[operator]
    if low <= 1.0 <= high:
        if past(low, tolerance) or past(high, tolerance):
            return Verdict("inconclusive", ratio, low, high,
                           f"noisy: B/A could be {low:.2f}-{high:.2f}x, wider than the"
                           f" {tolerance:.0%} asked about")
        return Verdict("same", ratio, low, high)
    return Verdict("real" if past(ratio, tolerance) else "same", ratio, low, high)
