"""LightningModules that own their dataloaders (no DataModule), like Lightning's demos, and a
user's own callback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.demos.boring_classes import RandomDataset
from torch.utils.data import DataLoader
from typing_extensions import override


class TrainOnly(pl.LightningModule):
    """Only a train_dataloader, like Lightning's demo Transformer: nothing to infer on."""

    def __init__(self, train_examples: int = 24, val_examples: int = 16, batch_size: int = 4) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)
        self.sizes = (train_examples, val_examples)
        self.batch_size = batch_size

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    @override
    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self(batch).sum()

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    @override
    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, self.sizes[0]), batch_size=self.batch_size)


class TrainValOnly(TrainOnly):
    """train_dataloader and val_dataloader, no predict_dataloader, no predict_step:
    inference runs Lightning's default predict_step on the validation loader."""

    @override
    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("val_sum", self(batch).sum())

    @override
    def val_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, self.sizes[1]), batch_size=self.batch_size)


class BatchCounter(Callback):
    """A user's own callback: writes how many training batches it saw into `path`."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.batches = 0

    @override
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.batches += 1

    @override
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.path.write_text(str(self.batches))


class NeedsAMask(TrainValOnly):
    """forward wants a mask no batch carries (the steps call the layer directly), so the
    summary cannot run forward on the data: its report fails, the run does not."""

    @override
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.layer(x) * mask

    @override
    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.layer(batch).sum()

    @override
    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("val_sum", self.layer(batch).sum())
