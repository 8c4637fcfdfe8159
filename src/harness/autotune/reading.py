"""A job directory, as the one reader (harness.result.jobs) reads it, as the core's Outcome: each
phase and the peak memory as the table reads them, the compile charge as docs/autotune.md's."""

from __future__ import annotations

from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.autotune.outcome import Outcome, Phase
from harness.autotune.score import PHASES
from harness.measured import USABLE, is_finite_number, peak_memory, sample_of
from harness.result.jobs import JobResult, read_job

NO_FIGURES_FLAG = "warmup_swallowed"


def _number(value: Any) -> float | None:
    return float(value) if is_finite_number(value) else None


def outcome_of(job: Path | JobResult, objective: str) -> Outcome:
    """How the job (a directory, or read from one) ended, read for `objective` (training, inference, both)."""
    job = job if isinstance(job, JobResult) else read_job(Path(job))[0]
    status, reason, result = job.status, job.reason, job.result
    if result is None:
        return Outcome(status, reason)
    metrics, flags = result.metrics, set(result.flags)
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
    diagnosis, device = result.diagnosis, result.device
    peak, source, _ = peak_memory(metrics)
    shares = [s for p in PHASES[objective]
              if _number(s := getattr(diagnosis, f"{p}_data_share", None)) is not None]
    ended_at = None  # seconds since the epoch
    if result.started_at and _number(result.duration_s) is not None:
        with suppress(ValueError):
            ended_at = datetime.fromisoformat(result.started_at).timestamp() + float(result.duration_s)
    return Outcome(
        status=status, reason=reason, phases=phases if status in USABLE else {},
        trusted=not why, why=tuple(dict.fromkeys(why)),
        compile_charge_s=max(_number(metrics.get("compile_time_s")) or 0.0, charge)
        if result.knobs and result.knobs.get("compile") else 0.0,
        bound_by=diagnosis.bound_by if diagnosis is not None else None,
        data_share=max(shares) if shares else None, job_seconds=_number(result.duration_s) or 0.0,
        ended_at=ended_at, peak_memory_bytes=peak, memory_source=source,
        accelerator=device.accelerator if device is not None else None,
        device_allocated_bytes=_number(metrics.get("peak_device_allocated_bytes")),
        device_memory_bytes=_number(device.memory_bytes) if device is not None else None)


def elapsed(started_at: float, outcomes: list[Outcome]) -> float:
    """Seconds from the sweep's start to its latest job's end, as the sweep and its replay see it."""
    ends = [o.ended_at for o in outcomes if o.ended_at is not None]
    return max(0.0, max(ends) - started_at) if ends else 0.0
