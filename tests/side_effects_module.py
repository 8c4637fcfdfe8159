"""The built-in model with the side effects outside code has in its step (found on
lightning-hydra-template's and Hugging Face-style modules): it changes its batch in place,
counts examples in a non-persistent buffer, grows a persistent one by a row each step (a new
shape: the state_dict put back would not fit it), draws noise from a Generator it keeps, and
appends its draws to a list. At the end of training it writes what it saw to `record` (JSON), for a
test to hold against what the run's own steps alone would leave.

Plug in with `model._target_=side_effects_module.SideEffects +model.record=PATH`.
"""

from __future__ import annotations

import json
from typing import Any

import torch
from typing_extensions import override

from harness.workload.model import TransformerModule

MARK = 1000.0  # what a step adds to its batch: a batch seen twice holds values past MARK / 2


class SideEffects(TransformerModule):
    def __init__(self, *args: Any, record: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.record = record
        self.register_buffer("examples", torch.zeros((), dtype=torch.long), persistent=False)
        self.register_buffer("steps", torch.zeros(0))
        self.noise = torch.Generator().manual_seed(0)
        self.losses: list[float] = []
        self.batches_seen_twice = 0

    @override
    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> Any:
        x, y = batch
        self.batches_seen_twice += bool(x.max() > MARK / 2)
        x.add_(MARK)
        loss = super().training_step((x - MARK, y), batch_idx)
        self.examples += x.shape[0]
        self.steps = torch.cat([self.steps, torch.ones(1)])
        self.losses.append(torch.rand((), generator=self.noise).item())
        return loss

    @override
    def on_train_end(self) -> None:
        with open(self.record, "w") as out:
            json.dump({"examples": int(self.examples), "steps": len(self.steps), "draws": self.losses,
                       "batches_seen_twice": self.batches_seen_twice}, out)
