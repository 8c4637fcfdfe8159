"""A user's own LightningModule and DataModule, plugged into harness through `_target_`.

Deliberately unlike the built-in workload: an MLP on (features, label) pairs from
a map-style Dataset, no predict_step and no predict_dataloader, so inference
falls back to forward() on the validation data.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class TinyClassifier(pl.LightningModule):
    def __init__(self, features: int = 16, hidden: int = 32, classes: int = 3) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return self.net(batch[0])

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class TinyData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 8, examples: int = 96, features: int = 16) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.examples = examples
        self.features = features

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(self.examples, self.features, generator=generator)
        y = torch.randint(0, 3, (self.examples,), generator=generator)
        self.dataset = TensorDataset(x, y)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=self.batch_size)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=self.batch_size)


class NotAModule:
    """Importable, but not a LightningModule."""


class PlainForwardClassifier(TinyClassifier):
    """Like most modules: forward(x) takes a tensor and there is no predict_step, so
    Lightning's default predict_step (forward of the whole batch) fails in inference."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TrainOnlyData(pl.LightningDataModule):
    """Training batches only: nothing to run inference on."""

    def __init__(self, batch_size: int = 8, examples: int = 96, features: int = 16) -> None:
        super().__init__()
        self.inner = TinyData(batch_size, examples, features)

    def setup(self, stage: str) -> None:
        self.inner.setup(stage)

    def train_dataloader(self) -> DataLoader:
        return self.inner.train_dataloader()
