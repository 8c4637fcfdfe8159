"""A planted memory peak: in its second training step the module holds a buffer of
`mib_per_example` MiB per example of the batch, written through (resident), then frees it.

Plug it in with `model._target_=memory_module.HoldsMemory +model.mib_per_example=16`
(tests/ is on PYTHONPATH for runs started by conftest.run_harness). A buffer this large is
mapped for it alone and given back to the system when freed, so the process's resident
size falls back after the step: only a peak that was not reset carries it into the next job.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.workload.model import TransformerModule

HELD_STEP = 1


class HoldsMemory(TransformerModule):
    def __init__(self, *args: Any, mib_per_example: float = 0.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mib_per_example = mib_per_example

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        if batch_idx == HELD_STEP:
            mib = batch[0].shape[0] * self.mib_per_example
            held = torch.ones(int(mib * 2**20) // 4)  # float32: 4 bytes each, every page written
            loss = loss + held[-1] * 0
            del held
        return loss
