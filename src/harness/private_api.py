"""Every use of torch's, Lightning's and Hydra's private API (docs/architecture.md, "Private API
in one place"), each entry saying what it reaches into and why no public API does."""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

CHECKED_ON = {"torch": "2.2 - 2.13", "lightning": "2.2 - 2.6.6", "hydra-core": "1.3.2 - 1.3.8"}


def __getattr__(name: str) -> Any:
    # PyTorchProfilerAccess subclasses Lightning's PyTorchProfiler: built on first use.
    if name != "PyTorchProfilerAccess":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from lightning.pytorch.profilers import PyTorchProfiler
    from typing_extensions import override

    class PyTorchProfilerAccess(PyTorchProfiler):
        """Lightning's PyTorchProfiler with the private parts harness needs under public names
        (no setter for the torch profiler's arguments; profilers get no trainer)."""

        @property
        def torch_profiler_kwargs(self) -> dict[str, Any]:
            return self._profiler_kwargs  # the memory preset merges into the pytorch one here

        @property
        def trainer(self) -> Any:
            module = self._lightning_module
            return None if module is None else module.trainer

        def stop_profiling(self) -> None:
            self._delete_profilers()  # a cut-short window still ends in on_trace_ready

        @override
        def _cache_functions_events(self) -> None:
            return None  # harness reads each window in on_trace_ready; this fails on an empty one

    PyTorchProfilerAccess.__qualname__ = "PyTorchProfilerAccess"
    globals()[name] = PyTorchProfilerAccess
    return PyTorchProfilerAccess


def profiler_stage(profiler: Any) -> str | None:
    """The stage (fit, validate, predict) a Lightning Profiler was last set up for (`_stage`)."""
    stage = getattr(profiler, "_stage", None)
    return None if stage is None else str(getattr(stage, "value", stage))


def replace_ddp_child_command(build: Any) -> None:
    """Rank > 0 processes start with `build(local_rank)` (no hook: `_hydra_subprocess_cmd`)."""
    from lightning.pytorch.strategies.launchers import subprocess_script

    subprocess_script._hydra_subprocess_cmd = build


def replace_ddp_process_observer(watch: Any) -> None:
    """Rank > 0 processes go to `watch(child_processes)`, not `_ChildProcessObserver`, which SIGKILLs
    the main process (a sweep's) when a rank fails (no hook: `_launch_process_observer`)."""
    from lightning.pytorch.strategies.launchers import subprocess_script

    subprocess_script._launch_process_observer = watch


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
    """Graph breaks since the counters were zeroed: 'graph_break', and 'unimplemented' (2.13)."""
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
    """Every torch.compile'd child of `module` back to its `_orig_mod`, and a compiled `forward` of
    `module` itself (harness.run.compile) back to the original, for the block: hooks (torchinfo's)
    must see the original layers, and a frame TorchDynamo first meets under FlopCounterMode is
    never compiled after (2.13; in-place `Module.compile()` compiled no `nn.Sequential`)."""
    import torch

    own = module.__dict__.get("forward")  # an instance's own forward: compiled, the class's below
    own = own if hasattr(own, "_torchdynamo_orig_callable") else None
    if own is not None:
        del module.forward
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
        if own is not None:
            module.forward = own
        for parent, name, child in swapped:
            setattr(parent, name, child)


def checkpoint_wrapper(module: torch.nn.Module) -> torch.nn.Module:
    """`module` with its activations recomputed in backward, non-reentrant: torch's
    CheckpointWrapper (`torch.distributed.algorithms._checkpoint`), which keeps the module's own
    state_dict keys and works under torch.compile; torch.utils.checkpoint has no module wrapper."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

    return checkpoint_wrapper(module, checkpoint_impl=CheckpointImpl.NO_REENTRANT)


def record_memory_history(max_entries: int | None) -> None:
    """Start (max_entries) or stop (None) CUDA allocation history (no public name)."""
    import torch

    torch.cuda.memory._record_memory_history(
        **({"enabled": None} if max_entries is None else {"max_entries": max_entries}))


def dump_memory_snapshot(path: str) -> None:
    """Write the recorded history as a pickle for https://pytorch.org/memory_viz."""
    import torch

    torch.cuda.memory._dump_snapshot(path)


