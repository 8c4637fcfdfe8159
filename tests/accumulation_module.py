"""Planted modules for global_batch_size (tests/test_global_batch.py): one whose optimizer step
costs a known sleep, one that steps its optimizer itself (manual optimization)."""

from __future__ import annotations

import time
from typing import Any

import torch
from typing_extensions import override

from harness.workload.model import TransformerModule


class SlowOptimizerStep(TransformerModule):
    """The built-in workload, each optimizer step `step_sleep_s` longer: a cost only the batch
    that ends an accumulated step carries."""

    def __init__(self, step_sleep_s: float = 0.1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step_sleep_s = step_sleep_s

    @override
    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any,
                       optimizer_closure: Any = None) -> None:
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        time.sleep(self.step_sleep_s)


class ManualOptimization(TransformerModule):
    """Steps its optimizer in training_step: Lightning's accumulation never applies to it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.automatic_optimization = False

    @override
    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        optimizer = self.optimizers()
        loss = self._loss(batch)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss
