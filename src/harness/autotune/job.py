"""One job of the search as overrides: the command's fixed overrides, the candidate's values,
and how autotune measures it (mode, steps, stage, round: harness.result.jobs ignores these)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.autotune.knowledge import Job
from harness.autotune.settings import Settings
from harness.autotune.space import Space
from harness.config.overrides import AUTOTUNE_STAGE, ROUND_KEY

MODES = {"training": "train", "inference": "inference", "both": "both"}
ACCUMULATE = "trainer.accumulate_grad_batches"
WORKERS, PREFETCH = "data.num_workers", "data.prefetch_factor"


@dataclass(frozen=True)
class Shape:
    """What the sweep's config says about every job (a batch count: None where it has none), and
    its space (at a global batch, the accumulation of each micro-batch)."""

    train_batches: int | None = None
    predict_batches: int | None = None
    accumulate: int = 1
    workers: int = 0
    prefetch: int = 2  # DataLoader's default prefetch_factor
    space: Space = Space(())


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def overrides(job: Job, fixed: list[str], settings: Settings, shape: Shape) -> list[str]:
    """`fixed` (less the keys autotune sets here), the candidate, then how it is measured."""
    # the batches workers prefetch are warm-up too: a short probe measures the loader, not its buffer
    warmup = job.warmup_steps + (_int(job.candidate.get(WORKERS), shape.workers)
                                 * _int(job.candidate.get(PREFETCH), shape.prefetch))
    steps = warmup + job.measured_steps
    measuring = {"mode": MODES[settings.objective], "profiler.speed.warmup_steps": warmup,
                 "trainer.max_epochs": -1, "trainer.limit_val_batches": 0}
    if settings.objective in ("training", "both"):
        # the batches of one optimizer step: global_batch_size's, else trainer.accumulate_grad_batches
        typed = job.candidate.get(ACCUMULATE) or job.candidate.get(f"+{ACCUMULATE}")
        accumulate = max(shape.space.accumulation(job.candidate) or _int(typed, shape.accumulate), 1)
        # max_steps counts optimizer steps, as the speed preset's measured steps do with
        # accumulation (its warm-up: `warmup` batches rounded up to whole optimizer steps)
        optimizer_steps = math.ceil(warmup / accumulate) + job.measured_steps
        measuring["trainer.max_steps"] = optimizer_steps
        batches = optimizer_steps * accumulate
        if shape.train_batches is not None and shape.train_batches < batches:
            # one epoch of whole optimizer steps: no loader restart mid-measure, no short step
            measuring["data.train_batches"] = batches
    if settings.objective in ("inference", "both"):
        measuring["trainer.limit_predict_batches"] = steps
        if shape.predict_batches is not None and shape.predict_batches < steps:
            measuring["data.predict_batches"] = steps
    kept = [o for o in fixed if o.partition("=")[0].lstrip("+~") not in measuring]
    return [*kept, *job.candidate.overrides(), *(f"{k}={v}" for k, v in measuring.items()),
            "repeat=1", f"+{ROUND_KEY}={job.round}", f"+{AUTOTUNE_STAGE}={job.stage}"]
