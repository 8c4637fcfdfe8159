"""The planted landscape of tests/autotune_landscape.py as a real workload: the costs are
sleeps, the knobs are real (Lightning runs the precision, TorchDynamo compiles `net`,
DataLoader workers fetch the batches); only their *effect* is planted. A batch above
autotune_landscape.MAX_FIT raises torch.OutOfMemoryError at the first step (harness records
the job as `oom`).

Use (tests/test_autotune.py, LANDSCAPE): `model._target_=autotune_workload.LandscapeModule
data._target_=autotune_workload.LandscapeData`, the built-in model's and data's other keys
deleted.
"""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
import torch
from autotune_landscape import MAX_FIT, fetch_ms, step_ms
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


class Shape(torch.nn.Module):
    """What `compile` compiles: a view-only graph, so TorchInductor emits no C++ kernel
    (a compiled graph for the knob check, at the least compile time)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1)


class SleepyBatches(Dataset):
    """Whole batches of `batch_size` examples, each taking fetch_ms to make."""

    def __init__(self, batches: int, batch_size: int) -> None:
        self.batches, self.batch_size = batches, batch_size

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(fetch_ms(self.batch_size) / 1000)
        return torch.randn(self.batch_size, 8), torch.randn(self.batch_size, 1)


class LandscapeData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32, train_batches: int = 64,
                 predict_batches: int = 32, num_workers: int = 0) -> None:
        super().__init__()
        self.batch_size, self.num_workers = batch_size, num_workers
        self.train_batches, self.predict_batches = train_batches, predict_batches

    def _loader(self, batches: int) -> DataLoader:
        return DataLoader(SleepyBatches(batches, self.batch_size), batch_size=None,
                          num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_batches)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.predict_batches)


class LandscapeModule(pl.LightningModule):
    def __init__(self, max_fit: int = MAX_FIT) -> None:
        super().__init__()
        self.max_fit = max_fit  # larger batches run out of memory
        self.net = Shape()
        # elementwise only: bf16 autocast costs nothing here, so bf16 costs what the
        # landscape says (a bf16 Linear took 36 ms a step on a 2-core CPU: real, unplanted)
        self.weight = torch.nn.Parameter(torch.zeros(8))

    def _step_ms(self, batch_size: int) -> float:
        if batch_size > self.max_fit:
            raise torch.OutOfMemoryError(
                f"planted: a batch of {batch_size} does not fit (largest: {self.max_fit})")
        workers = getattr(self.trainer.datamodule, "num_workers", 0) or 0
        return step_ms(batch_size, str(self.trainer.precision), workers)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        time.sleep(self._step_ms(x.shape[0]) / 1000)
        return F.mse_loss((self.net(x) * self.weight).sum(1, keepdim=True), y)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(self._step_ms(batch[0].shape[0]) / 3000)
        return (self.net(batch[0]) * self.weight).sum(1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)
