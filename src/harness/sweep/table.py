"""The comparison of a sweep: one point per combination of swept values, as a pandas frame.

The swept keys make rows and column groups (variants); a point pools every job (and
every repeat inside a job, and every round of a sweep) that ran the same settings
(harness.sweep.points). Speed-ups compare a variant with the baseline variant in
the same row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.sweep.collect import Collection, JobResult
from harness.sweep.points import METRIC_NAMES, add_best, add_ratios, point

if TYPE_CHECKING:
    import pandas as pd

DEFAULT = "(default)"
ROW_PREFERENCE = ("batch_size",)
# Keys that never make rows or variants: they say how a run was launched, not what ran.
NOT_AXES = ("sweep",)


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

    @property
    def rounds(self) -> int:
        """Rounds of the sweep (repeat=N in a multirun), 0 when it ran none."""
        return int(self.points["rounds"].max()) if len(self.points) else 0


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
        record.update(point(members))
        records.append(record)
    frame = pd.DataFrame.from_records(records)
    for name in METRIC_NAMES:
        for column in (name, f"{name}_min", f"{name}_max"):
            if column not in frame:
                frame[column] = None
    if "memory_source" not in frame:
        frame["memory_source"] = None
    add_ratios(frame, chosen)
    add_best(frame)

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


def _context(jobs: list[JobResult]) -> dict[str, Any]:
    """Device and versions of the first job that recorded them: printed above the table."""
    for job in jobs:
        result = job.result
        if result is not None and result.device is not None:
            return {
                "accelerator": result.device.accelerator,
                "device_name": result.device.device_name,
                "world_size": result.device.world_size,
                "memory_bytes": result.device.memory_bytes,
                "torch": result.versions.get("torch"),
                "lightning": result.versions.get("lightning"),
                "host": result.host,
            }
    return {}
