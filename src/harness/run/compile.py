"""torch.compile of the LightningModule's inner network, with a clear failure when it cannot work."""

from __future__ import annotations

import os
import shutil

import lightning.pytorch as pl
import torch

from harness.errors import HarnessError


def _inductor_compilers() -> tuple[str, ...]:
    """The compiler names TorchInductor searches, from its own config ($CXX, else g++)."""
    try:
        from torch._inductor import config
    except ImportError:  # private module: fall back to what torch 2.x does on Linux
        return (os.environ.get("CXX", "g++"),)
    names = config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
    return tuple(str(name) for name in names if name)


def find_cxx() -> str | None:
    """The C++ compiler TorchInductor would use, or None (it does not fall back to c++/clang++)."""
    for name in _inductor_compilers():
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
            f"compile is on but TorchInductor's C++ compiler ({' or '.join(_inductor_compilers())})"
            " is not on PATH. Fix: install it (e.g. apt-get install g++), point CXX at one,"
            " or set compile=false"
        )
    setattr(module, attribute, torch.compile(network, mode=mode))

