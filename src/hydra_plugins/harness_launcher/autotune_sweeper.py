"""The autotune sweeper (`harness -m sweep=autotune`, docs/autotune.md): the search's waves through
the configured launcher, each job's result.json read back, autotune.json after every wave."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict
from typing_extensions import override

if TYPE_CHECKING:
    from harness.autotune.command_line import Here
    from harness.autotune.job import Shape
    from harness.autotune.knowledge import Wave
    from harness.autotune.replay import Setup
    from harness.autotune.search import Search
    from harness.autotune.space import Space

log = logging.getLogger(__name__)
SAID = ("dropped", "infeasible", "collapsed", "retry", "budget", "skipped")  # decisions told
_CHECKED: dict[int, tuple[Setup, Search, str]] = {}  # id(config) -> check_space's findings


def check_space(config: DictConfig) -> None:
    """The space, each value as its job would check it, and the budget (a ConfigError names the key),
    by the sweep's first callback (CheckCallback), before its directory and parent run exist."""
    from harness.autotune.command_line import SpaceError, parse
    from harness.autotune.replay import Setup
    from harness.autotune.search import Search
    from harness.autotune.settings import AUTO, Settings
    from harness.config.composed import check_values
    from harness.run.job import check_config

    raw = config.get("autotune")
    settings = Settings.from_mapping(OmegaConf.to_container(raw, resolve=True) if raw is not None else None)
    # the launcher's class, as Hydra will build it: its own (Basic) runs the jobs in this process
    launcher = str(config.hydra.launcher._target_).rpartition(".")[2]
    in_process = launcher == "BasicLauncher"
    if settings.probes == AUTO:  # the ladder job by job where that is free and prunes
        settings = replace(settings, probes="job" if in_process else "stage")
    if settings.warmup_job == AUTO:  # a process's first job is slower: in process, one
        settings = replace(settings, warmup_job=in_process)
    params = config.hydra.sweeper.get("params")
    params = OmegaConf.to_container(params, resolve=False) if params else {}
    arguments = [str(o) for o in config.hydra.overrides.task]
    parsed = parse(params, arguments, config, settings, _here(config, params, arguments),
                   blocks=lambda: _blocks(config))
    profiler = config.get("profiler")
    if not hasattr(profiler, "keys") or "speed" not in profiler:
        raise SpaceError("profiler: autotune ranks by the speed preset's examples/s, and this profiler list"
                         " has no speed. Fix: keep speed in it, e.g. profiler=[speed,diagnose]")
    # Each value of each key (an interval at its two ends) checked as its job would.
    values = {key.name: [str(v) for v in key.interval] if key.interval else list(key.values)
              for key in parsed.space.keys}
    check_values(config, values, parsed.fixed, check_config)
    with open_dict(config.hydra.sweeper):  # what the search varies, as the grid's params
        config.hydra.sweeper.params = {k.name: f"interval({k.interval[0]},{k.interval[1]})" if k.interval
                                       else ",".join(k.values) for k in parsed.space.keys}
    fixed = [o for o in parsed.fixed if not o.partition("=")[0].lstrip("+~").startswith("autotune.")]
    setup = Setup(parsed.space, settings, fixed, notes=parsed.notes, launcher=launcher)
    search = Search(setup.space, setup.settings)
    _CHECKED[id(config)] = (setup, search, search.budget_line())


def _here(config: DictConfig, params: Any, arguments: list[str]) -> Here:
    """The machine the jobs run on, as the default space and device-bound values need it."""
    from harness.config.knobs import Here, cuda_here, jobs_run_here
    from harness.contention import affinity

    if not jobs_run_here(config):
        cpus = config.hydra.launcher.get("cpus_per_task")
        return Here(here=False, cpus=cpus if isinstance(cpus, int) else None)
    typed = " ".join([*(f"{k}={v}" for k, v in (params or {}).items()), *arguments])
    cuda = "precision" in typed and cuda_here(config)
    cxx = True
    if "compile" in typed:
        from harness.run.compile import find_cxx

        cxx = find_cxx() is not None
    return Here(here=True, cuda=cuda, cxx=cxx, cpus=len(affinity() or ()) or os.cpu_count())


