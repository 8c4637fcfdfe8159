"""A job directory read as the core's Outcome, for the sweeper and the replay alike: each phase
as the table reads it (harness.measured.sample_of), the compile charge as docs/autotune.md's."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from harness.autotune.outcome import Outcome, Phase
from harness.autotune.score import PHASES
from harness.errors import HarnessError
from harness.measured import MAIN_PHASES, USABLE, is_finite_number, sample_of
from harness.result.store import RESULT_FILE, hydra_overrides, load_result

NO_FIGURES_FLAG = "warmup_swallowed"


def _number(value: Any) -> float | None:
    return float(value) if is_finite_number(value) else None


def outcome_of(job_dir: Path, objective: str) -> Outcome:
    """How the job in `job_dir` ended, read for `objective` (training, inference, both)."""
    job_dir = Path(job_dir)
    if not (job_dir / RESULT_FILE).is_file():
        return Outcome("missing", "no result.json (still running, killed, or never started)")
    try:
        result = load_result(job_dir)
    except HarnessError as err:
        return Outcome("unreadable", str(err))
    metrics, flags = result.metrics, set(result.flags)
    status, reason = result.status, result.reason
    phases: dict[str, Phase] = {}
    why: list[str] = []
    charge = 0.0
    for phase in PHASES[objective]:
        sample = sample_of(metrics, flags, phase)
        per_iteration = _number(metrics.get(f"{phase}_seconds_per_iteration"))
        if sample is None or not per_iteration or f"{NO_FIGURES_FLAG}:{phase}" in flags:
            if status in USABLE:
                status, reason = "failed", result.phase_errors.get(phase) or f"no {phase} figures"
            continue
        per_step = per_iteration * metrics[f"{phase}_examples_per_second"]  # examples, all ranks
        phases[phase] = Phase(per_step / sample.figure, per_step, sample.spread)
        why += [c for c, on in (("contended", sample.contended), ("noisy", sample.noisy)) if on]
        first, median = (_number(metrics.get(f"{phase}_{k}")) for k in ("first_step_s", "median_step_s"))
        if first is not None and median is not None:
            charge += max(0.0, first - median)
    compiled = bool(result.knobs.get("compile")) if result.knobs else False
    diagnosis = result.diagnosis
    peak, source = peak_memory(metrics)
    device = result.device
    shares = [s for p in PHASES[objective]
              if _number(s := getattr(diagnosis, f"{p}_data_share", None)) is not None]
    return Outcome(
        status=status, reason=reason, phases=phases if status in USABLE else {},
        trusted=not why, why=tuple(dict.fromkeys(why)),
        compile_charge_s=max(_number(metrics.get("compile_time_s")) or 0.0, charge)
        if compiled else 0.0,
        bound_by=diagnosis.bound_by if diagnosis is not None else None,
        data_share=max(shares) if shares else None,
        job_seconds=_number(result.duration_s) or 0.0,
        ended_at=_ended_at(result.started_at, result.duration_s),
        peak_memory_bytes=peak, memory_source=source,
        accelerator=device.accelerator if device is not None else None,
        device_allocated_bytes=_number(metrics.get("peak_device_allocated_bytes")),
        device_memory_bytes=_number(device.memory_bytes) if device is not None else None,
    )


def peak_memory(metrics: dict[str, Any]) -> tuple[float | None, str | None]:
    """(bytes, source) of a job's peak memory, read as the sweep table reads it
    (harness.sweep.table.peak_memory, a layer above autotune: tests/test_autotune_recipe.py
    holds the two alike): torch's peak allocated on CUDA, else a phase's peak RSS increase over
    its start (training's first), else the process's peak RSS."""
    device = _number(metrics.get("peak_device_allocated_bytes"))
    if device is not None:
        return device, "device allocated"
    for phase in MAIN_PHASES:
        increase = _number(metrics.get(f"{phase}_peak_rss_increase_bytes"))
        if increase is not None:
            return increase, "peak RSS increase"
    rss = _number(metrics.get("peak_rss_bytes"))
    return (rss, "process RSS") if rss is not None else (None, None)


def _ended_at(started_at: str | None, duration_s: float | None) -> float | None:
    if not started_at or _number(duration_s) is None:
        return None
    try:
        return datetime.fromisoformat(started_at).timestamp() + float(duration_s)  # type: ignore[arg-type]
    except ValueError:
        return None


def job_overrides(job_dir: Path) -> list[str] | None:
    """The overrides a job ran with: result.json's, else Hydra's .hydra/overrides.yaml."""
    try:
        result = load_result(job_dir)
        if result.overrides:
            return list(result.overrides)
    except HarnessError:
        pass
    return hydra_overrides(job_dir)


def elapsed(started_at: float, outcomes: list[Outcome]) -> float:
    """Seconds from the sweep's start to its latest job's end, as the sweep and its replay see it."""
    ends = [o.ended_at for o in outcomes if o.ended_at is not None]
    return max(0.0, max(ends) - started_at) if ends else 0.0
