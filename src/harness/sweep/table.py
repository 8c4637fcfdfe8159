"""The comparison of a sweep as data (`build`): one point per combination of swept values, its
samples pooled; speed-ups with their verdicts, each row's best and the sweep's fastest point, all
from harness.judge; the memory headroom. docs/sweeps.md says what each column means."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config.overrides import AUTOTUNE_STAGE, REPEAT_KEYS, parse_overrides
from harness.config.sweep_keys import short_setting
from harness.errors import ConfigError, HarnessError
from harness.judge import TOLERANCE, Evidence, Verdict, band_of, compare, fastest, job_noise, judge_sizes
from harness.measured import MAIN_PHASES, PHASES, USABLE, is_finite_number, peak_memory, pool, sample_of
from harness.result.jobs import Collection, JobResult

if TYPE_CHECKING:
    import pandas as pd

DEFAULT = "(default)"
# Keys that never make rows or variants: they say how a run was launched, not what ran.
NOT_AXES = ("sweep",)
# Where a sweep's `rows`, `baseline` and `repeat_keys` are set; harness-report's --rows...
SETTINGS_KEY = "hydra.callbacks.sweep_report"


@dataclass(frozen=True)
class Metric:
    name: str  # column in comparison.csv / key in comparison.json
    unit: str
    what: str
    higher_is_better: bool
    compared: bool = True  # whether harness-report A B compares it


METRICS: tuple[Metric, ...] = (
    *(metric for phase, name in (("train", "training"), ("inference", "inference (predict, eval mode)"))
      for metric in (
          Metric(f"{phase}_seconds_per_iteration", "s",
                 f"{name}: seconds per iteration (median over samples), warm-up excluded", False),
          Metric(f"{phase}_examples_per_second", "examples/s",
                 f"{name}: examples per iteration / seconds per iteration, warm-up excluded", True),
          Metric(f"{phase}_between_steps_share", "share",
                 f"{name}: share of each iteration between steps (batch fetch, end-of-step work)",
                 False, False))),
    Metric("train_flop_per_s", "FLOP/s",
           "training: FLOPs of a step (diagnose preset) / seconds per iteration", True, False),
    Metric("train_mfu", "share",
           "training: FLOP/s / the device's dense peak (null without a peak)", True, False),
    Metric("peak_memory_bytes", "bytes", "peak device memory allocated by torch (CUDA); on a CPU the training"
           " phase's peak resident set minus the resident set at its start (peak RSS increase), else, for"
           " results without it, the process's peak resident set during the job", False))
METRIC_NAMES = tuple(m.name for m in METRICS)
# speed-up column -> the metric it divides (variant / baseline, same row)
RATIOS = {"train_speedup": "train_examples_per_second", "inference_speedup": "inference_examples_per_second",
          "memory_ratio": "peak_memory_bytes"}
# the columns of each ratio: <ratio><suffix> (add_ratios), all from the judge's Verdict: its ratio and
# interval, kind and reason; _pairs: the rounds' pairs a paired verdict stands on; _unpaired: those left out
RATIO_SUFFIXES = ("", "_min", "_max", "_thin", "_verdict", "_verdict_reason", "_pairs", "_unpaired")

# Memory headroom (`largest_batches`): the share kept free; when its line is noise or stretched too far.
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
    noise: dict[str, float] = field(default_factory=dict)  # phase -> job-to-job noise (log sd)
    fastest: dict[str, dict[str, Any]] = field(default_factory=dict)  # see fastest_points
    tolerance: float = TOLERANCE  # the verdicts' threshold (sweep.decide_within)
    # (row, variant) -> ratio (RATIOS) -> the judge's verdict against the row's baseline
    verdicts: dict[tuple[str, str], dict[str, Verdict]] = field(default_factory=dict)

    @property
    def status_counts(self) -> dict[str, int]:
        return dict(Counter(job.status for job in self.jobs))

    @property
    def axes(self) -> list[str]:
        """The keys a point's label names: the row key, then the variant keys."""
        return ([self.row_key] if self.row_key else []) + self.variant_keys

    @property
    def repeated(self) -> bool:
        return bool(len(self.points)) and int(self.points["samples"].max()) > 1

    @property
    def rounds(self) -> int:
        """Rounds of the sweep (repeat=N in a multirun), 0 when it ran none."""
        return int(self.points["rounds"].max()) if len(self.points) else 0

    @cached_property
    def _by_place(self) -> dict[tuple[str, str], Any]:
        return {(str(p["row"]), p["variant"]): p for _, p in self.points.iterrows()}

    def point(self, row: str, variant: str) -> Any:
        return self._by_place.get((row, variant))

    def point_label(self, point: Any) -> str:
        """'batch_size=16, precision=bf16': the row's setting and the variant's."""
        row = [f"{self.row_key}={point['row']}"] if self.row_key else []
        variant = [] if point["variant"] == "all" else [point["variant"]]
        return ", ".join(row + variant) or "all"

    def short_label(self, label: str) -> str:
        """'precision=bf16, compile=true' -> 'bf16 compile=true': bare words stand alone."""
        settings = self.variant_settings.get(label, {})
        return " ".join(short_setting(k, settings.get(k, DEFAULT)) for k in self.variant_keys)


