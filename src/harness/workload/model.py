"""A stack of pre-norm transformer blocks in a LightningModule; the network lives in `self.net`,
the plain nn.Module that `compile=true` compiles."""

from __future__ import annotations

from typing import Annotated, Any

import lightning.pytorch as pl
import torch
from annotated_types import Ge, Le, MultipleOf
from torch import nn
from torch.nn import functional as F
from typing_extensions import override

from harness.config.checks import PositiveInt, PositiveNumber
from harness.instrument.annotate import annotate


class Attention(nn.Module):
    """Multi-head self-attention written out, so every op shows in profiles."""

    def __init__(self, dim: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, dim // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        weights = (q @ k.transpose(-2, -1)) * self.scale
        weights = self.dropout(weights.softmax(dim=-1))
        out = (weights @ v).transpose(1, 2).reshape(batch, tokens, dim)
        return self.proj(out)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads, dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(mlp_ratio * dim, dim))

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TransformerModule(pl.LightningModule):
    """Regresses random targets from random tokens: a fixed, repeatable amount of work."""

    def __init__(self, dim: PositiveInt = 128, depth: PositiveInt = 2, num_heads: PositiveInt = 4,
                 mlp_ratio: PositiveInt = 4, dropout: Annotated[float, Ge(0), Le(1)] = 0.0,
                 lr: PositiveNumber = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(*(Block(dim, num_heads, mlp_ratio, dropout) for _ in range(depth)))
        self.lr = lr

    @staticmethod
    def argument_rules(dim: int = 128, num_heads: int = 4, **_: Any) -> dict[str, tuple[Any, str]]:
        """What config.arguments checks across arguments: dim splits into num_heads heads."""
        near = num_heads * max(1, round(dim / num_heads))
        return {"dim": (Annotated[int, MultipleOf(num_heads)], f"{near} (a multiple of num_heads)")}

    @override
    @annotate("workload.forward")
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self(x), y)

    @override
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        with annotate("workload.backward"):
            super().backward(loss, *args, **kwargs)

    @override
    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any,
                       optimizer_closure: Any = None) -> None:
        # The closure (training_step and backward) runs first, leaving the update alone in its
        # range; the precision plugins (fp16's grad scaler) still see a finished backward.
        loss = optimizer_closure() if optimizer_closure is not None else None
        with annotate("workload.optimizer_step"):
            optimizer.step(closure=lambda: loss)

    @override
    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    @override
    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))

    @override
    def predict_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self(batch[0])

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.lr)
