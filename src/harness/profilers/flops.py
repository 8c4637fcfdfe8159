"""FLOPs of a real step or forward pass by Lightning's `measure_flops`, and which to trust beside
torchinfo's mult-adds (docs/presets/summary.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from lightning.fabric.utilities.throughput import measure_flops

from harness.errors import first_line

CONVENTION = ("2 FLOPs per multiply-add; matmuls and convolutions only"
              " (torch.utils.flop_counter.FlopCounterMode); forward + backward for training")
# Within this band torchinfo's 2 x mult-adds and the counted FLOPs are the same figure.
AGREE = (0.8, 1.25)


def count_flops(module: torch.nn.Module, forward: Callable[[], Any],
                loss: Callable[[Any], torch.Tensor] | None = None) -> tuple[int | None, str | None]:
    """(FLOPs of `forward` and of `loss(output).backward()` if given, why not counted)."""
    try:
        total = int(measure_flops(module, forward, loss))
    except Exception as err:  # custom kernels, ops without a FLOP formula that raise
        return None, f"FLOPs not counted: {first_line(err)}"
    if total == 0:
        return None, "FLOPs not counted: torch saw no matmul or convolution in the step"
    return total, None


def which_to_trust(mult_adds: int, flops: int) -> str:
    """One line: do torchinfo's mult-adds and the counted FLOPs agree, else which is right."""
    if mult_adds <= 0:
        return ("trust forward_flops (FlopCounterMode: the matmuls and convolutions that ran);"
                " torchinfo found no layer it counts")
    ratio = flops / (2 * mult_adds)
    if AGREE[0] <= ratio <= AGREE[1]:
        return (f"forward_flops = {ratio:.2f} x 2 x torchinfo's mult-adds: the two agree"
                " (2 FLOPs per multiply-add)")
    missed = ("missing matmuls in forward code (attention) and a Linear's positions" if ratio > 1
              else "also for layers that do no matmul (embedding lookups, norms)")
    return (f"trust forward_flops, {ratio:,.{1 if ratio > 1 else 2}f}x torchinfo's 2 x mult-adds:"
            " FlopCounterMode counts every matmul that ran; torchinfo counts parameters x batch size"
            f" per layer, {missed}")
