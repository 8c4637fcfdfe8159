"""What counts as a measured number, one statistic over several measurements of a point, and one run's
figures read as a sample for the judge (harness.judge). A phase's s/it is the median over the samples and
its examples/s the samples' examples per iteration / that median, so the two agree (the median of each on
its own pairs figures of different samples)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping
from typing import Any

from harness.judge import Sample

PHASES = ("train", "validation", "inference")  # what the speed preset times
# The parts of one rank's optimizer step in the scaling study (scaling.json's ranks), as headed
RANK_PARTS = {"compute_s": "compute", "comm_s": "comm", "data_wait_s": "data wait",
              "straggler_wait_s": "waits for others"}
MAIN_PHASES = ("train", "inference")  # what comparisons and diagnoses report
PHASE_NAMES = {"train": "training", "inference": "inference"}  # a main phase as a sentence says it
USABLE = ("ok", "partial")  # run statuses whose figures measure the asked point
CAUTIONS = ("contended", "noisy")  # result.json flags `<caution>:<phase>`, in cell order
LEGACY_NOISY = 1.5  # older results: a mean step this many times the median step is noisy
Z = 3.0  # standard errors of a single sample's median step in its own band
MAD_TO_SD = 1.4826  # the MAD of a normal distribution x this = its standard deviation
MIB = 2**20
# Where a run's peak memory comes from (`peak_memory`), in the order looked for.
DEVICE_MEMORY, RSS_INCREASE, PROCESS_RSS = "device allocated", "peak RSS increase", "process RSS"


def is_finite_number(value: Any) -> bool:
    """True for 3, 2.5 and 0; False for None, True, NaN, inf and strings."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def pool(samples: list[dict[str, Any]]
         ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, float]]:
    """(value, min, max) of every metric over the samples: medians, but each phase's rate pair
    as one statistic (module docstring); non-numbers from the last sample. Last, per phase its
    examples per iteration (all ranks): the median of its samples' s/it x examples/s."""
    value: dict[str, Any] = {}
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    examples: dict[str, float] = {}
    for key in dict.fromkeys(k for sample in samples for k in sample):
        numbers = [s[key] for s in samples if is_finite_number(s.get(key))]
        if numbers:
            value[key] = statistics.median(numbers)
            low[key], high[key] = min(numbers), max(numbers)
        else:
            value[key] = samples[-1].get(key) if samples else None
    for phase in PHASES:
        time_key, rate_key = f"{phase}_seconds_per_iteration", f"{phase}_examples_per_second"
        pairs = [(s[time_key], s[rate_key]) for s in samples if is_finite_number(s.get(time_key))
                 and is_finite_number(s.get(rate_key)) and s[time_key] > 0]
        if not pairs:
            continue
        per_iteration = examples[phase] = statistics.median(t * r for t, r in pairs)
        times = [t for t, _ in pairs]
        value[time_key] = statistics.median(times)
        low[time_key], high[time_key] = min(times), max(times)
        value[rate_key] = per_iteration / value[time_key]
        low[rate_key], high[rate_key] = per_iteration / max(times), per_iteration / min(times)
    return value, low, high, examples


def duration(seconds: float) -> str:
    """9.4 s, 1m05s, 2h03m: wall time as the terminal says it."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def peak_memory(figures: Mapping[str, Any]) -> tuple[float | None, str | None, float | None]:
    """(bytes, its source, the resident set at an RSS increase's start) of one run's figures: the
    first source found of device allocated, a main phase's peak RSS increase, the process's RSS."""
    device = figures.get("peak_device_allocated_bytes")
    if is_finite_number(device):
        return float(device), DEVICE_MEMORY, None
    for phase in MAIN_PHASES:
        increase = figures.get(f"{phase}_peak_rss_increase_bytes")
        if is_finite_number(increase):
            start = figures.get(f"{phase}_rss_start_bytes")
            return float(increase), RSS_INCREASE, float(start) if is_finite_number(start) else None
    rss = figures.get("peak_rss_bytes")
    return (float(rss), PROCESS_RSS, None) if is_finite_number(rss) else (None, None, None)


def cautions(flags: Collection[str], phase: str) -> list[str]:
    """The cautions result.json flags about one phase: ['contended'], ['noisy'], both or []."""
    return [caution for caution in CAUTIONS if f"{caution}:{phase}" in flags]


def _positive(value: Any) -> bool:
    return is_finite_number(value) and value > 0


def sample_of(figures: Mapping[str, Any], flags: Collection[str], phase: str) -> Sample | None:
    """One run's figures and flags as a sample of `phase`: its examples/s (the window's, as
    result.json says it), spread Z x its median step's (MAD-based) standard error; None without
    examples/s. Its stalls make it `noisy` (its flag; older results: a mean step over
    LEGACY_NOISY x the median), not a slower figure the judge would trust."""
    rate = figures.get(f"{phase}_examples_per_second")
    if not _positive(rate):
        return None
    per_iteration = figures.get(f"{phase}_seconds_per_iteration")
    median = figures.get(f"{phase}_median_step_s")
    mad = figures.get(f"{phase}_mad_step_s")
    steps = figures.get(f"{phase}_measured_steps")
    spread = None
    if _positive(median) and is_finite_number(mad) and is_finite_number(steps) and steps > 1:
        spread = Z * MAD_TO_SD * mad / median / math.sqrt(steps)
    noisy = f"noisy:{phase}" in flags
    if mad is None and _positive(median) and _positive(per_iteration):
        noisy = noisy or per_iteration > LEGACY_NOISY * median
    waited = figures.get(f"{phase}_run_delay_share")
    on_cpu = rate / (1 - waited) if is_finite_number(waited) and 0 <= waited < 1 else None
    return Sample(float(rate), spread, f"contended:{phase}" in flags, noisy, on_cpu)
