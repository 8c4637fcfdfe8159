"""Every entry of harness.private_api against the installed torch and Lightning.

A release that renames or changes one of these fails here, naming the entry, instead of
breaking a preset somewhere in a run.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from harness import private_api


def test_pytorch_profiler_access_reaches_lightnings_private_parts():
    from lightning.pytorch.profilers import PyTorchProfiler

    for name in ("_profiler_kwargs", "_lightning_module", "_delete_profilers",
                 "_cache_functions_events"):
        assert hasattr(PyTorchProfiler(), name) or hasattr(PyTorchProfiler, name), (
            f"lightning's PyTorchProfiler has no {name}: update harness.private_api")
    profiler = private_api.PyTorchProfilerAccess(profile_memory=True, record_shapes=False)
    assert profiler.torch_profiler_kwargs["profile_memory"] is True
    profiler.torch_profiler_kwargs["record_shapes"] = True
    assert profiler._profiler_kwargs["record_shapes"] is True  # the same dict Lightning reads
    assert profiler.trainer is None  # Lightning sets the module when the fit starts
    profiler.stop_profiling()  # nothing running: must not raise
    # Lightning's summary() calls _cache_functions_events; ours must do nothing
    assert profiler._cache_functions_events() is None


def test_profiler_stage():
    from lightning.pytorch.profilers import SimpleProfiler

    profiler = SimpleProfiler()
    profiler.setup("fit")
    assert private_api.profiler_stage(profiler) == "fit"


def test_the_ddp_launcher_calls_the_replaceable_command_builder():
    from lightning.pytorch.strategies.launchers import subprocess_script

    launcher = subprocess_script._SubprocessScriptLauncher
    assert "_hydra_subprocess_cmd" in launcher._call_children_scripts.__code__.co_names, (
        "Lightning no longer looks up _hydra_subprocess_cmd by name: update"
        " harness.private_api.replace_ddp_child_command")
    original = subprocess_script._hydra_subprocess_cmd
    assert list(inspect.signature(original).parameters) == ["local_rank"]
    try:
        private_api.replace_ddp_child_command(lambda local_rank: (["x"], "."))
        assert subprocess_script._hydra_subprocess_cmd(1) == (["x"], ".")
    finally:
        subprocess_script._hydra_subprocess_cmd = original


def test_the_ddp_launcher_calls_the_replaceable_process_observer():
    from lightning.pytorch.strategies.launchers import subprocess_script

    launcher = subprocess_script._SubprocessScriptLauncher
    assert "_launch_process_observer" in launcher.launch.__code__.co_names, (
        "Lightning no longer looks up _launch_process_observer by name: update"
        " harness.private_api.replace_ddp_process_observer")
    original = subprocess_script._launch_process_observer
    assert list(inspect.signature(original).parameters) == ["child_processes"]
    seen = []
    try:
        private_api.replace_ddp_process_observer(seen.append)
        subprocess_script._launch_process_observer(["child"])
        assert seen == [["child"]]
    finally:
        subprocess_script._launch_process_observer = original


def test_compile_counters_count_graphs_breaks_and_seconds():
    torch.compiler.reset()
    private_api.reset_compile_counters()
    before = private_api.compile_seconds()

    def with_a_break(x):
        y = x * 2
        torch._dynamo.graph_break()
        return y + 1

    compiled = torch.compile(with_a_break, backend="eager")
    compiled(torch.ones(3))
    assert private_api.compiled_graphs() == 2
    assert private_api.graph_breaks() >= 1
    private_api.reset_compile_counters()

    def reads_back(x):  # Tensor.item() breaks the graph too, counted elsewhere by torch
        return x * 2 if x.sum().item() > 0 else x

    torch.compile(reads_back, backend="eager")(torch.ones(3))
    assert private_api.graph_breaks() >= 1
    assert private_api.compile_seconds() > before
    private_api.reset_compile_counters()
    assert private_api.compiled_graphs() == 0 and private_api.graph_breaks() == 0


def test_inductor_names_its_cxx_compiler():
    names = private_api.inductor_cxx()
    assert names and all(isinstance(n, str) and n for n in names)


def test_uncompiled_swaps_optimized_modules_back():
    net = torch.nn.Sequential(torch.nn.Linear(2, 2))
    holder = torch.nn.Module()
    holder.net = torch.compile(net)
    assert holder.net._orig_mod is net
    holder.forward = torch.compile(holder.forward)  # compile=true on a module without `net`
    compiled = holder.forward
    with private_api.uncompiled(holder):
        assert holder.net is net and "forward" not in vars(holder)  # the class's forward
    assert holder.net is not net and holder.forward is compiled


def test_memory_history_functions_exist_with_the_arguments_used():
    for name in ("_record_memory_history", "_dump_snapshot"):
        assert hasattr(torch.cuda.memory, name), f"torch.cuda.memory.{name} is gone"
    params = inspect.signature(torch.cuda.memory._record_memory_history).parameters
    assert {"enabled", "max_entries"} <= set(params)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_memory_history_records_and_dumps_on_cuda(tmp_path):
    private_api.record_memory_history(1000)
    x = torch.ones(1024, device="cuda")
    private_api.dump_memory_snapshot(str(tmp_path / "s.pickle"))
    private_api.record_memory_history(None)
    assert (tmp_path / "s.pickle").stat().st_size > 0
    del x


def test_hydras_basic_sweeper_asks_split_arguments_for_the_jobs():
    import inspect

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.plugins.sweeper import Sweeper

    basic = private_api.hydra_basic_sweeper()
    assert issubclass(basic, Sweeper), (
        "hydra's BasicSweeper moved or changed: update harness.private_api.hydra_basic_sweeper")
    assert list(inspect.signature(basic.split_arguments).parameters) == [
        "overrides", "max_batch_size"]
    assert "self.split_arguments(" in inspect.getsource(basic.sweep), (
        "BasicSweeper.sweep no longer takes its job list from split_arguments, which"
        " RoundsSweeper overrides: update harness.private_api.hydra_basic_sweeper")
    overrides = OverridesParser.create().parse_overrides(["a=1,2", "b=x"])
    assert basic.split_arguments(overrides, None) == [[["a=1", "b=x"], ["a=2", "b=x"]]]
    assert basic(max_batch_size=None).config is None  # set by setup(); RoundsSweeper reads it


def test_importing_the_private_api_loads_neither_torch_nor_lightning():
    import subprocess
    import sys

    probe = ("import sys, harness.private_api; "
             "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_hydras_help_lists_its_groups_through_the_replaceable_method():
    from pathlib import Path

    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra

    from harness.config.locations import conf_dir
    from harness.sweep.named import register_sweeps

    assert "format_config_groups" in Hydra.get_help.__code__.co_names, (
        "Hydra's get_help no longer lists the groups through format_config_groups: update"
        " harness.private_api.list_config_groups_once")
    assert list(inspect.signature(Hydra.format_config_groups).parameters) == [
        "self", "predicate", "compact"]
    original = Hydra.format_config_groups
    GlobalHydra.instance().clear()
    register_sweeps()  # as `harness` does: sweep=NAME lives in Hydra's ConfigStore
    search_path = create_config_search_path(str(Path(__file__).parent / "user_conf"))
    search_path.append("harness", f"file://{conf_dir()}")
    hydra = Hydra.create_main_hydra2(task_name="harness", config_search_path=search_path)
    try:
        private_api.list_config_groups_once()
        assert Hydra.format_config_groups is not original
        for compact in (True, False):
            for hydra_groups in (True, False):
                def predicate(group: str, hydra_groups: bool = hydra_groups) -> bool:
                    return (group == "hydra" or group.startswith("hydra/")) == hydra_groups

                # the planted truth: Hydra's own listing of the same search path
                assert hydra.format_config_groups(predicate, compact) == original(
                    hydra, predicate, compact), (compact, hydra_groups)
        assert private_api.hydra_config_groups(hydra)["model"] == ["tiny", "transformer"]
    finally:
        Hydra.format_config_groups = original
        GlobalHydra.instance().clear()


def test_hydra_reads_the_run_mode_through_the_replaceable_method():
    from hydra._internal import utils
    from hydra._internal.hydra import Hydra

    assert "get_mode" in utils._run_hydra.__code__.co_names, (
        "Hydra's _run_hydra no longer reads the mode through Hydra.get_mode: update"
        " harness.private_api.run_mode_unset")
    assert list(inspect.signature(Hydra.get_mode).parameters) == ["self", "config_name", "overrides"]
    original = Hydra.get_mode
    with private_api.run_mode_unset():
        assert Hydra.get_mode(None, "config", ["a=1"]) is None  # no composing: no Hydra needed
    assert Hydra.get_mode is original


def test_the_checkpoint_wrapper_is_torchs_non_reentrant_one():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        CheckpointWrapper,
    )

    inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    wrapper = private_api.checkpoint_wrapper(inner)
    assert isinstance(wrapper, CheckpointWrapper), "update harness.private_api.checkpoint_wrapper"
    assert wrapper.checkpoint_impl == CheckpointImpl.NO_REENTRANT
    assert wrapper._checkpoint_wrapped_module is inner
    assert list(wrapper.state_dict()) == list(inner.state_dict())  # checkpoints keep their keys
    x = torch.randn(2, 4, requires_grad=True)
    wrapper(x).sum().backward()
    assert x.grad is not None
