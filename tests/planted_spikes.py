"""A user's callback that stalls every `every`-th training step for `stall_s` (a garbage
collector, a neighbour's burst): spikes on top of steady steps, outside the model.

Plug in with `+profiler.stall._target_=planted_spikes.StallEvery` (tests/ on PYTHONPATH).
"""

from __future__ import annotations

import time
from typing import Any

from lightning.pytorch.callbacks import Callback


class StallEvery(Callback):
    def __init__(self, every: int = 4, stall_s: float = 0.3) -> None:
        self.every, self.stall_s = every, stall_s
        self.steps = 0

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.steps += 1
        if self.steps % self.every == 0:
            time.sleep(self.stall_s)
