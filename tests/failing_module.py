"""A LightningModule that fails on purpose at one batch size, to test failures in sweeps.

Plug it in with `model._target_=failing_module.FailAtBatchSize +model.fail_at=2`
(the test fixture puts tests/ on PYTHONPATH). `+model.error=oom` raises
torch's OutOfMemoryError instead of a plain RuntimeError; `+model.fail_in=predict` fails
in predict_step instead of training_step. `+model.error=disk_full` fills the disk instead:
from that step on no file of the process can grow (RLIMIT_FSIZE 0: every write fails with
EFBIG, as on a full disk), and the run goes on. `+model.error=nan_loss` makes the training loss
NaN at that batch size instead of failing.
"""

from __future__ import annotations

import resource
from typing import Any

import torch

from harness.workload.model import TransformerModule


class FailAtBatchSize(TransformerModule):
    def __init__(self, *args: Any, fail_at: int = 0, error: str = "runtime", fail_in: str = "train",
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail_at = fail_at
        self.error = error
        self.fail_in = fail_in

    def _maybe_fail(self, phase: str, batch: Any) -> None:
        size = batch[0].shape[0]
        if phase == self.fail_in and size == self.fail_at:
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
        if self.error == "nan_loss" and batch[0].shape[0] == self.fail_at:
            return loss * float("nan")
        return loss

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        self._maybe_fail("predict", batch)
        return super().predict_step(batch, batch_idx)
