"""Every use of Lightning's and torch's private API, in one place.

Each entry says what it reaches into, why no public API does the job, and the
releases it was checked on. tests/test_private_api.py checks each one against the
installed releases and fails loudly, naming the entry, when a release changes it.
Importing this module costs no torch or Lightning (Hydra imports the rounds sweeper, which
uses Hydra's entry, at every start, `harness --help` included): each entry imports what it
reaches into when it is first used.

Checked on: torch 2.2-2.13 (CPU 2.13.0 here; CUDA 2.11 on an H100), lightning 2.2-2.6.6.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

CHECKED_ON = {"torch": "2.2 - 2.13", "lightning": "2.2 - 2.6.6", "hydra-core": "1.3.2 - 1.3.8"}


def __getattr__(name: str) -> Any:
    # PyTorchProfilerAccess subclasses Lightning's PyTorchProfiler: built on first use.
    if name == "PyTorchProfilerAccess":
        globals()[name] = found = _pytorch_profiler_access()
        return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- Lightning's PyTorchProfiler ------------------------------------------------------------
def _pytorch_profiler_access() -> type:
    from lightning.pytorch.profilers import PyTorchProfiler
    from typing_extensions import override

    class PyTorchProfilerAccess(PyTorchProfiler):
        """Lightning's PyTorchProfiler with the private parts harness needs, under public names.

        - `torch_profiler_kwargs`: the keyword arguments the torch profiler is created with
          (`_profiler_kwargs`); the memory preset merges into the pytorch one by changing them
          before the profiler starts. Lightning has no setter.
        - `trainer`: the Trainer the profiler runs in (`_lightning_module.trainer`), for the
          window check; Lightning hands profilers no trainer.
        - `stop_profiling()`: stops the torch profiler at the end of a stage
          (`_delete_profilers`), so a cut-short window still ends in on_trace_ready.
        - `_cache_functions_events` is overridden to do nothing: harness reads each window's
          events in on_trace_ready, and Lightning's caching fails on a stage that recorded
          nothing.
        """

        @property
        def torch_profiler_kwargs(self) -> dict[str, Any]:
            return self._profiler_kwargs

        @property
        def trainer(self) -> Any:
            module = self._lightning_module
            return None if module is None else module.trainer

        def stop_profiling(self) -> None:
            self._delete_profilers()

        @override
        def _cache_functions_events(self) -> None:
            return None

    PyTorchProfilerAccess.__qualname__ = "PyTorchProfilerAccess"
    return PyTorchProfilerAccess


def profiler_stage(profiler: Any) -> str | None:
    """The stage (fit, validate, predict) a Lightning Profiler was last set up for (`_stage`)."""
    stage = getattr(profiler, "_stage", None)
    return None if stage is None else str(getattr(stage, "value", stage))


# -- Lightning's DDP launcher -----------------------------------------------------------------
def replace_ddp_child_command(build: Any) -> None:
    """Make Lightning start rank > 0 processes of a Hydra job with `build(local_rank)`.

    Lightning's subprocess launcher calls the module-level `_hydra_subprocess_cmd` by name
    when it starts the ranks; it has no hook for the command. Idempotent.
    """
    from lightning.pytorch.strategies.launchers import subprocess_script

    subprocess_script._hydra_subprocess_cmd = build


def replace_ddp_process_observer(watch: Any) -> None:
    """Make Lightning hand the rank > 0 processes it starts to `watch(child_processes)`
    instead of starting its `_ChildProcessObserver`.

    Lightning's observer is a thread that outlives the job: when a rank exits non-zero it
    SIGKILLs every rank *and the main process*, which in a sweep run in one process is the
    sweep. `_SubprocessScriptLauncher.launch` calls the module-level
    `_launch_process_observer(self.procs)` by name (imported from Lightning Fabric's
    launcher module); there is no hook. Idempotent.
    """
    from lightning.pytorch.strategies.launchers import subprocess_script

    subprocess_script._launch_process_observer = watch


# -- torch.compile ----------------------------------------------------------------------------
def compile_seconds() -> float:
    """Seconds TorchDynamo and TorchInductor have spent compiling in this process so far."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:
        return 0.0
    return float(sum(compilation_time_metrics.get("_compile.compile_inner", [])))


def compiled_graphs() -> int:
    """Graphs TorchDynamo has compiled in this process since the last reset (`counters`)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def reset_compile_counters() -> None:
    """Zero TorchDynamo's counters; `torch.compiler.reset()` drops graphs but keeps them."""
    from torch._dynamo.utils import counters

    counters.clear()


def graph_breaks() -> int:
    """Graph breaks TorchDynamo met since the counters were zeroed (`counters`): an explicit
    `torch._dynamo.graph_break()` counts under 'graph_break', an unsupported call (a
    `Tensor.item()`, say) under 'unimplemented' (torch 2.13)."""
    from torch._dynamo.utils import counters

    return int(sum(counters["graph_break"].values()) + sum(counters["unimplemented"].values()))


