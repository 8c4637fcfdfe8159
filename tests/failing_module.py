"""A LightningModule that fails on purpose at one batch size, to test failures in sweeps.

Plug it in with `model._target_=failing_module.FailAtBatchSize +model.fail_at=2`
(the test fixture puts tests/ on PYTHONPATH). `+model.error=oom` raises
torch's OutOfMemoryError instead of a plain RuntimeError.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.workload.model import TransformerModule


class FailAtBatchSize(TransformerModule):
    def __init__(self, *args: Any, fail_at: int = 0, error: str = "runtime", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail_at = fail_at
        self.error = error

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        size = batch[0].shape[0]
        if size == self.fail_at:
            if self.error == "oom":
                raise torch.OutOfMemoryError(f"CUDA out of memory (fake, batch size {size})")
            raise RuntimeError(f"deliberate failure at batch size {size}")
        return super().training_step(batch, batch_idx)
