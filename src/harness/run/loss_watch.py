"""A training loss that is NaN or infinite flags the run `nonfinite_loss` (its status stands);
the losses' on-device sum is never synchronised, read once after the run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

NONFINITE_LOSS = "nonfinite_loss"  # the result.json flag


class LossWatch(Callback):
    def __init__(self) -> None:
        self._total: torch.Tensor | None = None  # a NaN or infinity in any term stays in it

    @override
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if not isinstance(loss, torch.Tensor):
            return  # manual optimisation returning nothing: no loss to watch
        loss = loss.detach().sum()
        self._total = loss.float() if self._total is None else self._total + loss

    def saw_nonfinite(self) -> bool:
        return self._total is not None and not bool(torch.isfinite(self._total))
