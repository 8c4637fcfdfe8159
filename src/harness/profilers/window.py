"""Step windows of the presets that record only part of a run, checked against the run's length.

`planned_training_steps` is only known once Lightning has set up the training
data (trainer.num_training_batches is inf before that), so the check runs at
the start of training, before anything is recorded.
"""

from __future__ import annotations

import math
from typing import Any

from harness.errors import HarnessError


def planned_training_steps(trainer: Any) -> float:
    """Training batches the fit will run on this rank (inf when unbounded)."""
    per_epoch = trainer.num_training_batches
    epochs = trainer.max_epochs if trainer.max_epochs not in (None, -1) else math.inf
    planned = per_epoch * epochs if per_epoch else 0
    if trainer.max_steps is not None and trainer.max_steps > 0:
        # max_steps counts optimizer steps; with gradient accumulation a step takes several batches.
        planned = min(planned, trainer.max_steps * trainer.accumulate_grad_batches)
    return planned


def check_window(preset: str, window: str, needed: int, trainer: Any, fix: str) -> None:
    """Raise a one-line HarnessError when a `needed`-step window does not fit into the fit."""
    planned = planned_training_steps(trainer)
    if needed > planned:
        raise HarnessError(
            f"profiler.{preset}: the recording window ({window} = {needed} training steps) is"
            f" longer than this run ({int(planned)} training steps, set by"
            " trainer.limit_train_batches, the data's batches, max_epochs and max_steps), so the"
            f" report would be empty. Fix: {fix}, or raise trainer.limit_train_batches"
        )


class StepWindow:
    """Training steps [start, start + length) of a preset that records part of a run.

    Call `opens_now()` in on_train_batch_start (True just before the window's first
    step) and `step_done()` in on_train_batch_end (True once its last step finished).
    """

    def __init__(self, start: int, length: int) -> None:
        self.start = start
        self.length = length
        self.done = 0  # training steps finished so far

    @property
    def end(self) -> int:
        return self.start + self.length

    def opens_now(self) -> bool:
        return self.done == self.start

    def step_done(self) -> bool:
        self.done += 1
        return self.done == self.end
