"""torch.compile of the LightningModule's inner network, with a clear failure when it cannot work."""

from __future__ import annotations

import os
import shutil

import lightning.pytorch as pl
import torch

from harness.errors import HarnessError

_CXX = ("g++", "c++", "clang++")


def find_cxx() -> str | None:
    """The C++ compiler TorchInductor would use, or None."""
    configured = os.environ.get("CXX")
    candidates = (configured, *_CXX) if configured else _CXX
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    return None


def compile_network(module: pl.LightningModule, attribute: str, mode: str) -> None:
    """Replace `module.<attribute>` with its compiled version.

    The LightningModule itself is left alone: compiling it breaks as soon as a
    step calls `self.log`.
    """
    network = getattr(module, attribute, None)
    if not isinstance(network, torch.nn.Module):
        raise HarnessError(
            f"compile is on but the model has no nn.Module attribute '{attribute}'."
            " Fix: set compile_module=<attribute that holds the network>, or compile=false"
        )
    if find_cxx() is None:
        raise HarnessError(
            "compile is on but no C++ compiler (g++, c++ or clang++) is on PATH; TorchInductor"
            " needs one. Fix: install one (e.g. apt-get install g++) or set compile=false"
        )
    setattr(module, attribute, torch.compile(network, mode=mode))

