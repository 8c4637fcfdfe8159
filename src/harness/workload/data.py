"""Synthetic token batches: `generate_on=device` draws each batch with one torch call on the
run's device (a nearly free input pipeline); `generate_on=cpu` builds every example with numpy
on the CPU, the common trap where the DataLoader, not the model, sets the pace."""

from __future__ import annotations

from collections.abc import Iterator

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from typing_extensions import override

from harness.config.checks import positive_int
from harness.errors import ConfigError
from harness.instrument.annotate import annotate

GENERATE_ON = ("device", "cpu")


class DeviceBatches:
    """An iterable of (inputs, targets) batches drawn on `device`, the same each epoch."""

    def __init__(
        self, batches: int, batch_size: int, seq_len: int, dim: int, device: torch.device, seed: int
    ) -> None:
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
        x = rng.normal(loc=0.0, scale=1.0, size=self.shape).astype(np.float32)
        y = rng.normal(loc=0.0, scale=1.0, size=self.shape).astype(np.float32)
        return torch.from_numpy(x), torch.from_numpy(y)


class SyntheticDataModule(pl.LightningDataModule):
    """Random (inputs, targets) token batches of shape (batch_size, seq_len, dim)."""

    def __init__(
        self,
        batch_size: int = 32,
        seq_len: int = 64,
        dim: int = 128,
        train_batches: int = 64,
        val_batches: int = 16,
        predict_batches: int = 32,
        generate_on: str = "device",
        num_workers: int = 0,
        pin_memory: bool = False,
    ) -> None:
        super().__init__()
        if generate_on not in GENERATE_ON:
            raise ConfigError("data.generate_on", generate_on, "device or cpu", "data.generate_on=device")
        for key, value in (
            ("train_batches", train_batches),
            ("val_batches", val_batches),
            ("predict_batches", predict_batches),
            ("seq_len", seq_len),
            ("dim", dim),
        ):
            positive_int(f"data.{key}", value)
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.dim = dim
        self.counts = {"train": train_batches, "val": val_batches, "predict": predict_batches}
        self.generate_on = generate_on
        self.num_workers = num_workers
        self.pin_memory = pin_memory

    def _loader(self, split: str, seed: int) -> DeviceBatches | DataLoader:
        batches = self.counts[split]
        if self.generate_on == "device":
            device = self.trainer.strategy.root_device if self.trainer else torch.device("cpu")
            return DeviceBatches(batches, self.batch_size, self.seq_len, self.dim, device, seed)
        dataset = NumpyExamples(batches * self.batch_size, self.seq_len, self.dim, seed)
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
        )

    @override
    def train_dataloader(self) -> DeviceBatches | DataLoader:
        return self._loader("train", seed=1)

    @override
    def val_dataloader(self) -> DeviceBatches | DataLoader:
        return self._loader("val", seed=2)

    @override
    def predict_dataloader(self) -> DeviceBatches | DataLoader:
        return self._loader("predict", seed=3)
