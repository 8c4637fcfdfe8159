"""A LightningModule that fails on purpose at one batch size, to test failures in sweeps.

Plug it in with `model._target_=failing_module.FailAtBatchSize +model.fail_at=2`
(the test fixture puts tests/ on PYTHONPATH). `+model.error=oom` raises
torch's OutOfMemoryError instead of a plain RuntimeError; `+model.fail_in=predict` fails
in predict_step instead of training_step. `+model.error=disk_full` fills the disk instead:
from that step on no file of the process can grow (RLIMIT_FSIZE 0: every write fails with
EFBIG, as on a full disk), and the run goes on. `+model.error=nan_loss` makes the training loss
NaN at that batch size instead of failing.

Under DDP, `+model.fail_ranks={8:[0,1],6:[1]}` says which global ranks fail at which batch
size (in place of fail_at; the other ranks wait in the next collective), and
`+model.build_fail_ranks={5:[1]} +model.batch_size=${batch_size}` makes those ranks fail
building the module, before the process group forms (rank 0 waits in its rendezvous).
"""

from __future__ import annotations

import os
import resource
from typing import Any

import torch

from harness.workload.model import TransformerModule


class FailAtBatchSize(TransformerModule):
    def __init__(self, *args: Any, fail_at: int = 0, error: str = "runtime", fail_in: str = "train",
                 fail_ranks: dict[int, list[int]] | None = None,
                 build_fail_ranks: dict[int, list[int]] | None = None,
                 batch_size: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        rank = int(os.environ.get("LOCAL_RANK", "0"))  # one node: set for a rank > 0 as it starts
        if build_fail_ranks and rank in build_fail_ranks.get(batch_size, ()):
            raise RuntimeError(f"deliberate failure building at batch size {batch_size}")
        self.fail_at = fail_at
        self.error = error
        self.fail_in = fail_in
        self.fail_ranks = fail_ranks

    def _fails_at(self, size: int) -> bool:
        if self.fail_ranks is not None:
            return self.global_rank in self.fail_ranks.get(size, ())
        return size == self.fail_at

    def _maybe_fail(self, phase: str, batch: Any) -> None:
        size = batch[0].shape[0]
        if phase == self.fail_in and self._fails_at(size):
            if self.error == "nan_loss":
                return  # training_step makes the loss NaN
            if self.error == "disk_full":
                resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(
                    resource.RLIMIT_FSIZE)[1]))
                return
            if self.error == "oom":
                raise torch.OutOfMemoryError(f"CUDA out of memory (fake, batch size {size})")
            raise RuntimeError(f"deliberate failure at batch size {size}")

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self._maybe_fail("train", batch)
        loss = super().training_step(batch, batch_idx)
        if self.error == "nan_loss" and self._fails_at(batch[0].shape[0]):
            return loss * float("nan")
        return loss

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        self._maybe_fail("predict", batch)
        return super().predict_step(batch, batch_idx)