def sort_key(value: str) -> tuple[int, float, str]:
    """Numbers first, by value (`(0, value, '')`), then words."""
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def variant_label(keys: Sequence[str], settings: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={settings.get(k, DEFAULT)}" for k in keys) or "all"


def parse_variant_spec(spec: str, prefix: str = "") -> dict[str, str]:
    """'precision=bf16,compile=true' -> {'precision': 'bf16', 'compile': 'true'}."""
    parts = [part.strip() for part in spec.replace(";", ",").split(",")]
    if not all(part.partition("=")[0].strip() and "=" in part for part in parts):
        raise ConfigError(f"{prefix}baseline", spec, "key=value pairs separated by commas",
                          f"{prefix}baseline='precision=fp32,compile=false'")
    return parse_overrides(parts)


def _repeat_keys_name(prefix: str) -> str:
    return "--repeat-keys" if prefix == "--" else f"{prefix}repeat_keys"


def check_repeat_keys(value: Any, prefix: str = f"{SETTINGS_KEY}.") -> tuple[str, ...]:
    """The repeat keys from a list (the config's) or a comma-separated string (harness-report's)."""
    if value is None:
        return REPEAT_KEYS
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, Sequence) or not all(isinstance(k, str) and k for k in value):
        raise ConfigError(_repeat_keys_name(prefix), value, "a list of keys, e.g. [seed]",
                          f"{_repeat_keys_name(prefix)}=[seed]")
    return tuple(value)


def _pooled_error(prefix: str, setting: str, value: str, key: str, axes: list[str]) -> ConfigError:
    keys = _repeat_keys_name(prefix)
    instead = f"{prefix}{setting}={axes[0]}" if setting == "rows" and axes else f"drop {key}"
    return ConfigError(f"{prefix}{setting}", value, f"a swept key that is not a repeat key ({key} is in"
                       f" {keys}: its values are samples of each point, not rows or variants)",
                       f"{instead}, or leave {key} out of {keys}")


def check_settings(rows: str | None, baseline: str | None, swept: Mapping[str, Sequence[str]],
                   prefix: str = f"{SETTINGS_KEY}.",
                   repeat_keys: Sequence[str] = REPEAT_KEYS) -> tuple[str | None, list[str]]:
    """The row key and the column keys of a sweep over `swept`; a ConfigError naming `<prefix>rows`
    or `<prefix>baseline` when it matches no swept key."""
    axes = [k for k in swept if k not in NOT_AXES and k not in repeat_keys]
    if rows is not None and rows not in axes:
        if rows in swept and rows in repeat_keys:
            raise _pooled_error(prefix, "rows", rows, rows, axes)
        raise ConfigError(f"{prefix}rows", rows, f"a swept key (swept: {', '.join(axes) or 'nothing'})",
                          f"{prefix}rows={axes[0]}" if axes else f"drop {prefix}rows")
    # `rows`, else batch_size if swept, else the first of two or more swept keys
    row_key = rows or ("batch_size" if "batch_size" in axes else axes[0] if len(axes) > 1 else None)
    columns = [k for k in axes if k != row_key]
    for key, value in parse_variant_spec(baseline, prefix).items() if baseline else ():
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
            raise ConfigError(f"{prefix}baseline", baseline, f"one of the swept values of {key}:"
                              f" {', '.join(swept[key])} (variants: {'; '.join(variants)})",
                              f"{prefix}baseline='{key}={swept[key][0]}'")
    return row_key, columns


