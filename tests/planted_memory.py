"""The built-in model holding a planted allocation through each training step: `mib_per_example`
MiB per example of the batch, every page written (so resident), freed at the step's end. Each
step also keeps 64 KiB until the next (as a module keeping a metric would): allocated after the
plant and alive when it is freed, it is what a heap splits the freed plant around.

With `cache_mib`, its first step at each batch shape also leaves that much in a cache kept for
the life of the process, as a library keeps what it builds on first use (oneDNN's primitives).

Plug in with `model._target_=planted_memory.PlantedMemory` (tests/ on PYTHONPATH).
"""

from __future__ import annotations

from typing import Any

import torch
from typing_extensions import override

from harness.workload.model import TransformerModule

_PROCESS_CACHE: dict[tuple[int, ...], torch.Tensor] = {}


class PlantedMemory(TransformerModule):
    def __init__(self, *args: Any, mib_per_example: float = 1.0, cache_mib: float = 0.0,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mib_per_example, self.cache_mib = mib_per_example, cache_mib
        self.held: torch.Tensor | None = None
        self.kept: torch.Tensor | None = None

    @override
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        floats = int(self.mib_per_example * 2**20) // 4
        self.held = torch.ones(batch[0].shape[0], floats)  # held through backward and step
        self.kept = torch.ones(2**14)
        if self.cache_mib and tuple(batch[0].shape) not in _PROCESS_CACHE:
            _PROCESS_CACHE[tuple(batch[0].shape)] = torch.ones(int(self.cache_mib * 2**20) // 4)
        return super().training_step(batch, batch_idx)

    @override
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.held = None
