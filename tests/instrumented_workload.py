"""The built-in model, plus a call per training step into a function imported by name."""

from __future__ import annotations

from typing import Any

from line_target import sum_of_squares  # bound here before any profiler exists

from harness.workload.model import TransformerModule

CALL_SIZE = 50


class CallingModule(TransformerModule):
    """TransformerModule whose every training step also calls sum_of_squares(CALL_SIZE)."""

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        sum_of_squares(CALL_SIZE)
        return super().training_step(batch, batch_idx)