def build(collection: Collection, rows: str | None = None, baseline: str | None = None,
          settings_prefix: str = f"{SETTINGS_KEY}.",
          repeat_keys: Sequence[str] = REPEAT_KEYS, tolerance: float = TOLERANCE) -> Comparison:
    """The jobs as rows x variants, those differing only in `repeat_keys` pooled; verdicts at `tolerance`."""
    import pandas as pd

    jobs = collection.jobs
    keys = dict.fromkeys(key for job in jobs for key in job.settings)
    values = {key: list(dict.fromkeys(job.settings.get(key, DEFAULT) for job in jobs)) for key in keys}
    # swept: the keys whose value differs between jobs, with their values (first seen first)
    swept = {key: seen for key, seen in values.items() if len(seen) > 1}
    fixed = {key: seen[0] for key, seen in values.items() if len(seen) == 1}
    row_key, variant_keys = check_settings(rows, baseline, swept, settings_prefix, repeat_keys)
    pooled = {k: sorted(seen, key=sort_key) for k, seen in swept.items() if k in repeat_keys}

    groups: dict[tuple[str, str], list[JobResult]] = {}
    settings_of: dict[str, dict[str, str]] = {}
    for job in jobs:
        label = variant_label(variant_keys, job.settings)
        row = job.settings.get(row_key, DEFAULT) if row_key else "all"
        groups.setdefault((row, label), []).append(job)
        settings_of.setdefault(label, job.settings)
    variants = list(settings_of)
    wanted = parse_variant_spec(baseline) if baseline else {}
    chosen = next((v for v in variants
                   if all(settings_of[v].get(k, DEFAULT) == x for k, x in wanted.items())), None)
    if chosen is None:  # each value ran (check_settings), not this combination
        raise HarnessError(f"baseline={baseline!r} matches no variant that ran in this sweep. Fix:"
                           f" choose one of: {'; '.join(variants)}")
    row_values = sorted({str(row) for row, _ in groups}, key=sort_key)

    records = []
    for (row, label), members in sorted(groups.items(), key=lambda item: (
            row_values.index(str(item[0][0])), variants.index(item[0][1]))):
        record: dict[str, Any] = {row_key: row} if row_key else {}
        record.update({key: members[0].settings.get(key, DEFAULT) for key in variant_keys})
        record.update(row=row, variant=label, baseline=label == chosen)
        record.update(point(members))
        record["pooled"] = ", ".join(
            f"{len({m.settings.get(k, DEFAULT) for m in members})} {k}s" for k in pooled) or None
        records.append(record)
    frame = pd.DataFrame.from_records(records)  # in row, then sweep order
    noise = add_figures(frame)
    verdicts = add_ratios(frame, chosen, tolerance, noise)
    # an autotune sweep's points pool stages minutes apart: its verdict (autotune.report) names the best
    searched = any(AUTOTUNE_STAGE in parse_overrides(job.overrides) for job in jobs)
    add_best(frame, tolerance, noise, decide=not searched)
    comparison = Comparison(
        root=collection.root, row_key=row_key, variant_keys=variant_keys, fixed=fixed, variants=variants,
        baseline=chosen, rows=row_values, points=frame, jobs=jobs, problems=list(collection.problems),
        context=_context(jobs), variant_settings=settings_of, repeat_keys=pooled,
        repeat_settings=tuple(repeat_keys), noise=noise, tolerance=tolerance, verdicts=verdicts)
    comparison.headroom = largest_batches(comparison)
    comparison.fastest = {} if searched else fastest_points(comparison)
    return comparison


