"""A job directory read as the core's Outcome: the one adapter between result.json (and
issue #20's trust flags) and the search. The sweeper reads each job with it as the job
ends, and the replay reads the same directories with it again, so both see the same.

Per phase of the objective (train, inference):
- the robust step time: `<phase>_median_step_s`, else `<phase>_seconds_per_iteration`;
  examples per step: seconds_per_iteration x examples_per_second (all ranks);
- trust: the flags `thin:<phase>`, `noisy:<phase>`, `contended:<phase>` make the job's
  figures untrusted (counted for no verdict), `warmup_swallowed:<phase>` leaves it without
  figures; a result.json without these flags (written before #20) is read as trusted;
- with compile on, the compile charge: the larger of `compile_time_s` (TorchDynamo's own
  counter) and the first step's excess over the median step (which also holds backward's
  compile and TorchInductor's start, missing from the counter).

Under DDP a rank > 0 that failed may leave `rank<N>.status.json` ({"status", "reason"}) in
the job directory; an `oom` there is an OOM of the point whatever rank 0 recorded.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.autotune.outcome import Outcome, Phase
from harness.autotune.stats import PHASES
from harness.errors import HarnessError
from harness.result.store import RESULT_FILE, load_result

TRUST_FLAGS = ("thin", "noisy", "contended")  # <flag>:<phase> in result.json `flags`
NO_FIGURES_FLAG = "warmup_swallowed"
OVERRIDES_FILE = Path(".hydra") / "overrides.yaml"
RANK_STATUS_GLOB = "rank*.status.json"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


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
    rank_oom = _rank_oom(job_dir)
    if rank_oom and status != "oom":
        status, reason = "oom", rank_oom
    phases: dict[str, Phase] = {}
    why: list[str] = []
    charge = 0.0
    for phase in PHASES[objective]:
        figures = _phase(metrics, phase) if f"{NO_FIGURES_FLAG}:{phase}" not in flags else None
        if figures is None:
            if status in ("ok", "partial"):
                status = "failed"
                reason = result.phase_errors.get(phase) or f"no {phase} figures"
            continue
        phases[phase] = figures
        why += [flag for flag in TRUST_FLAGS if f"{flag}:{phase}" in flags]
        first, median = (_number(metrics.get(f"{phase}_{k}")) for k in ("first_step_s",
                                                                          "median_step_s"))
        if first is not None and median is not None:
            charge += max(0.0, first - median)
    compiled = bool(result.knobs.get("compile")) if result.knobs else False
    diagnosis = result.diagnosis
    shares = [getattr(diagnosis, f"{p}_data_share", None) for p in PHASES[objective]] if (
        diagnosis is not None) else []
    shares = [s for s in shares if _number(s) is not None]
    return Outcome(
        status=status, reason=reason, phases=phases if status in ("ok", "partial") else {},
        trusted=not why, why=tuple(dict.fromkeys(why)),
        compile_charge_s=max(_number(metrics.get("compile_time_s")) or 0.0, charge)
        if compiled else 0.0,
        bound_by=diagnosis.bound_by if diagnosis is not None else None,
        data_share=max(shares) if shares else None,
        job_seconds=_number(result.duration_s) or 0.0,
        ended_at=_ended_at(result.started_at, result.duration_s),
        peak_memory_bytes=_number(metrics.get("peak_device_allocated_bytes"))
        or _number(metrics.get("peak_rss_bytes")),
    )


def _phase(metrics: dict[str, Any], phase: str) -> Phase | None:
    per_iteration = _number(metrics.get(f"{phase}_seconds_per_iteration"))
    rate = _number(metrics.get(f"{phase}_examples_per_second"))
    if not per_iteration or not rate:
        return None
    median = _number(metrics.get(f"{phase}_median_step_s"))
    return Phase(seconds_per_step=median if median else per_iteration,
                 examples_per_step=per_iteration * rate)


def _rank_oom(job_dir: Path) -> str | None:
    """The reason of the first rank > 0 that ran out of memory (rank<N>.status.json)."""
    for path in sorted(job_dir.glob(RANK_STATUS_GLOB)):
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(found, dict) and found.get("status") == "oom":
            return f"{path.name.split('.')[0]}: {found.get('reason') or 'out of memory'}"
    return None


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
    path = Path(job_dir) / OVERRIDES_FILE
    if not path.is_file():
        return None
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return [str(o) for o in loaded] if isinstance(loaded, list) else None


def elapsed(started_at: float, outcomes: list[Outcome]) -> float:
    """Seconds from the sweep's start to the end of its latest job, read off the jobs'
    result.json (so the replay of a sweep sees the same time as the sweep did)."""
    ends = [o.ended_at for o in outcomes if o.ended_at is not None]
    return max(0.0, max(ends) - started_at) if ends else 0.0
