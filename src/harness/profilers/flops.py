"""FLOPs of a real step or forward pass, counted by Lightning's `measure_flops` (torch's
FlopCounterMode), for the diagnose preset's MFU and the summary preset's forward.

Convention: 2 FLOPs per multiply-add, matrix multiplications and convolutions only (what
`torch.utils.flop_counter` counts; element-wise ops, norms and the optimizer update are
left out, as in every MFU figure). A training step is forward + backward; an inference
step is the forward of `predict_step`. Kernels torch cannot see into (custom CUDA or Triton
kernels) count as zero: a count of 0 is reported as "not counted", never as a figure.

The summary preset also has torchinfo's per-layer "mult-adds" for the same forward pass, an
estimate: for each layer it hooks, its parameters times the batch's first dimension.
Matmuls written in `forward` code are no layer (attention's `q @ k^T` and `attn @ v`), and a
Linear applied over a sequence or spatial axis is counted once per example, not once per
position, so a transformer's figure can be orders of magnitude low. `which_to_trust` says
whether the two agree, and which is right when they do not.
"""

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
    """(FLOPs of `forward`, plus `loss(its output).backward()` when `loss` is given; why not
    counted): one of the two is None. Errors in the step become the reason."""
    try:
        total = int(measure_flops(module, forward, loss))
    except Exception as err:  # custom kernels, ops without a FLOP formula that raise
        return None, f"FLOPs not counted: {first_line(err)}"
    if total == 0:
        return None, "FLOPs not counted: torch saw no matmul or convolution in the step"
    return total, None


def which_to_trust(mult_adds: int, flops: int | None) -> str:
    """One line: do torchinfo's mult-adds and the counted FLOPs agree, and if not, which is
    right."""
    if flops is None:
        return "forward FLOPs not counted: only torchinfo's per-layer mult-adds estimate"
    if mult_adds <= 0:
        return ("trust forward_flops (FlopCounterMode: the matmuls and convolutions that ran);"
                " torchinfo found no layer it counts")
    ratio = flops / (2 * mult_adds)
    if AGREE[0] <= ratio <= AGREE[1]:
        return (f"forward_flops = {ratio:.2f} x 2 x torchinfo's mult-adds: the two agree"
                " (2 FLOPs per multiply-add)")
    if ratio > 1:
        return (f"trust forward_flops, {ratio:,.1f}x torchinfo's 2 x mult-adds: FlopCounterMode"
                " counts every matmul that ran; torchinfo counts parameters x batch size per"
                " layer, missing matmuls in forward code (attention) and a Linear's positions")
    return (f"trust forward_flops, {ratio:,.2f}x torchinfo's 2 x mult-adds: FlopCounterMode"
            " counts every matmul that ran; torchinfo counts parameters x batch size per layer,"
            " also for layers that do no matmul (embedding lookups, norms)")