def _blocks(config: DictConfig) -> str | None:
    """The model's repeated blocks (run.checkpointing's finder) in a few words, or None; built here
    on the meta device where its constructor allows (no memory, no weights read), else as a job."""
    import torch

    from harness.run.build import build_module
    from harness.run.checkpointing import repeated_blocks

    try:
        with torch.device("meta"):
            module = build_module(config)
    except Exception:  # a constructor that reads weights or checks its device
        module = build_module(config)
    found = repeated_blocks(module)
    if found is None or not found.modules:
        return None
    classes = ", ".join(f"{count} {name}" for name, count in found.classes().items())
    return f"{classes} ({found.found_by})"


def _shape(config: DictConfig, space: Space) -> Shape:
    from harness.autotune.command_line import config_value
    from harness.autotune.job import ACCUMULATE, PREFETCH, WORKERS, Shape

    keys = {"train_batches": "data.train_batches", "predict_batches": "data.predict_batches",
            "accumulate": ACCUMULATE, "workers": WORKERS, "prefetch": PREFETCH}
    # the counts the config gives; the others Shape's defaults
    counts = {name: int(v) for name, key in keys.items() if (v := config_value(config, key) or "").isdigit()}
    return Shape(**counts, space=space)


def _job_dir(ret: Any, sweep_dir: Path, idx: int) -> Path:
    """The job's output directory (not JobReturn.working_dir: hydra.job.chdir=false)."""
    try:
        return Path(str(ret.hydra_cfg.hydra.runtime.output_dir))
    except Exception:  # a launcher's stand-in without it: Hydra's default sub-directory
        return sweep_dir / str(idx)


class AutotuneSweeper(Sweeper):
    """`params`: read by check_space from the config; `max_batch_size`: inherited from harness's sweeper."""

    check_before_any_job = staticmethod(check_space)  # CheckCallback's

    def __init__(self, params: Any = None, max_batch_size: Any = None) -> None:
        self.config: Any = None  # set by setup(), which Hydra calls before sweep()
        self.launcher: Any = None

    @override
    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    @override
    def sweep(self, arguments: list[str]) -> Any:
        from harness.autotune.job import overrides
        from harness.autotune.replay import drive
        from harness.autotune.report import write_summary
        from harness.config.overrides import AUTOTUNE_STAGE
        from harness.result.jobs import MULTIRUN_FILE
        from harness.sweep.progress import current

        started = time.time()  # the verdict's time: from here to the last job's end
        if id(self.config) not in _CHECKED:  # not started by harness's callbacks (a test)
            check_space(self.config)
        setup, search, bought = _CHECKED.pop(id(self.config))
        setup.started_at = started
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / MULTIRUN_FILE)
        setup.write(sweep_dir)  # its notes are said once, with the verdict (autotune.report.rebuild)
        log.info("autotune: %d keys, %d grid points; %s", len(setup.space.keys),
                 setup.space.grid_points(), bought)
        if (progress := current()) is not None:
            progress.swept = [k.name.lstrip("+~") for k in setup.space.keys] + [AUTOTUNE_STAGE]
            if search.job_cap:
                progress.announce_jobs(search.job_cap)
        shape, told = _shape(self.config, setup.space), 0

        def launch(wave: Wave) -> list[Path]:
            idx = len(search.records)  # every job launched so far has its record
            log.info("autotune: %s, %d job%s of %d measured steps (%d of %s jobs so far)",
                     wave.stage, len(wave.jobs), "s" if len(wave.jobs) > 1 else "",
                     wave.jobs[0].measured_steps, idx, search.job_cap or "any")
            batch = [overrides(j, setup.fixed, setup.settings, shape) for j in wave.jobs]
            returns = self.launcher.launch(batch, initial_job_idx=idx)
            return [_job_dir(ret, sweep_dir, idx + n) for n, ret in enumerate(returns)]

        def tell() -> None:
            nonlocal told
            for d in search.decisions[told:]:
                if d.action in SAID:
                    log.info("autotune: %s %s %s: %s", d.stage, d.action, d.candidate, d.why)
            told = len(search.decisions)
            write_summary(search, setup, sweep_dir)

        try:
            drive(search, setup, launch, tell)
        except BaseException:  # Ctrl-C, SIGTERM, a job that exited: the best so far stands
            search.interrupt()
            write_summary(search, setup, sweep_dir)
            raise
        return []
