"""torch.compile of the LightningModule's inner network, with a clear failure when it cannot work."""

from __future__ import annotations

import shutil

import lightning.pytorch as pl
import torch

from harness import private_api
from harness.errors import HarnessError


def find_cxx() -> str | None:
    """The C++ compiler TorchInductor would use, or None (it does not fall back to c++/clang++)."""
    for name in private_api.inductor_cxx():
        path = shutil.which(name)
        if path:
            return path
    return None


def compile_network(module: pl.LightningModule, attribute: str, mode: str) -> None:
    """Replace `module.<attribute>` with its compiled version (not the LightningModule)."""
    network = getattr(module, attribute, None)
    if not isinstance(network, torch.nn.Module):
        raise HarnessError(
            f"compile is on but the model has no nn.Module attribute '{attribute}'."
            " Fix: set compile_module=<attribute that holds the network>, or compile=false"
        )
    if find_cxx() is None:
        raise HarnessError(
            f"compile is on but TorchInductor's C++ compiler"
            f" ({' or '.join(private_api.inductor_cxx())}) is not on PATH. Fix: install it"
            " (e.g. apt-get install g++), point CXX at one, or set compile=false"
        )
    setattr(module, attribute, torch.compile(network, mode=mode))


def compile_facts(seconds_before: float) -> dict[str, float | int]:
    """Graphs, graph breaks (counted from zero each measurement) and seconds spent compiling."""
    return {
        "compiled_graphs": private_api.compiled_graphs(),
        "graph_breaks": private_api.graph_breaks(),
        "compile_time_s": private_api.compile_seconds() - seconds_before,
    }
