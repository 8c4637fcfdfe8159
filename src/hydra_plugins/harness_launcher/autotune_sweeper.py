"""The autotune sweeper (`harness -m sweep=autotune`, docs/autotune.md): checks the space before
any job, then launches the pure search's waves through the configured launcher, reads each
job's result.json back and writes autotune.json after every wave (interrupted: the best so far)."""

from __future__ import annotations

import logging
import os
import time
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
MULTIRUN_FILE = "multirun.yaml"
SAID = ("dropped", "infeasible", "collapsed", "retry", "budget", "skipped")  # decisions told


class AutotuneSweeper(Sweeper):
    """`max_batch_size`: the harness sweeper's key, inherited by `sweep=autotune`: unused."""

    def __init__(self, params: Any = None, max_batch_size: Any = None) -> None:
        self.params = params
        # Set by setup(), which Hydra calls before sweep().
        self.config: Any = None
        self.hydra_context: Any = None
        self.launcher: Any = None
        self.job_idx = 0

    @override
    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    @override
    def sweep(self, arguments: list[str]) -> Any:
        from harness.autotune import job as autotune_job
        from harness.autotune.reading import elapsed, outcome_of
        from harness.autotune.report import body_of, write_summary
        from harness.autotune.search import Search

        setup = self._setup(list(arguments))  # bad input: a ConfigError, before any job
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / MULTIRUN_FILE)
        setup.write(sweep_dir)
        for note in setup.notes:
            log.info("autotune: %s", note)
        search = Search(setup.space, setup.settings)
        self._announce(setup, search)
        shape = self._shape(setup.space)
        seen = []
        told = 0
        try:
            wave = search.start()
            while wave is not None:
                self._say_wave(wave, search)
                batch = [autotune_job.overrides(j, setup.fixed, setup.settings, shape)
                         for j in wave.jobs]
                returns = self.launcher.launch(batch, initial_job_idx=self.job_idx)
                dirs = [self._job_dir(ret, sweep_dir, self.job_idx + n)
                        for n, ret in enumerate(returns)]
                self.job_idx += len(batch)
                outcomes = [outcome_of(d, setup.settings.objective) for d in dirs]
                seen += outcomes
                wave = search.advance(outcomes, elapsed(setup.started_at, seen),
                                      [d.name for d in dirs])
                told = self._say_decisions(search, told)
                write_summary(sweep_dir, body_of(search, setup, sweep_dir))
        except BaseException:  # Ctrl-C, SIGTERM, a job that exited: the best so far stands
            search.interrupt()
            write_summary(sweep_dir, body_of(search, setup, sweep_dir))
            raise
        return []

    def _setup(self, arguments: list[str]) -> Setup:
        from harness.autotune.command_line import SpaceError, parse
        from harness.autotune.replay import Setup
        from harness.autotune.settings import AUTO, Settings
        from harness.config.composed import check_values
        from harness.run.job import check_config

        raw = self.config.get("autotune")
        settings = Settings.from_mapping(
            OmegaConf.to_container(raw, resolve=True) if raw is not None else None)
        launcher = type(self.launcher).__name__
        in_process = launcher == "BasicLauncher"  # Hydra's own: the jobs run in this process
        if settings.probes == AUTO:  # the ladder job by job where that is free and prunes
            settings = settings.resolved(probes="job" if in_process else "stage")
        if settings.warmup_job == AUTO:  # a process's first job is slower: in process, one
            settings = settings.resolved(warmup_job=in_process)
        params = OmegaConf.to_container(self.params, resolve=False) if self.params else {}
        parsed = parse(params, arguments, self.config, settings,
                       self._here(launcher, params, arguments), blocks=self._blocks)
        profiler = self.config.get("profiler")
        if not hasattr(profiler, "keys") or "speed" not in profiler:
            raise SpaceError("profiler: autotune ranks by the speed preset's examples/s, and this"
                             " profiler list has no speed. Fix: keep speed in it, e.g."
                             " profiler=[speed,diagnose]")
        # Each value of each key (an interval at its two ends) checked as its job would.
        values = {key.name: [str(v) for v in key.interval] if key.interval else list(key.values)
                  for key in parsed.space.keys}
        check_values(self.config, values, parsed.fixed, check_config,
                     self.hydra_context.config_loader)
        with open_dict(self.config.hydra.sweeper):  # what the search varies, as the grid's params
            self.config.hydra.sweeper.params = {
                k.name: (f"interval({k.interval[0]},{k.interval[1]})" if k.interval
                         else ",".join(k.values)) for k in parsed.space.keys}
        fixed = [o for o in parsed.fixed if not o.partition("=")[0].lstrip("+~").startswith(
            "autotune.")]
        return Setup(parsed.space, settings, fixed, time.time(), parsed.notes, launcher)

    def _here(self, launcher: str, params: Any, arguments: list[str]) -> Here:
        """The machine the jobs run on, as the default space and device-bound values need it."""
        from harness.config.knobs import Here, cuda_here
        from harness.contention import affinity

        if "Slurm" in launcher:
            cpus = self.config.hydra.launcher.get("cpus_per_task")
            return Here(here=False, cpus=cpus if isinstance(cpus, int) else None)
        typed = " ".join([*(f"{k}={v}" for k, v in (params or {}).items()), *arguments])
        cuda = "precision" in typed and cuda_here(self.config)
        cxx = True
        if "compile" in typed:
            from harness.run.compile import find_cxx

            cxx = find_cxx() is not None
        cpus = affinity()
        return Here(here=True, cuda=cuda, cxx=cxx, cpus=len(cpus) if cpus else os.cpu_count())

    def _blocks(self) -> str | None:
        """The model's repeated blocks (harness.run.checkpointing's finder), said in a few words;
        None when it has none. The model is built once here, on the meta device where its
        constructor allows (no memory, no weights read), else as its job builds it."""
        import torch

        from harness.run.build import build_module
        from harness.run.checkpointing import repeated_blocks

        try:
            with torch.device("meta"):
                module = build_module(self.config)
        except Exception:  # a constructor that reads weights or checks its device
            module = build_module(self.config)
        found = repeated_blocks(module)
        if found is None or not found.modules:
            return None
        classes = ", ".join(f"{count} {name}" for name, count in found.classes().items())
        return f"{classes} ({found.found_by})"

    def _shape(self, space: Space) -> Shape:
        from harness.autotune import job as autotune_job
        from harness.autotune.command_line import config_value

        def count(key: str) -> int | None:
            value = config_value(self.config, key)
            return int(value) if value is not None and value.isdigit() else None

        recipe = space.global_batch
        return autotune_job.Shape(train_batches=count("data.train_batches"),
                                  predict_batches=count("data.predict_batches"),
                                  accumulate=count(autotune_job.ACCUMULATE) or 1,
                                  workers=count(autotune_job.WORKERS) or 0,
                                  prefetch=count(autotune_job.PREFETCH) or 2,
                                  global_batch=recipe.size if recipe else None,
                                  ranks=recipe.ranks if recipe else 1,
                                  batch_size=count("batch_size") or 32)

    def _announce(self, setup: Setup, search: Search) -> None:
        from harness.autotune.settings import AUTO
        from harness.config.overrides import AUTOTUNE_STAGE
        from harness.sweep.progress import current

        cap = search.job_cap
        log.info("autotune: %d keys, %d grid points; at most %s jobs (autotune.budget.jobs%s)%s",
                 len(setup.space.keys), setup.space.grid_points(), cap if cap else "any number of",
                 "=auto: a third of the grid" if setup.settings.budget.jobs == AUTO else "",
                 f", {setup.settings.budget.minutes:g} min" if setup.settings.budget.minutes
                 else "")
        sweep = current()
        if sweep is not None:
            sweep.swept = [k.name.lstrip("+~") for k in setup.space.keys] + [AUTOTUNE_STAGE]
            if cap:
                sweep.announce_jobs(cap)

    @staticmethod
    def _job_dir(ret: Any, sweep_dir: Path, idx: int) -> Path:
        """The job's output directory (not JobReturn.working_dir: hydra.job.chdir=false)."""
        try:
            return Path(str(ret.hydra_cfg.hydra.runtime.output_dir))
        except Exception:  # a launcher's stand-in without it: Hydra's default sub-directory
            return sweep_dir / str(idx)

    @staticmethod
    def _say_wave(wave: Wave, search: Search) -> None:
        first = wave.jobs[0]
        log.info("autotune: %s, %d job%s of %d measured steps (%d of %s jobs so far)",
                 wave.stage, len(wave.jobs), "s" if len(wave.jobs) > 1 else "",
                 first.measured_steps, search.jobs_launched, search.job_cap or "any")

    @staticmethod
    def _say_decisions(search: Search, told: int) -> int:
        for decision in search.decisions[told:]:
            if decision.action in SAID:
                log.info("autotune: %s %s %s: %s", decision.stage, decision.action,
                         decision.candidate, decision.why)
        return len(search.decisions)
