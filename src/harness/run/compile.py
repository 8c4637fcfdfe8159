"""torch.compile of the LightningModule's inner network (or its forward); one line when it cannot work."""

from __future__ import annotations

import shutil

import lightning.pytorch as pl
import torch

from harness import private_api
from harness.errors import HarnessError

DEFAULT_ATTRIBUTE = "net"  # conf/config.yaml's compile_module


def find_cxx() -> str | None:
    """The C++ compiler TorchInductor would use, or None (it does not fall back to c++/clang++)."""
    return next(filter(None, map(shutil.which, private_api.inductor_cxx())), None)


def compile_network(module: pl.LightningModule, attribute: str, mode: str) -> str | None:
    """Compile `module.<attribute>` in place, or, where the module has no nn.Module `net` (the
    default), its own forward, said in the returned line. Not its steps (`torch.compile(module)`
    to the Trainer): TorchDynamo fails on their `self.log` (torch 2.13, Lightning 2.6); nor
    `module.compile()`, through which DDP calls the steps. A wrong attribute: one line."""
    network = getattr(module, attribute, None)
    whole = not isinstance(network, torch.nn.Module)
    if whole and attribute != DEFAULT_ATTRIBUTE:
        raise HarnessError(f"compile is on but the model has no nn.Module attribute '{attribute}'."
                           " Fix: set compile_module=<attribute that holds the network>, or compile=false")
    if find_cxx() is None:
        raise HarnessError(f"compile is on but TorchInductor's C++ compiler"
                           f" ({' or '.join(private_api.inductor_cxx())}) is not on PATH. Fix: install"
                           " it (e.g. apt-get install g++), point CXX at one, or set compile=false")
    if whole:
        module.forward = torch.compile(module.forward, mode=mode)
        return (f"compile: {type(module).__name__} has no nn.Module attribute"
                f" '{DEFAULT_ATTRIBUTE}': compiled the LightningModule's forward (each self(...)"
                " of its steps); compile_module=<attribute> compiles that network instead")
    setattr(module, attribute, torch.compile(network, mode=mode))
    return None


def compile_facts(seconds_before: float) -> dict[str, float | int]:
    """Graphs, graph breaks (counted from zero each measurement) and seconds spent compiling."""
    return {"compiled_graphs": private_api.compiled_graphs(), "graph_breaks": private_api.graph_breaks(),
            "compile_time_s": private_api.compile_seconds() - seconds_before}
