"""What counts as a measured number, one statistic over several measurements of a point, and
one run's figures read as a sample for the judge (harness.judge). A phase's s/it is the
median over the samples and its examples/s the samples' examples per iteration / that median,
so the two agree (the median of each on its own pairs figures of different samples).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping
from typing import Any

from harness.judge import Sample

PHASES = ("train", "validation", "inference")  # what the speed preset times
MAIN_PHASES = ("train", "inference")  # what comparisons and diagnoses report
USABLE = ("ok", "partial")  # run statuses whose figures measure the asked point
CAUTIONS = ("contended", "noisy")  # result.json flags `<caution>:<phase>`, in cell order
LEGACY_NOISY = 1.5  # older results: a mean step this many times the median step is noisy
Z = 3.0  # standard errors of a single sample's median step in its own band
MAD_TO_SD = 1.4826  # the MAD of a normal distribution x this = its standard deviation


def is_finite_number(value: Any) -> bool:
    """True for 3, 2.5 and 0; False for None, True, NaN, inf and strings."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _rate_pair(phase: str) -> tuple[str, str]:
    return f"{phase}_seconds_per_iteration", f"{phase}_examples_per_second"


def summarize(samples: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(value, min, max) of every metric over the samples: medians, but each phase's rate pair
    as one statistic (module docstring); non-numbers from the last sample."""
    value: dict[str, Any] = {}
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    for key in dict.fromkeys(k for sample in samples for k in sample):
        numbers = [s[key] for s in samples if is_finite_number(s.get(key))]
        if numbers:
            value[key] = statistics.median(numbers)
            low[key], high[key] = min(numbers), max(numbers)
        else:
            value[key] = samples[-1].get(key) if samples else None
    for phase in PHASES:
        time_key, rate_key = _rate_pair(phase)
        pairs = [(s[time_key], s[rate_key]) for s in samples
                 if is_finite_number(s.get(time_key)) and is_finite_number(s.get(rate_key))
                 and s[time_key] > 0]
        if not pairs:
            continue
        per_iteration = statistics.median(t * r for t, r in pairs)  # examples, all ranks
        times = [t for t, _ in pairs]
        value[time_key] = statistics.median(times)
        low[time_key], high[time_key] = min(times), max(times)
        value[rate_key] = per_iteration / value[time_key]
        low[rate_key], high[rate_key] = per_iteration / max(times), per_iteration / min(times)
    return value, low, high


def duration(seconds: float) -> str:
    """9.4 s, 1m05s, 2h03m: wall time as the terminal says it."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def cautions(flags: Collection[str], phase: str) -> list[str]:
    """The cautions result.json flags about one phase: ['contended'], ['noisy'], both or []."""
    return [caution for caution in CAUTIONS if f"{caution}:{phase}" in flags]


def _positive(value: Any) -> bool:
    return is_finite_number(value) and value > 0


def sample_of(figures: Mapping[str, Any], flags: Collection[str], phase: str) -> Sample | None:
    """One run's figures and flags as a sample of `phase`: examples per step / median step,
    spread Z x the median's (MAD-based) standard error; None without examples/s."""
    rate = figures.get(f"{phase}_examples_per_second")
    if not _positive(rate):
        return None
    per_iteration = figures.get(f"{phase}_seconds_per_iteration")
    median = figures.get(f"{phase}_median_step_s")
    mad = figures.get(f"{phase}_mad_step_s")
    steps = figures.get(f"{phase}_measured_steps")
    figure, spread = float(rate), None
    if _positive(median) and _positive(per_iteration):
        figure = rate * per_iteration / median
    if _positive(median) and is_finite_number(mad) and is_finite_number(steps) and steps > 1:
        spread = Z * MAD_TO_SD * mad / median / math.sqrt(steps)
    noisy = f"noisy:{phase}" in flags
    if mad is None and _positive(median) and _positive(per_iteration):
        noisy = noisy or per_iteration > LEGACY_NOISY * median
    waited = figures.get(f"{phase}_run_delay_share")
    on_cpu = rate / (1 - waited) if is_finite_number(waited) and 0 <= waited < 1 else None
    return Sample(figure, spread, f"contended:{phase}" in flags, noisy, float(rate), on_cpu)