def _context(jobs: list[JobResult]) -> dict[str, Any]:
    for result in (job.result for job in jobs):
        if result is not None and result.device is not None:
            device = {k: getattr(result.device, k)
                      for k in ("accelerator", "device_name", "world_size", "memory_bytes")}
            return {**device, "torch": result.versions.get("torch"),
                    "lightning": result.versions.get("lightning"), "host": result.host}
    return {}


def _sample(figures: dict[str, Any]) -> dict[str, Any]:
    values = {name: figures.get(name) for name in METRIC_NAMES}
    values["peak_memory_bytes"], _, values["memory_start_bytes"] = peak_memory(figures)
    return values


def point(jobs: list[JobResult]) -> dict[str, Any]:
    """The pooled figures of the jobs of one (row, variant), with status and phase notes."""
    usable = [j for j in jobs if j.status in USABLE]
    first = usable[0] if usable else jobs[0]
    samples = [_sample(s) for j in usable for s in j.samples]
    status = "partial" if any(j.status == "partial" for j in usable) else first.status
    record: dict[str, Any] = {"jobs": " ".join(j.name for j in jobs), "status": status,
                              "reason": None if usable else first.reason, "samples": len(samples)}
    record["memory_samples"] = [s["peak_memory_bytes"] for s in samples
                                if is_finite_number(s["peak_memory_bytes"])]
    value, low, high, per_step = pool(samples)
    for name in METRIC_NAMES:
        record[name] = value.get(name) if is_finite_number(value.get(name)) else None
        record[f"{name}_min"], record[f"{name}_max"] = low.get(name), high.get(name)
    record["memory_source"] = peak_memory(first.samples[0] if first.samples else {})[1]
    start = value.get("memory_start_bytes")
    record["memory_start_bytes"] = start if is_finite_number(start) else None
    flags = {f for j in usable if j.result for f in j.result.flags}
    # a round's one job: its sample, to pair with the other points' of the same round (a round
    # with two jobs of the point, e.g. seeds pooled too, pairs nothing)
    in_rounds = [j for j in usable if j.result and j.result.sweep_round is not None]
    by_round = {j.result.sweep_round: j for j in in_rounds if len(j.samples) == 1}
    by_round = by_round if len(by_round) == len(in_rounds) else {}
    for phase in MAIN_PHASES:  # a job's flags hold for each of its repeats
        found = [one for job in usable for f in job.samples
                 if (one := sample_of(f, job.result.flags if job.result else [], phase))]
        paired_up = {r: sample_of(j.samples[0], j.result.flags, phase) for r, j in by_round.items()}
        record[f"{phase}_samples"] = found
        record[f"{phase}_rounds"] = {r: s for r, s in paired_up.items() if s}
        record[f"{phase}_examples_per_step"] = per_step.get(phase)
        record[f"{phase}_contended"] = any(s.contended for s in found)
        record[f"{phase}_noisy"] = any(s.noisy for s in found)
    for phase in PHASES:
        record[f"{phase}_thin"] = f"thin:{phase}" in flags
        errors = [j.result.phase_errors[phase] for j in usable if j.result and phase in j.result.phase_errors]
        record[f"{phase}_error"] = errors[0] if errors else None
    bounds = [j.result.diagnosis.bound_by for j in usable if j.result and j.result.diagnosis]
    record["bound_by"] = majority(bounds)
    record["train_nonfinite_loss"] = "nonfinite_loss" in flags
    record["rounds"] = len({j.result.sweep_round for j in jobs
                            if j.result and j.result.sweep_round is not None})
    return record


