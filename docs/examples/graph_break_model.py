"""A network whose forward reads a tensor value back into Python: torch.compile breaks its
graph there. Used by docs/findings/graph-breaks.md:

    PYTHONPATH=docs/examples harness compile=true model._target_=graph_break_model.Model
"""

from __future__ import annotations

import torch
from torch import nn

from harness.workload.model import TransformerModule


class LoggingNet(nn.Sequential):
    """The built-in blocks, and a print of the activations' scale after the first one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, block in enumerate(self):
            x = block(x)
            if index == 0 and x.abs().max().item() > 1e4:  # .item(): a graph break
                print("large activations")
        return x


class Model(TransformerModule):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.net = LoggingNet(*self.net)
