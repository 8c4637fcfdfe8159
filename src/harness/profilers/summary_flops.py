"""The summary's second count of a forward pass's compute, and which of the two to trust.

torchinfo's "mult-adds" are a per-layer estimate: for each layer it hooks, its parameters times
the batch's first dimension. Matmuls written in `forward` code are no layer (attention's
`q @ k^T` and `attn @ v`), and a Linear applied over a sequence or spatial axis is counted
once per example, not once per position, so a transformer's figure can be orders of
magnitude low. torch's FlopCounterMode counts every matmul, convolution and attention op
that really ran, from its real shapes, 2 FLOPs per multiply-add. It is taken during the
same forward pass as torchinfo's table (no extra pass).
"""

from __future__ import annotations

from contextlib import AbstractContextManager

# Within this band torchinfo's 2 x mult-adds and the counted FLOPs are the same figure.
AGREE = (0.8, 1.25)


def flop_counter() -> AbstractContextManager:
    """A FlopCounterMode that prints nothing; `.get_total_flops()` after the block."""
    from torch.utils.flop_counter import FlopCounterMode

    return FlopCounterMode(display=False)


def which_to_trust(mult_adds: int, flops: int | None) -> str:
    """One line: do torchinfo's mult-adds and FlopCounterMode's FLOPs agree, and if not, which
    is right."""
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