def add_figures(frame: pd.DataFrame) -> dict[str, float]:
    """Per phase: `<phase>_band`, `_evidence` (the band and the rounds' samples) and `_counted`,
    the band widened by the phase's job noise; the point's examples/s and s/it are the band's
    figure (its range the band's), the one figure every verdict is about. Returns the noise."""
    noise = {}
    for phase in MAIN_PHASES:
        samples = frame[f"{phase}_samples"]
        noise[phase] = job_noise([[s.figure for s in found if s.counted] for found in samples])
        bands = [band_of(found, noise[phase]) for found in samples]
        frame[f"{phase}_band"] = pd_objects(bands, frame.index)
        frame[f"{phase}_evidence"] = pd_objects(
            [Evidence(b, r) for b, r in zip(bands, frame[f"{phase}_rounds"], strict=True)], frame.index)
        frame[f"{phase}_counted"] = [b.counted if b else 0 for b in bands]
        rate, time = f"{phase}_examples_per_second", f"{phase}_seconds_per_iteration"
        for at, band, per_step in zip(frame.index, bands, frame[f"{phase}_examples_per_step"], strict=True):
            if band is None or not band.value:
                continue
            low, high = (band.low, band.high) if band.known else (None, None)
            frame.loc[at, [rate, f"{rate}_min", f"{rate}_max"]] = [band.value, low, high]
            if is_finite_number(per_step):
                frame.loc[at, [time, f"{time}_min", f"{time}_max"]] = [
                    per_step / band.value, high and per_step / high, low and per_step / low]
    return noise


def pd_objects(values: list[Any], index: Any) -> Any:
    import pandas as pd

    # object dtype keeps True / False / None and dataclasses (not numpy bools, not NaN)
    return pd.Series(values, index=index, dtype=object)


def majority(bounds: list[str]) -> str | None:
    """The bound most samples name; a tie names both in first-seen order ("compute/host")."""
    counts = Counter(bounds)
    top = max(counts.values(), default=0)
    return "/".join(dict.fromkeys(b for b in bounds if counts[b] == top)) or None


def add_ratios(frame: pd.DataFrame, baseline: str, tolerance: float,
               noise: dict[str, float]) -> dict[tuple[str, str], dict[str, Verdict]]:
    """Each ratio's columns (RATIO_SUFFIXES) from the judge's verdict of the point against its
    row's baseline: speed through the rounds' pairs where those decide, else the two bands
    (harness.judge.compare); peak memory by judge_sizes. Returns the verdicts by (row, variant)."""
    base = frame[frame["variant"] == baseline].set_index("row")
    verdicts: dict[tuple[str, str], dict[str, Verdict]] = {}
    columns = {ratio: [] for ratio in RATIOS}
    for _, p in frame.iterrows():
        ref = base.loc[p["row"]] if p["row"] in base.index and p["variant"] != baseline else None
        for ratio, metric in RATIOS.items():
            phase = metric.split("_", 1)[0]
            verdict = None
            if ref is not None and ref["status"] in USABLE and p["status"] in USABLE:
                verdict = (judge_sizes(ref["memory_samples"], p["memory_samples"], tolerance)
                           if phase not in MAIN_PHASES else
                           compare(ref[f"{phase}_evidence"], p[f"{phase}_evidence"], tolerance, noise[phase]))
            found = dict.fromkeys(RATIO_SUFFIXES)
            found["_thin"] = (bool(p[f"{phase}_thin"] or ref[f"{phase}_thin"])
                              if ref is not None and phase in PHASES else None)
            if p["variant"] == baseline and is_finite_number(p[metric]):
                found[""] = 1.0  # the baseline against itself
            if verdict is not None:
                verdicts.setdefault((str(p["row"]), p["variant"]), {})[ratio] = verdict
                found.update({"": verdict.ratio, "_min": verdict.low, "_max": verdict.high,
                              "_verdict": verdict.kind, "_verdict_reason": verdict.reason,
                              "_pairs": verdict.pairs,
                              "_unpaired": verdict.unpaired if verdict.pairs else None})
            columns[ratio].append(found)
    for ratio, found in columns.items():
        for suffix in RATIO_SUFFIXES:
            frame[f"{ratio}{suffix}"] = pd_objects([f[suffix] for f in found], frame.index)
    return verdicts