def hydra_basic_sweeper() -> type:
    """Hydra's BasicSweeper: Hydra has no public base for a grid sweeper."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper


def list_config_groups_once() -> None:
    """`--help` lists the config groups as Hydra does, from one copy of its config repository, not
    one per group (`Hydra.format_config_groups`: most of --help's time); Hydra has no hook."""
    from hydra._internal.hydra import Hydra

    Hydra.format_config_groups = _format_config_groups  # type: ignore[method-assign]


@contextlib.contextmanager
def run_mode_unset() -> Iterator[None]:
    """`Hydra.get_mode` composes the whole config once more only to read `hydra.mode` (a quarter
    of a short run's CPU). Where the caller knows nothing can set it, Hydra's answer for an unset
    mode (None: `-m` decides) without composing. Hydra has no hook."""
    from hydra._internal.hydra import Hydra

    composing, Hydra.get_mode = Hydra.get_mode, lambda self, config_name, overrides: None
    try:
        yield
    finally:
        Hydra.get_mode = composing  # type: ignore[method-assign]


@functools.cache  # --help lists the groups twice: Hydra's and the app's
def hydra_config_groups(hydra: Any) -> dict[str, list[str]]:
    """Every config group a Hydra sees that holds configs, options sorted, from one copy."""
    from hydra.core.object_type import ObjectType

    _, repo = hydra.config_loader._parse_overrides_and_create_caching_repo(None, [])
    listing: dict[str, list[str]] = {}

    def walk(parent: str) -> None:
        for group in repo.get_group_options(parent, ObjectType.GROUP):
            name = f"{parent}/{group}" if parent else group
            options = repo.get_group_options(name, ObjectType.CONFIG)
            if options:
                listing[name] = sorted(options)
            walk(name)

    walk("")
    return listing


def _format_config_groups(hydra: Any, predicate: Callable[[str], bool], compact: bool = True) -> str:
    """`Hydra.format_config_groups`, text for text, from `hydra_config_groups`."""
    lines = []
    for group, options in sorted(hydra_config_groups(hydra).items()):
        if predicate(group):
            listed = ", ".join(options) if compact else "\n".join("  " + o for o in options)
            lines.append(f"{group}: {listed}\n" if compact else f"{group}:\n{listed}\n")
    return "".join(lines)


def route_comm_hooks(timer: Any, said: Callable[[str], None]
                     ) -> tuple[Callable[[Any], None], Callable[[], None]]:
    """(ensure, undo). Until undo(), every `DistributedDataParallel.register_comm_hook` (Lightning's
    `DDPStrategy(ddp_comm_hook=...)`, a module's own call) sets the hook `timer.hook` wraps, registered
    once per model in its place (DDP takes one hook, and keeps it in `_comm_hooks`: no public way to
    wrap the one registered); ensure(model) registers `timer.hook` around DDP's own allreduce where
    nobody registered one. Set before Lightning wraps the model."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    original = DDP.register_comm_hook

    def ensure(model: Any) -> None:
        if isinstance(model, DDP) and not getattr(model, "_harness_timed", False):
            model._harness_timed = True
            original(model, None, timer.hook)

    def register(model: Any, state: object, hook: Callable[..., Any]) -> None:
        timer.inner = (hook, state)
        said(getattr(hook, "__qualname__", repr(hook)))
        ensure(model)

    def undo() -> None:
        DDP.register_comm_hook = original  # type: ignore[method-assign]

    DDP.register_comm_hook = register  # type: ignore[method-assign]
    return ensure, undo


def time_batch_broadcast(trainer: Any, record: Callable[[tuple[float, float]], None]) -> bool:
    """Each of Lightning's per-batch broadcasts from rank 0 (`_broadcast_sigterm_tensor`, a
    collective every batch waits in) as (start, end) on the host clock; False where this
    Lightning has none (its wait then counts as the batch's data wait)."""
    loop = trainer.fit_loop.epoch_loop
    original = getattr(loop, "_broadcast_sigterm_tensor", None)
    if original is None:
        return False

    def timed() -> None:
        start = time.perf_counter()
        original()
        record((start, time.perf_counter()))

    loop._broadcast_sigterm_tensor = timed
    return True
