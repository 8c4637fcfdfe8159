"""Synthetic token batches: `generate_on=device` draws each batch with one torch call on the
run's device (a nearly free input pipeline); `generate_on=cpu` builds every example with numpy
on the CPU, the common trap where the DataLoader, not the model, sets the pace."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from typing_extensions import override

from harness.config.checks import NonNegativeInt, PositiveInt
from harness.instrument.annotate import annotate


class DeviceBatches:
    """An iterable of (inputs, targets) batches drawn on `device`, the same each epoch."""

    def __init__(self, batches: int, batch_size: int, seq_len: int, dim: int, device: torch.device,
                 seed: int) -> None:
        self.batches = batches
        self.shape = (batch_size, seq_len, dim)
        self.device = device
        self.seed = seed

    def __len__(self) -> int:
        return self.batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        generator = torch.Generator(device=self.device).manual_seed(self.seed)
        for _ in range(self.batches):
            with annotate("workload.make_batch"):
                x = torch.randn(self.shape, device=self.device, generator=generator)
                y = torch.randn(self.shape, device=self.device, generator=generator)
            yield x, y


class NumpyExamples(Dataset):
    """One example per index, drawn with numpy on the CPU (deliberately slow)."""

    def __init__(self, length: int, seq_len: int, dim: int, seed: int) -> None:
        self.length = length
        self.shape = (seq_len, dim)
        self.seed = seed

    def __len__(self) -> int:
        return self.length

    @annotate("workload.make_example")
    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng(self.seed + index)
        x, y = (rng.normal(loc=0.0, scale=1.0, size=self.shape).astype(np.float32) for _ in range(2))
        return torch.from_numpy(x), torch.from_numpy(y)


class SyntheticDataModule(pl.LightningDataModule):
    """Random (inputs, targets) token batches of shape (batch_size, seq_len, dim)."""

    def __init__(self, batch_size: PositiveInt = 32, seq_len: PositiveInt = 64, dim: PositiveInt = 128,
                 train_batches: PositiveInt = 64, val_batches: PositiveInt = 16,
                 predict_batches: PositiveInt = 32, generate_on: Literal["device", "cpu"] = "device",
                 num_workers: NonNegativeInt = 0, pin_memory: bool = False) -> None:
        super().__init__()
        self.batch_size, self.seq_len, self.dim = batch_size, seq_len, dim
        self.counts = {"train": train_batches, "val": val_batches, "predict": predict_batches}
        self.generate_on = generate_on
        self.num_workers, self.pin_memory = num_workers, pin_memory

    def _loader(self, split: str, seed: int) -> DeviceBatches | DataLoader:
        batches = self.counts[split]
        if self.generate_on == "device":
            device = self.trainer.strategy.root_device if self.trainer else torch.device("cpu")
            return DeviceBatches(batches, self.batch_size, self.seq_len, self.dim, device, seed)
        dataset = NumpyExamples(batches * self.batch_size, self.seq_len, self.dim, seed)
        return DataLoader(dataset, batch_size=self.batch_size, num_workers=self.num_workers,
                          pin_memory=self.pin_memory)

    @override
    def train_dataloader(self) -> DeviceBatches | DataLoader:
        return self._loader("train", seed=1)

    @override
    def val_dataloader(self) -> DeviceBatches | DataLoader:
        return self._loader("val", seed=2)

    @override
    def predict_dataloader(self) -> DeviceBatches | DataLoader:
        return self._loader("predict", seed=3)
