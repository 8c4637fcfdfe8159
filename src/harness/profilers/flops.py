"""FLOPs of one step, counted by torch's own FlopCounterMode on a real batch.

Convention: 2 FLOPs per multiply-add, matrix multiplications and convolutions only (what
`torch.utils.flop_counter` counts; element-wise ops, norms and the optimizer update are
left out, as in every MFU figure). A training step is forward + backward; an inference
step is the forward of `predict_step`. Kernels torch cannot see into (custom CUDA or Triton
kernels) count as zero: a count of 0 is reported as "not counted", never as a figure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CONVENTION = ("2 FLOPs per multiply-add; matmuls and convolutions only"
              " (torch.utils.flop_counter.FlopCounterMode); forward + backward for training")


def count_flops(step: Callable[[], Any]) -> tuple[int | None, str | None]:
    """(FLOPs of one call of `step`, why not counted): one of the two is None."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with FlopCounterMode(display=False) as counter:
            step()
    except Exception as err:  # custom kernels, ops without a FLOP formula that raise
        from harness.errors import first_line

        return None, f"FLOPs not counted: {first_line(err)}"
    total = int(counter.get_total_flops())
    if total == 0:
        return None, "FLOPs not counted: torch saw no matmul or convolution in the step"
    return total, None
