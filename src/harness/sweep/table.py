"""The comparison of a sweep: one point per combination of swept values, as a pandas frame.

A point pools every job (and every repeat inside a job) that ran the same
settings; its value for a metric is the median over those samples and its
spread is their min..max range. Speed-ups compare a variant with the baseline
variant in the same row.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.measured import is_finite_number
from harness.sweep.collect import OK, Collection, JobResult

if TYPE_CHECKING:
    import pandas as pd

DEFAULT = "(default)"
ROW_PREFERENCE = ("batch_size",)
# Keys that never make rows or variants: they say how a run was launched, not what ran.
NOT_AXES = ("sweep",)


@dataclass(frozen=True)
class Metric:
    name: str  # column in comparison.csv / key in comparison.json
    unit: str
    what: str
    higher_is_better: bool


METRICS: tuple[Metric, ...] = (
    Metric("train_seconds_per_iteration", "s",
           "training: mean seconds per iteration, warm-up excluded", False),
    Metric("train_examples_per_second", "examples/s",
           "training: examples per second, warm-up excluded", True),
    Metric("inference_seconds_per_iteration", "s",
           "inference (predict, eval mode): mean seconds per iteration, warm-up excluded", False),
    Metric("inference_examples_per_second", "examples/s",
           "inference: examples per second, warm-up excluded", True),
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


@dataclass
class Comparison:
    """Everything the renderers need, built from a Collection."""

    root: Path
    row_key: str | None
    variant_keys: list[str]
    fixed: dict[str, str]
    variants: list[str]  # labels, in sweep order
    baseline: str
    rows: list[str]  # row values, sorted
    points: pd.DataFrame  # one line per (row, variant) that ran
    jobs: list[JobResult]
    problems: list[str] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for job in self.jobs:
            counts[job.status] = counts.get(job.status, 0) + 1
        return counts

    @property
    def repeated(self) -> bool:
        return bool(len(self.points)) and int(self.points["samples"].max()) > 1


def peak_memory(metrics: dict[str, Any]) -> tuple[float | None, str | None]:
    """(bytes, where they come from) for one run's metrics."""
    device = metrics.get("peak_device_allocated_bytes")
    if isinstance(device, (int, float)):
        return float(device), "device allocated"
    rss = metrics.get("peak_rss_bytes")
    if isinstance(rss, (int, float)):
        return float(rss), "process RSS"
    return None, None


def sample_values(sample: dict[str, Any]) -> dict[str, float | None]:
    values: dict[str, float | None] = {}
    for name in METRIC_NAMES:
        if name == "peak_memory_bytes":
            values[name] = peak_memory(sample)[0]
            continue
        value = sample.get(name)
        values[name] = float(value) if is_finite_number(value) else None
    return values


def _sort_key(value: str) -> tuple[int, float, str]:
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def variant_label(keys: Sequence[str], settings: dict[str, str]) -> str:
    if not keys:
        return "all"
    return ", ".join(f"{k}={settings.get(k, DEFAULT)}" for k in keys)


def parse_variant_spec(spec: str) -> dict[str, str]:
    """'precision=bf16,compile=true' -> {'precision': 'bf16', 'compile': 'true'}."""
    pairs: dict[str, str] = {}
    for part in spec.replace(";", ",").split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or not key.strip():
            raise HarnessError(
                f"baseline={spec!r} is not valid: expected key=value pairs separated by commas."
                " Fix: e.g. baseline='precision=fp32,compile=false'"
            )
        pairs[key.strip()] = value.strip()
    return pairs


def choose_row_key(axes: list[str], rows: str | None) -> str | None:
    """The key whose values make the rows: `rows`, else batch_size if swept, else the first
    of two or more swept keys. One swept key that is not a preferred row key makes columns
    (variants) with a single row, so that its values get speed-ups against each other."""
    fallback = axes[0] if len(axes) > 1 else None
    return rows or next((k for k in ROW_PREFERENCE if k in axes), fallback)


def _choose_baseline(spec: str | None, variants: list[str], variant_keys: list[str],
                     settings_of: dict[str, dict[str, str]]) -> str:
    if not spec:
        return variants[0]
    wanted = parse_variant_spec(spec)
    for key in wanted:
        if key not in variant_keys:
            raise HarnessError(
                f"baseline={spec!r} names '{key}', which is not a column key of this sweep"
                f" (column keys: {', '.join(variant_keys) or 'none'})."
                f" Fix: choose one of the variants: {'; '.join(variants)}"
            )
    for label in variants:
        if all(settings_of[label].get(k, DEFAULT) == v for k, v in wanted.items()):
            return label
    raise HarnessError(
        f"baseline={spec!r} matches no variant of this sweep. Fix: choose one of: "
        + "; ".join(variants)
    )


def _spread_exceeds(a_min: float, a_max: float, b_min: float, b_max: float,
                    a: float, b: float) -> bool:
    """True when either side's min..max range is wider than the gap between the medians."""
    return bool(max(a_max - a_min, b_max - b_min) > abs(a - b))


