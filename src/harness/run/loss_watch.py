"""A training loss that is NaN or infinite never passes silently.

The run keeps its status (its timings are still what they are), but result.json gets the
flag `nonfinite_loss`, the run warns once, and the sweep table marks the training figures
`NaN loss`: a speed measured on a model that has stopped learning is worth knowing about.

The check stays cheap: each step only adds its loss to an on-device float32 sum (one
asynchronous kernel, no synchronisation with the device), in which a NaN or infinity
stays; the sum is read once, after the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

NONFINITE_LOSS = "nonfinite_loss"  # the result.json flag


class LossWatch(Callback):
    """Whether any training step's loss was NaN or infinite."""

    def __init__(self) -> None:
        # The sum of every loss, on the loss's device, never synchronised: one add per step,
        # and a NaN or infinity in any term stays in it.
        self._total: torch.Tensor | None = None

    @override
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if not isinstance(loss, torch.Tensor):
            return  # manual optimisation returning nothing: no loss to watch
        loss = loss.detach().sum()
        self._total = loss.float() if self._total is None else self._total + loss

    def saw_nonfinite(self) -> bool:
        """Read after the run: True when some step's loss was NaN or infinite."""
        return self._total is not None and not bool(torch.isfinite(self._total))
