"""One point of a comparison: every job (and repeat, and round) that ran the same settings.

Its figures are one consistent statistic over those samples (harness.measured.summarize:
the median s/it, examples/s derived from it) with their min..max range. A job that did not
measure what it was asked gives no number: `invalid` (a knob did not take effect) and
failed jobs show their status; a `partial` job keeps the phases it measured, and the phase
that failed says so. A phase measured on too few steps is `thin`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.measured import MAIN_PHASES, PHASES, USABLE, is_finite_number, summarize
from harness.sweep.collect import JobResult

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Metric:
    name: str  # column in comparison.csv / key in comparison.json
    unit: str
    what: str
    higher_is_better: bool
    compared: bool = True  # whether harness-report A B compares it


METRICS: tuple[Metric, ...] = (
    Metric("train_seconds_per_iteration", "s",
           "training: seconds per iteration (median over samples), warm-up excluded", False),
    Metric("train_examples_per_second", "examples/s",
           "training: examples per iteration / seconds per iteration, warm-up excluded", True),
    Metric("train_between_steps_share", "share",
           "training: share of each iteration between steps (batch fetch, end-of-step work)", False, False),
    Metric("inference_seconds_per_iteration", "s",
           "inference (predict, eval mode): seconds per iteration, warm-up excluded", False),
    Metric("inference_examples_per_second", "examples/s",
           "inference: examples per iteration / seconds per iteration, warm-up excluded", True),
    Metric("inference_between_steps_share", "share",
           "inference: share of each iteration between steps (batch fetch, end-of-step work)", False, False),
    Metric("train_flop_per_s", "FLOP/s",
           "training: FLOPs of a step (diagnose preset) / seconds per iteration", True, False),
    Metric("train_mfu", "share",
           "training: FLOP/s / the device's dense peak (null without a peak)", True, False),
    Metric("peak_memory_bytes", "bytes",
           "peak device memory allocated by torch (CUDA), else peak resident set of the process"
           " during the job (CPU)", False),
)
METRIC_NAMES = tuple(m.name for m in METRICS)
# speed-up column -> the metric it divides (variant / baseline, same row)
RATIOS = {
    "train_speedup": "train_examples_per_second",
    "inference_speedup": "inference_examples_per_second",
    "memory_ratio": "peak_memory_bytes",
}
TABLE_PHASES = MAIN_PHASES


def peak_memory(metrics: dict[str, Any]) -> tuple[float | None, str | None]:
    """(bytes, where they come from) for one run's metrics."""
    device = metrics.get("peak_device_allocated_bytes")
    if is_finite_number(device):
        return float(device), "device allocated"
    rss = metrics.get("peak_rss_bytes")
    if is_finite_number(rss):
        return float(rss), "process RSS"
    return None, None


def _sample(metrics: dict[str, Any]) -> dict[str, Any]:
    values = {name: metrics.get(name) for name in METRIC_NAMES if name != "peak_memory_bytes"}
    values["peak_memory_bytes"] = peak_memory(metrics)[0]
    return values


def _status(jobs: list[JobResult]) -> str:
    usable = [j.status for j in jobs if j.status in USABLE]
    if usable:
        return "partial" if "partial" in usable else "ok"
    return jobs[0].status


def point(jobs: list[JobResult]) -> dict[str, Any]:
    """The pooled figures of the jobs of one (row, variant), with status and phase notes."""
    usable = [j for j in jobs if j.status in USABLE]
    first = usable[0] if usable else jobs[0]
    record: dict[str, Any] = {"jobs": " ".join(j.name for j in jobs), "status": _status(jobs),
                              "reason": None if usable else first.reason}
    samples = [_sample(s) for j in usable for s in j.samples]
    record["samples"] = len(samples)
    value, low, high = summarize(samples) if samples else ({}, {}, {})
    for name in METRIC_NAMES:
        record[name] = value.get(name) if is_finite_number(value.get(name)) else None
        record[f"{name}_min"], record[f"{name}_max"] = low.get(name), high.get(name)
    record["memory_source"] = peak_memory(first.samples[0] if first.samples else {})[1]
    for phase in PHASES:
        flags = {f for j in usable if j.result for f in j.result.flags}
        record[f"{phase}_thin"] = f"thin:{phase}" in flags
        errors = [j.result.phase_errors[phase] for j in usable
                  if j.result and phase in j.result.phase_errors]
        record[f"{phase}_error"] = errors[0] if errors else None
    bounds = [j.result.diagnosis.bound_by for j in usable if j.result and j.result.diagnosis]
    record["bound_by"] = majority(bounds)
    # A NaN or infinite training loss in any job of the point (result.json flag).
    record["train_nonfinite_loss"] = any(j.result and "nonfinite_loss" in j.result.flags
                                         for j in usable)
    rounds = {j.result.sweep_round for j in jobs if j.result and j.result.sweep_round is not None}
    record["rounds"] = len(rounds)
    return record


