"""What counts as a measured number, and one statistic over several measurements of a point.

Several measurements of one point (repeats inside a job, or the rounds of a sweep) are
summarised so that the figures of a row agree with each other: a phase's seconds per
iteration is the median over the samples, and its examples per second is the samples'
examples per iteration divided by that median. Taking the median of each figure on its
own would pair the s/it of one sample with the examples/s of another (two samples 12x
apart once gave 0.2177 s/it beside 4215 ex/s at batch 256, where 256 / 0.2177 = 1176).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

PHASES = ("train", "validation", "inference")  # what the speed preset times
MAIN_PHASES = ("train", "inference")  # what comparisons and diagnoses report
USABLE = ("ok", "partial")  # run statuses whose figures measure the asked point


def is_finite_number(value: Any) -> bool:
    """True for 3, 2.5 and 0; False for None, True, NaN, inf and strings."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _rate_pair(phase: str) -> tuple[str, str]:
    return f"{phase}_seconds_per_iteration", f"{phase}_examples_per_second"


def summarize(samples: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(value, min, max) of every metric over the samples; non-numbers from the last sample.

    Numbers are medians with their min..max range, except each phase's rate pair, which is
    one consistent statistic (module docstring): value of examples/s x value of s/it =
    examples per iteration, and the examples/s range follows from the s/it range.
    """
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
