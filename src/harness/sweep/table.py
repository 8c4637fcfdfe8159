"""The comparison of a sweep as data: one point per combination of swept values, as a pandas frame.

The swept keys make rows and column groups (variants). A point pools every job (and every
repeat inside a job, and every round of a sweep) that ran the same settings: its figures are
one consistent statistic over those samples (harness.measured.summarize: the median s/it,
examples/s derived from it) with their min..max range. The jobs of a point that differ only
in a repeat key (`seed`, by default: `repeat_keys`) are samples of it too, as rounds are. A
job that did not measure what it was asked gives no number: `invalid` (a knob did not take
effect) and failed jobs show their status; a `partial` job keeps the phases it measured, and
the phase that failed says so. A phase measured on too few steps is `thin`; one measured on
a busy machine or with erratic steps is `contended` or `noisy` (harness.sweep.verdict), and
its samples are left out of every verdict.

On top of the points: speed-ups against the baseline variant in the same row (with their
range over the samples, whether that range holds 1.0, and the verdict on the counted
samples: real, same or inconclusive), each row's best variant beyond noise, and, with a
sweep over batch_size, the memory headroom. Everything is computed here once;
harness.sweep.render and harness.sweep.plot only read it. The sweep's own settings (`rows`,
`baseline`, `repeat_keys`) are checked by `check_settings`, when a sweep starts and when a
table is built.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config.overrides import ROUND_KEY, parse_overrides
from harness.config.sweep_keys import short_setting
from harness.errors import ConfigError, HarnessError
from harness.measured import MAIN_PHASES, PHASES, USABLE, is_finite_number, summarize
from harness.sweep.collect import Collection, JobResult
from harness.sweep.verdict import TABLE_TOLERANCE, Band, band_of, judge, sample_of

if TYPE_CHECKING:
    import pandas as pd

DEFAULT = "(default)"
ROW_PREFERENCE = ("batch_size",)
# Keys that never make rows or variants: they say how a run was launched, not what ran.
NOT_AXES = ("sweep",)
# Keys whose values are repeats of one point, not variants: their jobs pool into the point's
# samples, as the rounds of a sweep do (`harness -m batch_size=8,16 seed=0,1,2`: two points
# of three samples). A setting of the table (hydra.callbacks.sweep_report.repeat_keys,
# harness-report --repeat-keys); the rounds key never makes an axis (collect drops it).
REPEAT_KEYS = ("seed", ROUND_KEY)
# Where a sweep's `rows`, `baseline` and `repeat_keys` are set (the comparison callback,
# conf/config.yaml); harness-report names them --rows, --baseline and --repeat-keys.
SETTINGS_KEY = "hydra.callbacks.sweep_report"


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
           "peak device memory allocated by torch (CUDA); on a CPU the training phase's peak"
           " resident set minus the resident set at its start (peak RSS increase), else, for"
           " results without it, the process's peak resident set during the job", False),
)
METRIC_NAMES = tuple(m.name for m in METRICS)
# speed-up column -> the metric it divides (variant / baseline, same row)
RATIOS = {
    "train_speedup": "train_examples_per_second",
    "inference_speedup": "inference_examples_per_second",
    "memory_ratio": "peak_memory_bytes",
}

# Where a point's peak_memory_bytes comes from (`memory_source`), in the order looked for.
DEVICE_MEMORY, RSS_INCREASE, PROCESS_RSS = "device allocated", "peak RSS increase", "process RSS"

# Memory headroom (`largest_batches`): the share of memory kept free, and when the line
# through memory against batch size is noise or stretched too far to read.
KEEP_FREE = 0.10
MIN_GROWTH_OVER_NOISE = 3.0
MIN_GROWTH_SHARE = 0.05
MAX_EXTRAPOLATION = 4


@dataclass
class Comparison:
    """Everything the renderings need, built from a Collection by `build`."""

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
    variant_settings: dict[str, dict[str, str]] = field(default_factory=dict)  # label -> settings
    headroom: dict[str, dict[str, Any]] = field(default_factory=dict)  # see largest_batches
    repeat_keys: dict[str, list[str]] = field(default_factory=dict)  # pooled key -> its values
    repeat_settings: tuple[str, ...] = REPEAT_KEYS  # the keys asked to pool (swept or not)

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

    @cached_property
    def _by_place(self) -> dict[tuple[str, str], Any]:
        # Built on first use, once: the renderings look a point up per cell.
        return {(str(p["row"]), p["variant"]): p for _, p in self.points.iterrows()}

    def point(self, row: str, variant: str) -> Any:
        """The point (a row of `points`) at this row value and variant; None if none ran."""
        return self._by_place.get((row, variant))

    def short_label(self, label: str) -> str:
        """'precision=bf16, compile=true' -> 'bf16 compile=true': bare words stand alone."""
        settings = self.variant_settings.get(label, {})
        return " ".join(short_setting(k, settings.get(k, DEFAULT)) for k in self.variant_keys)


def _sort_key(value: str) -> tuple[int, float, str]:
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def variant_label(keys: Sequence[str], settings: Mapping[str, str]) -> str:
    if not keys:
        return "all"
    return ", ".join(f"{k}={settings.get(k, DEFAULT)}" for k in keys)


def parse_variant_spec(spec: str, prefix: str = "") -> dict[str, str]:
    """'precision=bf16,compile=true' -> {'precision': 'bf16', 'compile': 'true'}."""
    parts = [part.strip() for part in spec.replace(";", ",").split(",")]
    if not all(part.partition("=")[0].strip() and "=" in part for part in parts):
        raise ConfigError(f"{prefix}baseline", spec, "key=value pairs separated by commas",
                          f"{prefix}baseline='precision=fp32,compile=false'")
    return parse_overrides(parts)


def choose_row_key(axes: list[str], rows: str | None) -> str | None:
    """The key whose values make the rows: `rows`, else batch_size if swept, else the first
    of two or more swept keys. One swept key that is not a preferred row key makes columns
    (variants) with a single row, so that its values get speed-ups against each other."""
    fallback = axes[0] if len(axes) > 1 else None
    return rows or next((k for k in ROW_PREFERENCE if k in axes), fallback)


def _repeat_keys_name(prefix: str) -> str:
    return "--repeat-keys" if prefix == "--" else f"{prefix}repeat_keys"


def check_repeat_keys(value: Any, prefix: str = f"{SETTINGS_KEY}.") -> tuple[str, ...]:
    """The repeat keys as a tuple of names, from a list (the config's) or a comma-separated
    string (harness-report's); a ConfigError naming the setting for anything else."""
    if value is None:
        return REPEAT_KEYS
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, Sequence) or not all(isinstance(k, str) and k for k in value):
        raise ConfigError(_repeat_keys_name(prefix), value, "a list of keys, e.g. [seed]",
                          f"{_repeat_keys_name(prefix)}=[seed]")
    return tuple(value)


def _pooled_error(prefix: str, setting: str, value: str, key: str,
                  axes: list[str]) -> ConfigError:
    """`rows` or `baseline` names a key whose values are samples of each point."""
    keys = _repeat_keys_name(prefix)
    instead = f"{prefix}{setting}={axes[0]}" if setting == "rows" and axes else f"drop {key}"
    return ConfigError(f"{prefix}{setting}", value,
                       f"a swept key that is not a repeat key ({key} is in {keys}: its values"
                       " are samples of each point, not rows or variants)",
                       f"{instead}, or leave {key} out of {keys}")


def check_settings(rows: str | None, baseline: str | None, swept: Mapping[str, Sequence[str]],
                   prefix: str = f"{SETTINGS_KEY}.",
                   repeat_keys: Sequence[str] = REPEAT_KEYS) -> None:
    """Raise a ConfigError naming `<prefix>rows` or `<prefix>baseline` when it cannot match
    this sweep, whose swept keys and values are `swept` (the keys in `repeat_keys` pool into
    the points): when a sweep starts, and when a table is built (by harness-report too:
    prefix `--`)."""
    axes = [k for k in swept if k not in NOT_AXES and k not in repeat_keys]
    if rows is not None and rows not in axes:
        if rows in swept and rows in repeat_keys:
            raise _pooled_error(prefix, "rows", rows, rows, axes)
        raise ConfigError(f"{prefix}rows", rows,
                          f"a swept key (swept: {', '.join(axes) or 'nothing'})",
                          f"{prefix}rows={axes[0]}" if axes else f"drop {prefix}rows")
    if not baseline:
        return
    row_key = choose_row_key(axes, rows)
    columns = [k for k in axes if k != row_key]
    for key, value in parse_variant_spec(baseline, prefix).items():
        if key in swept and key in repeat_keys:
            raise _pooled_error(prefix, "baseline", baseline, key, axes)
        if key not in columns:
            raise ConfigError(f"{prefix}baseline", baseline,
                              f"key=value pairs of the column keys ({', '.join(columns) or 'none'})",
                              f"{prefix}baseline='{columns[0]}={swept[columns[0]][0]}'" if columns
                              else f"drop {prefix}baseline")
        if value not in swept[key]:
            variants = [variant_label(columns, dict(zip(columns, combo, strict=True)))
                        for combo in itertools.product(*(swept[k] for k in columns))]
            raise ConfigError(f"{prefix}baseline", baseline,
                              f"one of the swept values of {key}: {', '.join(swept[key])}"
                              f" (variants: {'; '.join(variants)})",
                              f"{prefix}baseline='{key}={swept[key][0]}'")


def _choose_baseline(spec: str | None, variants: list[str],
                     settings_of: dict[str, dict[str, str]]) -> str:
    """The variant `spec` names (checked by check_settings), else the first."""
    if not spec:
        return variants[0]
    wanted = parse_variant_spec(spec)
    for label in variants:
        if all(settings_of[label].get(k, DEFAULT) == v for k, v in wanted.items()):
            return label
    raise HarnessError(  # each value was swept, but no job ran this combination
        f"baseline={spec!r} matches no variant that ran in this sweep. Fix: choose one of: "
        + "; ".join(variants)
    )


def swept_and_fixed(jobs: list[JobResult]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Keys whose value differs between jobs (in first-seen order) with their values, and
    the rest with their one value."""
    values: dict[str, list[str]] = {}
    for job in jobs:
        for key in job.settings:
            values.setdefault(key, [])
    for key, seen in values.items():
        for job in jobs:
            value = job.settings.get(key, DEFAULT)
            if value not in seen:
                seen.append(value)
    swept = {key: seen for key, seen in values.items() if len(seen) > 1}
    fixed = {key: seen[0] for key, seen in values.items() if len(seen) == 1}
    return swept, fixed


def build(collection: Collection, rows: str | None = None, baseline: str | None = None,
          settings_prefix: str = f"{SETTINGS_KEY}.",
          repeat_keys: Sequence[str] = REPEAT_KEYS) -> Comparison:
    """Arrange the collected jobs as rows x variants, with speed-ups against the baseline;
    the jobs of a point that differ only in `repeat_keys` are its samples
    (`settings_prefix` names the settings in an error: `--` for harness-report)."""
    import pandas as pd

    jobs = collection.jobs
    swept, fixed = swept_and_fixed(jobs)
    check_settings(rows, baseline, swept, settings_prefix, repeat_keys)
    axes = [k for k in swept if k not in NOT_AXES and k not in repeat_keys]
    pooled = {k: sorted(values, key=_sort_key) for k, values in swept.items()
              if k in repeat_keys}
    row_key = choose_row_key(axes, rows)
    variant_keys = [k for k in axes if k != row_key]

    groups: dict[tuple[str, str], list[JobResult]] = {}
    settings_of: dict[str, dict[str, str]] = {}
    for job in jobs:
        label = variant_label(variant_keys, job.settings)
        row = job.settings.get(row_key, DEFAULT) if row_key else "all"
        groups.setdefault((row, label), []).append(job)
        settings_of.setdefault(label, job.settings)
    variants = list(settings_of)
    chosen = _choose_baseline(baseline, variants, settings_of)

    records = []
    for (row, label), members in groups.items():
        record: dict[str, Any] = {}
        if row_key:
            record[row_key] = row
        for key in variant_keys:
            record[key] = members[0].settings.get(key, DEFAULT)
        record.update(row=row, variant=label, baseline=label == chosen)
        record.update(point(members))
        record["pooled"] = ", ".join(
            f"{len({m.settings.get(k, DEFAULT) for m in members})} {k}s" for k in pooled) or None
        records.append(record)
    frame = pd.DataFrame.from_records(records)
    for name in METRIC_NAMES:
        for column in (name, f"{name}_min", f"{name}_max"):
            if column not in frame:
                frame[column] = None
    for column in ("memory_source", "memory_start_bytes"):
        if column not in frame:
            frame[column] = None
    add_ratios(frame, chosen)
    add_best(frame)

    row_values = sorted({str(r) for r in frame["row"]}, key=_sort_key)
    order = {v: i for i, v in enumerate(variants)}
    frame["_r"] = frame["row"].map(lambda r: row_values.index(str(r)))
    frame["_v"] = frame["variant"].map(order)
    frame = frame.sort_values(["_r", "_v"]).drop(columns=["_r", "_v"]).reset_index(drop=True)
    comparison = Comparison(
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
        variant_settings=settings_of,
        repeat_keys=pooled,
        repeat_settings=tuple(repeat_keys),
    )
    comparison.headroom = largest_batches(comparison)
    return comparison


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


# -- one point ---------------------------------------------------------------------------
def peak_memory(figures: dict[str, Any]) -> tuple[float | None, str | None]:
    """(bytes, where they come from) for one run's figures: the device's peak (CUDA); on a
    CPU the training phase's peak RSS increase over its start (what the phase took, not the
    ~0.5 GiB of libraries the process holds anyway; inference's without training); the
    process's peak RSS for results written before the increase."""
    device = figures.get("peak_device_allocated_bytes")
    if is_finite_number(device):
        return float(device), DEVICE_MEMORY
    for phase in MAIN_PHASES:
        increase = figures.get(f"{phase}_peak_rss_increase_bytes")
        if is_finite_number(increase):
            return float(increase), RSS_INCREASE
    rss = figures.get("peak_rss_bytes")
    if is_finite_number(rss):
        return float(rss), PROCESS_RSS
    return None, None


def memory_start(figures: dict[str, Any]) -> float | None:
    """The resident set at the start of the phase whose increase `peak_memory` gives (what
    the headroom adds back to the increase), else None."""
    if peak_memory(figures)[1] != RSS_INCREASE:
        return None
    for phase in MAIN_PHASES:
        if is_finite_number(figures.get(f"{phase}_peak_rss_increase_bytes")):
            start = figures.get(f"{phase}_rss_start_bytes")
            return float(start) if is_finite_number(start) else None
    return None


def _sample(figures: dict[str, Any]) -> dict[str, Any]:
    values = {name: figures.get(name) for name in METRIC_NAMES if name != "peak_memory_bytes"}
    values["peak_memory_bytes"] = peak_memory(figures)[0]
    values["memory_start_bytes"] = memory_start(figures)
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
    start = value.get("memory_start_bytes")
    record["memory_start_bytes"] = start if is_finite_number(start) else None
    flags = {f for j in usable if j.result for f in j.result.flags}
    for phase in MAIN_PHASES:
        record.update(phase_band(usable, phase))
    for phase in PHASES:
        record[f"{phase}_thin"] = f"thin:{phase}" in flags
        errors = [j.result.phase_errors[phase] for j in usable
                  if j.result and phase in j.result.phase_errors]
        record[f"{phase}_error"] = errors[0] if errors else None
    bounds = [j.result.diagnosis.bound_by for j in usable if j.result and j.result.diagnosis]
    record["bound_by"] = majority(bounds)
    # A NaN or infinite training loss in any job of the point (result.json flag).
    record["train_nonfinite_loss"] = "nonfinite_loss" in flags
    rounds = {j.result.sweep_round for j in jobs if j.result and j.result.sweep_round is not None}
    record["rounds"] = len(rounds)
    return record


def phase_band(jobs: list[JobResult], phase: str) -> dict[str, Any]:
    """A point's robust band for `phase` over its jobs' samples (harness.sweep.verdict; a
    job's flags hold for each of its repeats) and its cautions: `<phase>_contended` /
    `_noisy` when any sample is, `<phase>_counted`, the samples its verdicts rest on."""
    samples = [found for job in jobs for figures in job.samples
               if (found := sample_of(figures, job.result.flags if job.result else [], phase))]
    band = band_of(samples)
    return {f"{phase}_band": band,
            f"{phase}_contended": any(s.contended for s in samples),
            f"{phase}_noisy": any(s.noisy for s in samples),
            f"{phase}_counted": band.counted if band else 0}


def majority(bounds: list[str]) -> str | None:
    """The bound most of the point's samples name; a tie names both ("compute/host"), in the
    order they first appear, so a report reads the same however often it is made."""
    if not bounds:
        return None
    counts = Counter(bounds)
    top = max(counts.values())
    return "/".join(dict.fromkeys(b for b in bounds if counts[b] == top))


# -- ratios and the best variant ------------------------------------------------------------
def add_ratios(frame: pd.DataFrame, baseline: str) -> None:
    """Per ratio: the value, its range over the samples of both sides, the noise flag and,
    for the speed-ups, the verdict.

    The range is min(variant) / max(baseline) .. max(variant) / min(baseline) over every
    sample; the speed-up is within noise when that range holds 1.0 (the samples of the two
    overlap). The verdict (`<ratio>_verdict`: real, same or inconclusive, and
    `<ratio>_verdict_reason`) rests on the counted samples only (harness.sweep.verdict,
    against TABLE_TOLERANCE); none where a side's spread is unknown (older results that ran
    once) or for memory. A ratio involving a thin phase is flagged `<ratio>_thin`.
    """
    import pandas as pd

    base = frame[frame["variant"] == baseline].set_index("row")
    for ratio, metric in RATIOS.items():
        phase = metric.split("_", 1)[0]
        columns: dict[str, list[Any]] = {c: [] for c in ("", "_min", "_max", "_within_spread",
                                                           "_thin", "_verdict",
                                                           "_verdict_reason")}
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
                if phase in MAIN_PHASES and p["variant"] != baseline:
                    verdict = judge(ref[f"{phase}_band"], p[f"{phase}_band"], TABLE_TOLERANCE)
                    if verdict is not None:
                        found["_verdict"], found["_verdict_reason"] = verdict.kind, verdict.reason
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
    """`<phase>_best`: per row, True for the variant with the highest robust figure when it
    is beyond noise: its counted samples' lowest above every other variant's highest
    (harness.sweep.verdict). Every point of the row must rest on two or more counted
    samples (repeats, rounds or seeds): a point that ran once has no known noise between
    runs, and a contended or noisy one none at all, so no variant of its row is called best."""
    import pandas as pd

    for phase in MAIN_PHASES:
        metric = f"{phase}_examples_per_second"
        best = pd.Series(False, index=frame.index, dtype=object)
        usable = frame[frame["status"].isin(USABLE) & frame[metric].map(is_finite_number)]
        for _, group in usable.groupby("row", sort=False):
            bands: dict[Any, Band] = {i: b for i, b in group[f"{phase}_band"].items()
                                      if b is not None and b.counted > 1}
            if len(group) < 2 or len(bands) < len(group):
                continue
            top = max(bands, key=lambda i: bands[i].value)
            if bands[top].low > max(b.high for i, b in bands.items() if i != top):
                best[top] = True
        frame[f"{phase}_best"] = best


# -- memory headroom ---------------------------------------------------------------------------
def _line(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """(intercept, slope) of the least-squares line, None when it cannot be fitted."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return mean_y - slope * mean_x, slope


def _noise(rows: Any) -> float:
    """The widest min..max of peak memory over a point's samples (0 when each ran once)."""
    widths = [float(r["peak_memory_bytes_max"]) - float(r["peak_memory_bytes_min"])
              for _, r in rows.iterrows()
              if is_finite_number(r.get("peak_memory_bytes_max"))
              and is_finite_number(r.get("peak_memory_bytes_min"))]
    return max(widths, default=0.0)


def largest_batches(comparison: Comparison) -> dict[str, dict[str, Any]]:
    """With rows over batch_size: variant -> per-example bytes, fixed bytes and the largest
    batch_size that should fit (`Comparison.headroom`, computed once by `build`).

    Peak memory grows about linearly with the batch: a fixed part (weights, optimizer state,
    the framework) plus a part per example. A straight line through a variant's measured
    points (least squares, at least two batch sizes) gives both; the largest batch that keeps
    KEEP_FREE of the memory free is read off it. It is an estimate: fragmentation and kernels
    that pick other algorithms at other sizes bend the line, so the next step is a run at
    that size. None is given where the line is noise: when memory grows over the measured
    batch sizes by less than MIN_GROWTH_OVER_NOISE x the spread between a point's repeated
    samples, or by less than MIN_GROWTH_SHARE of the memory used (the process RSS of older
    CPU results, mostly libraries and the allocator's pool, hides what a batch adds). On a
    CPU the line goes through the peak RSS increase of the training phase (`peak_memory`),
    so its fixed part is the phase's one-time costs; the resident set at the phase's start
    (`memory_start_bytes`, the median over the variant's points) is added back to it
    (`start_bytes`) before the line is held against the machine's RAM. Past
    MAX_EXTRAPOLATION x the largest measured batch the figure is only a lower bound
    (`at_least`).
    """
    capacity = comparison.context.get("memory_bytes")
    if comparison.row_key != "batch_size" or not capacity:
        return {}
    found = {}
    points = comparison.points
    for label in comparison.variants:
        rows = points[(points["variant"] == label) & points["status"].isin(USABLE)]
        pairs = [(float(r["row"]), float(r["peak_memory_bytes"])) for _, r in rows.iterrows()
                 if is_finite_number(r["peak_memory_bytes"]) and str(r["row"]).isdigit()]
        line = _line(*map(list, zip(*pairs, strict=True))) if len(pairs) >= 2 else None
        if line is None or line[1] <= 0:
            continue
        fixed, per_example = line
        starts = [float(s) for s in rows["memory_start_bytes"] if is_finite_number(s)]
        start = statistics.median(starts) if starts else 0.0
        sizes = sorted(int(x) for x, _ in pairs)
        growth = per_example * (sizes[-1] - sizes[0])
        if (growth < MIN_GROWTH_OVER_NOISE * _noise(rows)
                or growth < MIN_GROWTH_SHARE * max(y for _, y in pairs)):
            continue
        fixed += start
        fits = max(int(((1 - KEEP_FREE) * capacity - fixed) // per_example), 0)
        cap = MAX_EXTRAPOLATION * sizes[-1]
        found[label] = {"bytes_per_example": per_example, "fixed_bytes": fixed,
                        "start_bytes": start,
                        "largest_batch_size": min(fits, cap), "at_least": fits > cap,
                        "capacity_bytes": capacity, "measured_batch_sizes": sizes}
    return found
