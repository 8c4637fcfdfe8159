"""A training loss that is NaN or infinite never passes silently.

The run keeps its status (its timings are still what they are), but result.json gets the
flag `nonfinite_loss`, the run warns once, and the sweep table marks the training figures
`NaN loss`: a speed measured on a model that has stopped learning is worth knowing about.

The check stays out of the timed steps: each step only adds an on-device `isfinite` to a
running flag (an asynchronous kernel, no synchronisation with the device); the flag is
read once, after the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

FLAG = "nonfinite_loss"


class LossWatch(Callback):
    """Whether any training step's loss was NaN or infinite."""

    def __init__(self) -> None:
        self._finite: torch.Tensor | None = None  # on the loss's device, never synchronised

    @override
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if not isinstance(loss, torch.Tensor):
            return  # manual optimisation returning nothing: no loss to watch
        finite = torch.isfinite(loss.detach()).all()
        self._finite = finite if self._finite is None else self._finite & finite

    def saw_nonfinite(self) -> bool:
        """Read after the run: True when some step's loss was NaN or infinite."""
        return self._finite is not None and not bool(self._finite)