def add_best(frame: pd.DataFrame, tolerance: float, noise: dict[str, float], decide: bool) -> None:
    """`<phase>_best`: True for a row's fastest variant where harness.judge.fastest decides (and `decide`)."""
    for phase in MAIN_PHASES:
        best = [False] * len(frame)
        for _, group in _usable(frame, phase).groupby("row", sort=False):
            if len(group) > 1 and decide:
                found = fastest(dict(group[f"{phase}_evidence"].items()), tolerance, noise=noise[phase])
                if found is not None and found.decided:
                    best[frame.index.get_loc(found.key)] = True
        frame[f"{phase}_best"] = pd_objects(best, frame.index)


def _usable(frame: pd.DataFrame, phase: str) -> pd.DataFrame:
    metric = f"{phase}_examples_per_second"
    return frame[frame["status"].isin(USABLE) & frame[metric].map(is_finite_number)]


def fastest_points(comparison: Comparison) -> dict[str, dict[str, Any]]:
    """Per phase, the sweep's fastest point (harness.judge.fastest): figure, band, ties, why."""
    found: dict[str, dict[str, Any]] = {}
    frame = comparison.points
    for phase in MAIN_PHASES:
        best = fastest(dict(_usable(frame, phase)[f"{phase}_evidence"].items()),
                       comparison.tolerance, noise=comparison.noise.get(phase, 0.0))
        if best is None:
            continue
        at = frame.loc[best.key]
        found[phase] = {"point": comparison.point_label(at), "row": str(at["row"]), "variant": at["variant"],
                        "examples_per_second": best.band.value, "low": best.band.low, "high": best.band.high,
                        "decided": best.decided, "settled": best.settled,
                        "ties": [comparison.point_label(frame.loc[k]) for k in best.ties], "why": best.why}
    return found


def largest_batches(comparison: Comparison) -> dict[str, dict[str, Any]]:
    """Rows over batch_size: variant -> the largest batch_size that should fit (docs/sweeps.md)."""
    capacity = comparison.context.get("memory_bytes")
    if comparison.row_key != "batch_size" or not capacity:
        return {}
    found = {}
    points = comparison.points
    for label in comparison.variants:
        rows = points[(points["variant"] == label) & points["status"].isin(USABLE)]
        pairs = [(float(r["row"]), float(r["peak_memory_bytes"])) for _, r in rows.iterrows()
                 if is_finite_number(r["peak_memory_bytes"]) and str(r["row"]).isdigit()]
        try:
            per_example, fixed = statistics.linear_regression([x for x, _ in pairs], [y for _, y in pairs])
        except statistics.StatisticsError:  # under two points, or one batch size
            continue
        # the widest min..max of a point's samples (0 when each ran once)
        noise = max((r["peak_memory_bytes_max"] - r["peak_memory_bytes_min"]
                     for _, r in rows.iterrows() if is_finite_number(r["peak_memory_bytes_max"])
                     and is_finite_number(r["peak_memory_bytes_min"])), default=0.0)
        starts = [float(s) for s in rows["memory_start_bytes"] if is_finite_number(s)]
        start = statistics.median(starts) if starts else 0.0
        sizes = sorted(int(x) for x, _ in pairs)
        growth = per_example * (sizes[-1] - sizes[0])
        if (per_example <= 0 or growth < MIN_GROWTH_OVER_NOISE * noise
                or growth < MIN_GROWTH_SHARE * max(y for _, y in pairs)):
            continue
        fixed += start
        fits = max(int(((1 - KEEP_FREE) * capacity - fixed) // per_example), 0)
        cap = MAX_EXTRAPOLATION * sizes[-1]
        found[label] = {"bytes_per_example": per_example, "fixed_bytes": fixed, "start_bytes": start,
                        "largest_batch_size": min(fits, cap), "at_least": fits > cap,
                        "capacity_bytes": capacity, "measured_batch_sizes": sizes}
    return found