def swept_and_fixed(jobs: list[JobResult]) -> tuple[list[str], dict[str, str]]:
    """Keys whose value differs between jobs (in first-seen order) and the rest with their value."""
    keys: list[str] = []
    for job in jobs:
        for key in job.settings:
            if key not in keys:
                keys.append(key)
    swept, fixed = [], {}
    for key in keys:
        values = {job.settings.get(key, DEFAULT) for job in jobs}
        if len(values) > 1:
            swept.append(key)
        else:
            fixed[key] = values.pop()
    return swept, fixed


def _point(jobs: list[JobResult]) -> dict[str, Any]:
    ok_jobs = [j for j in jobs if j.ok]
    point: dict[str, Any] = {"jobs": " ".join(j.name for j in jobs)}
    if not ok_jobs:
        first = jobs[0]
        point.update(status=first.status, reason=first.reason, samples=0)
        return point
    samples = [sample_values(s) for j in ok_jobs for s in j.samples] or [{}]
    point.update(status=OK, reason=None, samples=len(samples))
    for name in METRIC_NAMES:
        values = [s[name] for s in samples if s.get(name) is not None]
        point[name] = statistics.median(values) if values else None
        point[f"{name}_min"] = min(values) if values else None
        point[f"{name}_max"] = max(values) if values else None
    point["memory_source"] = peak_memory(ok_jobs[0].samples[0] if ok_jobs[0].samples else {})[1]
    return point


def build(collection: Collection, rows: str | None = None,
          baseline: str | None = None) -> Comparison:
    """Arrange the collected jobs as rows x variants, with speed-ups against the baseline."""
    import pandas as pd

    jobs = collection.jobs
    swept, fixed = swept_and_fixed(jobs)
    axes = [k for k in swept if k not in NOT_AXES]
    if rows is not None and rows not in axes:
        raise HarnessError(
            f"rows={rows!r} is not a swept key of {collection.root}"
            f" (swept: {', '.join(axes) or 'nothing'}). Fix: choose one of the swept keys"
        )
    row_key = choose_row_key(axes, rows)
    variant_keys = [k for k in axes if k != row_key]

    groups: dict[tuple[str, str], list[JobResult]] = {}
    settings_of: dict[str, dict[str, str]] = {}
    variants: list[str] = []
    for job in jobs:
        label = variant_label(variant_keys, job.settings)
        row = job.settings.get(row_key, DEFAULT) if row_key else "all"
        groups.setdefault((row, label), []).append(job)
        if label not in variants:
            variants.append(label)
            settings_of[label] = job.settings
    chosen = _choose_baseline(baseline, variants, variant_keys, settings_of)

    records = []
    for (row, label), members in groups.items():
        record: dict[str, Any] = {}
        if row_key:
            record[row_key] = row
        for key in variant_keys:
            record[key] = members[0].settings.get(key, DEFAULT)
        record.update(row=row, variant=label, baseline=label == chosen)
        record.update(_point(members))
        records.append(record)
    frame = pd.DataFrame.from_records(records)
    for name in METRIC_NAMES:
        for column in (name, f"{name}_min", f"{name}_max"):
            if column not in frame:
                frame[column] = None
    if "memory_source" not in frame:
        frame["memory_source"] = None
    _add_ratios(frame, chosen)

    row_values = sorted({str(r) for r in frame["row"]}, key=_sort_key)
    order = {v: i for i, v in enumerate(variants)}
    frame["_r"] = frame["row"].map(lambda r: row_values.index(str(r)))
    frame["_v"] = frame["variant"].map(order)
    frame = frame.sort_values(["_r", "_v"]).drop(columns=["_r", "_v"]).reset_index(drop=True)
    return Comparison(
        root=collection.root,
        row_key=row_key,
        variant_keys=variant_keys,
        fixed=fixed,
        variants=variants,
        baseline=chosen,
        rows=row_values,
        points=frame,
        jobs=jobs,
        problems=list(collection.problems),
        context=_context(jobs),
    )


def _add_ratios(frame: pd.DataFrame, baseline: str) -> None:
    import pandas as pd

    base = frame[frame["variant"] == baseline].set_index("row")
    for ratio, metric in RATIOS.items():
        values, flags = [], []
        for _, point in frame.iterrows():
            value, flag = None, None
            if point["row"] in base.index:
                ref = base.loc[point["row"]]
                v, b = point.get(metric), ref.get(metric)
                if is_finite_number(v) and is_finite_number(b) and b > 0:
                    value = v / b
                    repeated = point["samples"] > 1 or ref["samples"] > 1
                    if repeated and point["variant"] != baseline:
                        flag = _spread_exceeds(point[f"{metric}_min"], point[f"{metric}_max"],
                                               ref[f"{metric}_min"], ref[f"{metric}_max"], v, b)
            values.append(value)
            flags.append(flag)
        frame[ratio] = values
        # object dtype keeps True / False / None (not numpy bools, not NaN)
        frame[f"{ratio}_within_spread"] = pd.Series(flags, index=frame.index, dtype=object)


def _context(jobs: list[JobResult]) -> dict[str, Any]:
    """Device and versions of the first job that recorded them: printed above the table."""
    for job in jobs:
        result = job.result
        if result is not None and result.device is not None:
            return {
                "accelerator": result.device.accelerator,
                "device_name": result.device.device_name,
                "world_size": result.device.world_size,
                "torch": result.versions.get("torch"),
                "lightning": result.versions.get("lightning"),
                "host": result.host,
            }
    return {}