def inductor_cxx() -> tuple[str, ...]:
    """The C++ compiler names TorchInductor searches (`torch._inductor.config.cpp.cxx`)."""
    try:
        from torch._inductor import config
    except ImportError:  # what torch 2.x does on Linux
        return (os.environ.get("CXX", "g++"),)
    names = config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
    return tuple(str(name) for name in names if name)


@contextlib.contextmanager
def uncompiled(module: torch.nn.Module) -> Iterator[None]:
    """Swap every torch.compile'd child of `module` back to its original for the block.

    `torch.compile(network)` returns an OptimizedModule holding the network as `_orig_mod`;
    hooks (torchinfo's) must see the original layers. harness compiles with
    `torch.compile(network)`, not the in-place `nn.Module.compile()`: on torch 2.13 the
    latter compiled no graph at all for an `nn.Sequential` of torch's own layers.
    """
    import torch

    swapped = []
    for parent in module.modules():
        for name, child in list(parent.named_children()):
            original = getattr(child, "_orig_mod", None)
            if isinstance(original, torch.nn.Module):
                swapped.append((parent, name, child))
                setattr(parent, name, original)
    try:
        yield
    finally:
        for parent, name, child in swapped:
            setattr(parent, name, child)


# -- CUDA memory history (the snapshot preset) -------------------------------------------------
def record_memory_history(max_entries: int | None) -> None:
    """Start (max_entries) or stop (None) CUDA allocation history with stacks.

    torch documents `torch.cuda.memory._record_memory_history` for memory_viz but keeps
    the underscore; there is no public name.
    """
    import torch

    if max_entries is None:
        torch.cuda.memory._record_memory_history(enabled=None)
    else:
        torch.cuda.memory._record_memory_history(max_entries=max_entries)


def dump_memory_snapshot(path: str) -> None:
    """Write the recorded history as a pickle for https://pytorch.org/memory_viz."""
    import torch

    torch.cuda.memory._dump_snapshot(path)


# -- Hydra's grid sweeper ---------------------------------------------------------------------
def hydra_basic_sweeper() -> type:
    """Hydra's BasicSweeper (hydra._internal.core_plugins.basic_sweeper), the grid sweeper of
    every multirun: RoundsSweeper (hydra_plugins/harness_launcher/rounds_sweeper.py) subclasses
    it and overrides split_arguments to run repeat=N as rounds. Hydra has no public base for
    a grid sweeper."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper


# -- Hydra's --help listing of config groups ----------------------------------------------------
_group_listings: weakref.WeakKeyDictionary[Any, dict[str, list[str]]] = weakref.WeakKeyDictionary()


def list_config_groups_once() -> None:
    """Make this process's `--help` and `--hydra-help` list the config groups from one walk
    of Hydra's config repository: the same text as Hydra's own listing.

    Hydra 1.3's `Hydra.format_config_groups` (called twice per --help, for
    $HYDRA_CONFIG_GROUPS and $APP_CONFIG_GROUPS) asks `ConfigLoaderImpl.get_group_options`
    once per group, and each call deep-copies the whole config repository (every structured
    config Hydra and its plugins registered) in `_parse_overrides_and_create_caching_repo`:
    about 80 copies for harness's groups, most of --help's time. Here the method is replaced
    by one that walks the groups once, on one copy made by that same private call (so the same
    sources: conf/, a user's -cd directory, Hydra's own, the ConfigStore), and formats them as
    Hydra does. Hydra has no public listing nor a hook for the help's group text. Checked on
    hydra-core 1.3.8."""
    from hydra._internal.hydra import Hydra

    Hydra.format_config_groups = _format_config_groups  # type: ignore[method-assign]


def hydra_config_groups(hydra: Any) -> dict[str, list[str]]:
    """Every config group a `hydra._internal.hydra.Hydra` sees that holds configs, with its
    options sorted, from one repository copy (kept for the Hydra's later calls)."""
    listing = _group_listings.get(hydra)
    if listing is not None:
        return listing
    from hydra.core.object_type import ObjectType

    _, repo = hydra.config_loader._parse_overrides_and_create_caching_repo(None, [])
    listing = {}

    def walk(parent: str) -> None:
        for group in repo.get_group_options(parent, ObjectType.GROUP):
            name = f"{parent}/{group}" if parent else group
            options = repo.get_group_options(name, ObjectType.CONFIG)
            if options:
                listing[name] = sorted(options)
            walk(name)

    walk("")
    _group_listings[hydra] = listing
    return listing


def _format_config_groups(hydra: Any, predicate: Callable[[str], bool],
                          compact: bool = True) -> str:
    """`Hydra.format_config_groups`, text for text, from `hydra_config_groups`."""
    lines = []
    for group, options in sorted(hydra_config_groups(hydra).items()):
        if predicate(group):
            listed = ", ".join(options) if compact else "\n".join("  " + o for o in options)
            lines.append(f"{group}: {listed}\n" if compact else f"{group}:\n{listed}\n")
    return "".join(lines)