def majority(bounds: list[str]) -> str | None:
    """The bound most of the point's samples name; a tie names both ("compute/host"), in the
    order they first appear, so a report reads the same however often it is made."""
    if not bounds:
        return None
    counts = Counter(bounds)
    top = max(counts.values())
    return "/".join(dict.fromkeys(b for b in bounds if counts[b] == top))


def add_ratios(frame: pd.DataFrame, baseline: str) -> None:
    """Per ratio: the value, its range over the samples of both sides, and the noise flag.

    The range is min(variant) / max(baseline) .. max(variant) / min(baseline); the speed-up
    is within noise when that range holds 1.0 (the samples of the two overlap). A ratio
    involving a thin phase is flagged `<ratio>_thin`.
    """
    import pandas as pd

    base = frame[frame["variant"] == baseline].set_index("row")
    for ratio, metric in RATIOS.items():
        phase = metric.split("_", 1)[0]
        columns: dict[str, list[Any]] = {c: [] for c in ("", "_min", "_max", "_within_spread",
                                                           "_thin")}
        for _, p in frame.iterrows():
            found: dict[str, Any] = dict.fromkeys(columns)
            ref = base.loc[p["row"]] if p["row"] in base.index else None
            if ref is not None and is_finite_number(p.get(metric)) and is_finite_number(
                    ref.get(metric)) and ref[metric] > 0:
                found[""] = p[metric] / ref[metric]
                repeated = p["samples"] > 1 or ref["samples"] > 1
                if repeated and p["variant"] != baseline:
                    found["_min"], found["_max"], found["_within_spread"] = ratio_range(
                        p, ref, metric)
                if phase in PHASES:
                    found["_thin"] = bool(p[f"{phase}_thin"] or ref[f"{phase}_thin"])
            for suffix, value in found.items():
                columns[suffix].append(value)
        for suffix, values in columns.items():
            # object dtype keeps True / False / None (not numpy bools, not NaN)
            frame[f"{ratio}{suffix}"] = pd.Series(values, index=frame.index, dtype=object)


def ratio_range(side: Any, base: Any, metric: str) -> tuple[float, float, bool]:
    """side/base over their samples: (lowest, highest, whether 1.0 lies between: the two
    overlap, so the ratio is within noise). `side` and `base` hold <metric>_min and _max."""
    low = side[f"{metric}_min"] / base[f"{metric}_max"]
    high = side[f"{metric}_max"] / base[f"{metric}_min"]
    return low, high, bool(low <= 1.0 <= high)


def add_best(frame: pd.DataFrame) -> None:
    """`<phase>_best`: per row, True for the variant with the highest examples/s when it is
    beyond noise, its lowest sample above every other variant's highest. Each point must
    have a spread (repeats or rounds): a point that ran once has no known noise, so no
    variant of its row is called best."""
    import pandas as pd

    for phase in TABLE_PHASES:
        metric = f"{phase}_examples_per_second"
        best = pd.Series(False, index=frame.index, dtype=object)
        usable = frame[frame["status"].isin(USABLE) & frame[metric].map(is_finite_number)]
        for _, group in usable.groupby("row", sort=False):
            if len(group) < 2 or (group["samples"] <= 1).any():
                continue
            top = group[metric].astype(float).idxmax()
            others = group.drop(index=top)
            if float(group.at[top, f"{metric}_min"]) > float(others[f"{metric}_max"].max()):
                best[top] = True
        frame[f"{phase}_best"] = best
