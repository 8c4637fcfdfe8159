"""A workload with planted costs, to check the diagnose preset against a known truth.

Each batch fetch sleeps `fetch_s` (in the loader's process: the main one, or with
`num_workers` each worker, so the pipeline delivers a batch per fetch_s / num_workers at
steady state), each training step sleeps
`step_s` (inside training_step, so the model-alone pass sees it too), and the optional
callback sleeps `callback_s` after each training step (Lightning's loop, not the model).
Plug in with `model._target_=planted.PlantedModule data._target_=planted.PlantedData`
(tests/ is on PYTHONPATH for runs started by conftest.run_harness).
"""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


class SleepyBatches(Dataset):
    """Whole batches, each taking `fetch_s` to make."""

    def __init__(self, batches: int, batch_size: int, fetch_s: float) -> None:
        self.batches, self.batch_size, self.fetch_s = batches, batch_size, fetch_s

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.fetch_s)
        return torch.randn(self.batch_size, 8), torch.randn(self.batch_size, 1)


class PlantedData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 4, batches: int = 24, fetch_s: float = 0.0,
                 num_workers: int = 0) -> None:
        super().__init__()
        self.batch_size, self.batches, self.fetch_s = batch_size, batches, fetch_s
        self.num_workers = num_workers

    def _loader(self) -> DataLoader:
        return DataLoader(SleepyBatches(self.batches, self.batch_size, self.fetch_s),
                          batch_size=None, num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader()

    def predict_dataloader(self) -> DataLoader:
        return self._loader()


class PlantedModule(pl.LightningModule):
    def __init__(self, step_s: float = 0.0) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        self.step_s = step_s

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(self.step_s)
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class SlowCallback(Callback):
    """A user's callback that takes `callback_s` after every training step."""

    def __init__(self, callback_s: float = 0.03) -> None:
        self.callback_s = callback_s

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        time.sleep(self.callback_s)


class MatmulModule(pl.LightningModule):
    """Compute only: each training step chains `chain` n x n matmuls (forward + backward), for
    the MFU check on a GPU (`precision=bf16-true`: the matmuls run in bf16)."""

    def __init__(self, n: int = 8192, chain: int = 4) -> None:
        super().__init__()
        self.weights = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(n, n) / n**0.5) for _ in range(chain))
        self.n = n

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x = batch[0]
        for weight in self.weights:
            x = x @ weight
        return x.float().pow(2).mean()

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return batch[0] @ self.weights[0]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-6)


class SquareBatches(PlantedData):
    """Batches of `batch_size` x n features on the device, for MatmulModule."""

    def __init__(self, batch_size: int = 8192, batches: int = 30, n: int = 8192) -> None:
        super().__init__(batch_size, batches)
        self.n = n

    def _loader(self) -> Any:
        device = self.trainer.strategy.root_device
        x = torch.randn(self.batch_size, self.n, device=device)
        return [(x,)] * self.batches


class _SecondPassFails(DataLoader):
    """A loader whose second iteration raises (on `rank`, or every rank when None): the run
    iterates it once, the diagnose preset's loader pass a second time (#23)."""

    def __init__(self, *args: Any, rank: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.iterations, self.fail_rank = 0, rank

    def __iter__(self) -> Any:
        import os

        self.iterations += 1
        mine = int(os.environ.get("LOCAL_RANK", "0"))
        if self.iterations > 1 and self.fail_rank in (None, mine):
            raise RuntimeError("planted: the loader fails when iterated again")
        return super().__iter__()


class PassBreakingData(PlantedData):
    """PlantedData whose training loader fails in the diagnose preset's loader pass."""

    def __init__(self, *args: Any, break_rank: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.break_rank = break_rank

    def train_dataloader(self) -> DataLoader:
        return _SecondPassFails(SleepyBatches(self.batches, self.batch_size, self.fetch_s),
                                batch_size=None, num_workers=self.num_workers,
                                rank=self.break_rank)
