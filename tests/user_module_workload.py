"""A user's own LightningModule as issue 34 found them: no `net` attribute, its layers under
`self.layers`, each a block the user wrote that holds parameters alone and does its matmuls in
forward (`blocks=true`), or torch's Linear layers only (`blocks=false`: no block to wrap). Each
block counts its forward calls; at the end of the fit the module writes the calls per block per
training step to `block_forwards.json` in the working directory (the test's): 1 without
checkpointing, 2 with it (backward runs the forward again).

Use: NO_NET below (this module on tests/autotune_recipe_workload.py's data, the built-in model's
and data's other keys deleted); USER: that, a short training run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F

DIM = 8  # RecipeData's features
FORWARDS_FILE = "block_forwards.json"
NO_NET = ("model._target_=user_module_workload.NoNetModule", "~model.dim", "~model.depth",
          "~model.num_heads", "~model.mlp_ratio", "~model.dropout", "~model.lr",
          "data._target_=autotune_recipe_workload.RecipeData", "~data.seq_len", "~data.dim",
          "~data.val_batches", "~data.generate_on", "~data.pin_memory", "~data.num_workers")
USER = (*NO_NET, "data.train_batches=6", "profiler=[speed]", "profiler.speed.warmup_steps=1",
        "mode=train")  # a short training run


class ParamBlock(nn.Module):
    """Parameters alone, no child module: a block all the same (a class the user wrote)."""

    def __init__(self, dim: int = DIM) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.eye(dim) + 0.01 * torch.randn(dim, dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.tanh(x @ self.weight + self.bias)


class NoNetModule(pl.LightningModule):
    def __init__(self, blocks: bool = True, depth: int = 4, lr: float = 0.01) -> None:
        super().__init__()
        self.lr = lr
        self.layers = (nn.ModuleList(ParamBlock() for _ in range(depth)) if blocks
                       else nn.Sequential(*(nn.Linear(DIM, DIM) for _ in range(depth))))
        self.head = nn.Linear(DIM, 1)
        self.steps = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)  # as most modules do: TorchDynamo must not trace it
        return loss

    def on_train_batch_end(self, *args: Any) -> None:  # not in training_step: compile=true traces it
        self.steps += 1

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])

    def on_train_end(self) -> None:
        calls = [getattr(m, "calls", None) for m in self.modules() if isinstance(m, ParamBlock)]
        per_step = [c / self.steps for c in calls if c is not None] if self.steps else []
        Path(FORWARDS_FILE).write_text(json.dumps(per_step))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)
