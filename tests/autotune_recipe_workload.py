"""The planted recipe of tests/autotune_landscape.py (RecipeLandscape) as a real workload: the
knobs are real (global_batch_size sets Lightning's accumulation, activation_checkpointing wraps
the two blocks of `net`, Lightning runs the precision, TorchDynamo compiles `net`); only their
*effect* is planted, as sleeps and as torch.OutOfMemoryError at the first step where the planted
peak memory passes the planted device's. Times are the landscape's x `scale` (a quicker test);
compile costs `compile_s` in the first step (over the test's 300 planned steps: 14 % slower).

Use (tests/test_autotune.py, RECIPE): `model._target_=autotune_recipe_workload.RecipeModule
data._target_=autotune_recipe_workload.RecipeData`, the built-in model's and data's other keys
deleted.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import lightning.pytorch as pl
import torch
from autotune_landscape import R_A, R_C16, R_C32, R_CKPT, R_DEVICE_GIB, R_OPT, recipe_peak_gib
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

WRAPPER = "CheckpointWrapper"  # torch's checkpoint wrapper, as harness applies it
_COMPILED: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()  # networks that paid compile_s


class Shape(torch.nn.Module):
    """A view-only graph: a compiled graph for the knob check, at the least compile time."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1)


class Block(torch.nn.Module):
    """A block that holds a module and runs it: what activation_checkpointing=true wraps."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Shape()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


class Batches(Dataset):
    """Whole batches of `batch_size` examples, made at no cost."""

    def __init__(self, batches: int, batch_size: int) -> None:
        self.batches, self.batch_size = batches, batch_size

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(self.batch_size, 8), torch.randn(self.batch_size, 1)


class RecipeData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 16, train_batches: int = 64,
                 predict_batches: int = 32) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.train_batches, self.predict_batches = train_batches, predict_batches

    def train_dataloader(self) -> DataLoader:
        return DataLoader(Batches(self.train_batches, self.batch_size), batch_size=None)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(Batches(self.predict_batches, self.batch_size), batch_size=None)


class RecipeModule(pl.LightningModule):
    def __init__(self, device_gib: float = R_DEVICE_GIB, scale: float = 0.25,
                 compile_s: float = 2.0) -> None:
        super().__init__()
        self.device_gib, self.scale, self.compile_s = device_gib, scale, compile_s
        self.net = torch.nn.Sequential(Block(), Block())  # the repeated blocks
        self.weight = torch.nn.Parameter(torch.zeros(8))  # elementwise: bf16 costs nothing

    def _micro_batch_ms(self, batch_size: int) -> float:
        """One micro-batch's planted time; out of memory where the planted peak passes."""
        precision = str(self.trainer.precision)
        checkpointed = any(type(m).__name__ == WRAPPER for m in self.net.modules())
        peak = recipe_peak_gib(batch_size, precision, checkpointed)
        if peak > self.device_gib:
            raise torch.OutOfMemoryError(
                f"planted: {peak:.1f} GiB at a micro-batch of {batch_size} (precision"
                f" {precision}, checkpointing {'on' if checkpointed else 'off'}) of"
                f" {self.device_gib:g} GiB")
        c = R_C16 if "bf16" in precision else R_C32
        return (R_A + c * batch_size) * (R_CKPT if checkpointed else 1.0) * self.scale

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        time.sleep(self._micro_batch_ms(x.shape[0]) / 1000)
        if type(self.net).__name__ == "OptimizedModule" and self.net not in _COMPILED:
            # compile buys nothing and costs its compile time once, as TorchDynamo's cache
            # does: the first step's excess (a step run before it, as the speed preset's
            # warm pass, pays it instead), which autotune charges over autotune.planned_steps.
            # Kept outside the module: the passes that run a step put its attributes back.
            _COMPILED.add(self.net)
            time.sleep(self.compile_s)
        return F.mse_loss((self.net(x) * self.weight).sum(1, keepdim=True), y)

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(R_OPT * self.scale / 1000)  # once per optimizer step, whatever the micro-batch
        super().optimizer_step(*args, **kwargs)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(self._micro_batch_ms(batch[0].shape[0]) / 3000)
        return (self.net(batch[0]) * self.weight).sum(1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)
