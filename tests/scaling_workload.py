"""A DDP workload with its costs planted in code, for the scaling study's tests (issue 35).

Each example's forward sleeps `example_s`; the module registers its own DDP communication hook
(a user's, as PowerSGD users do) that sleeps `comm_s` per optimizer step before DDP's allreduce;
rank `late_rank` sleeps `late_s` more in its forward, or inside its backward (a late backward
hides inside the allreduce: every rank's backward wall time comes out equal). Sleeps cost
wall time, not CPU: 4 ranks on 2 cores keep their planted times. A lost rank: rank `kill_rank`
sends itself `kill_with` in its forward at batch `kill_at_step` (SIGKILL: as an OOM killer
would; SIGSTOP: a hung rank), its peers then blocked in the next collective. `width` widens
the model: its gradients, 10 x width + 1 floats (width=209715: 8 MiB), are what the allreduce
carries.
"""

from __future__ import annotations

import logging
import os
import signal
import time

import lightning.pytorch as pl
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn import functional as F

log = logging.getLogger(__name__)


class _LateBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, late_s):  # noqa: ANN001, ANN205 - torch's signature
        ctx.late_s = late_s
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        time.sleep(ctx.late_s)
        return grad, None


class PlantedScaling(pl.LightningModule):
    def __init__(self, example_s: float = 0.0125, comm_s: float = 0.05, late_rank: int = -1,
                 late_s: float = 0.0, late_in: str = "forward", kill_rank: int = -1,
                 kill_at_step: int = -1, kill_with: str = "SIGKILL", width: int = 8) -> None:
        super().__init__()
        self.example_s, self.comm_s = example_s, comm_s
        self.late_rank, self.late_s, self.late_in = late_rank, late_s, late_in
        self.kill_rank, self.kill_at_step, self.kill_with = kill_rank, kill_at_step, kill_with
        self.first = torch.nn.Linear(8, width)
        self.second = torch.nn.Linear(width, 1)

    def on_fit_start(self) -> None:
        if self.trainer.world_size > 1:
            comm_s = self.comm_s

            def sleeping_hook(state: object, bucket: torch.distributed.GradBucket
                              ) -> torch.futures.Future[torch.Tensor]:
                time.sleep(comm_s)  # per bucket: one at the default width (81 floats)
                return default_hooks.allreduce_hook(state, bucket)

            self.trainer.strategy.model.register_comm_hook(None, sleeping_hook)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        if self.global_rank == self.kill_rank and batch_idx == self.kill_at_step:
            log.warning("rank %d sends itself %s in batch %d", self.global_rank, self.kill_with,
                        batch_idx)  # when, in its log
            os.kill(os.getpid(), signal.Signals[self.kill_with])
        late = self.global_rank == self.late_rank
        time.sleep(self.example_s * len(x) + (self.late_s if late and self.late_in == "forward"
                                              else 0.0))
        hidden = self.first(x)
        if late and self.late_in == "backward":
            hidden = _LateBackward.apply(hidden, self.late_s)
        return F.mse_loss(self.second(hidden), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class PlantedBatches(pl.LightningDataModule):
    def __init__(self, batch_size: int = 8, batches: int = 16) -> None:
        super().__init__()
        self.batch_size, self.batches = batch_size, batches

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        # every rank reads its own `batches` (no sampler split: the per-rank work is planted)
        data = torch.utils.data.TensorDataset(torch.randn(self.batch_size * self.batches, 8),
                                              torch.randn(self.batch_size * self.batches, 1))
        return torch.utils.data.DataLoader(data, batch_size=self.batch_size)
