"""The autotune sweeper (`harness -m sweep=autotune`): the fastest setting that fits, found in
waves of jobs (docs/autotune.md).

The search itself is harness.autotune's pure core; this sweeper only turns its waves into
job overrides, launches each wave through the configured launcher (Hydra's basic launcher
in this process, or `hydra/launcher=local|slurm`: one submission per wave), reads each job's
result.json back (harness.autotune.reading) and writes autotune.json after every wave.
Before the first job it reads the space (harness.autotune.command_line) and composes the
config of every value with the checks a job makes (harness.run.job.check_config): bad input
is one line naming the key, exit 2, and no job runs.

It prints no verdict itself: Hydra's callbacks run after `sweep` returns, and the sweep's
comparison table comes first; harness.sweep.report_cli then rebuilds the verdict from the
job directories (harness.autotune.report), as `harness-report DIR` does. Ctrl-C or SIGTERM
(a KeyboardInterrupt here) leaves autotune.json marked interrupted, with the best so far.

Hydra imports every plugin module when any `harness` command starts: harness.autotune (and
the result schema it reads with) loads only when a sweep starts.
"""

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
    """See the module docstring. `max_batch_size` is the harness sweeper's key, which
    `sweep=autotune` inherits from conf/hydra/sweeper/harness.yaml: accepted, unused."""

    def __init__(self, params: Any = None, max_batch_size: Any = None) -> None:
        self.params = params
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
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

        assert self.config is not None
        setup = self._setup(list(arguments))  # bad input: a ConfigError, before any job
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / MULTIRUN_FILE)
        setup.write(sweep_dir)
        for note in setup.notes:
            log.info("autotune: %s", note)
        search = Search(setup.space, setup.settings)
        self._announce(setup, search)
        shape = self._shape()
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

    # -- before the first job --------------------------------------------------------------
    def _setup(self, arguments: list[str]) -> Setup:
        from harness.autotune.command_line import parse
        from harness.autotune.replay import Setup
        from harness.autotune.settings import AUTO, SettingError, Settings
        from harness.errors import ConfigError

        assert self.config is not None
        raw = self.config.get("autotune")
        try:
            settings = Settings.from_mapping(
                OmegaConf.to_container(raw, resolve=True) if raw is not None else None)
        except SettingError as err:
            raise ConfigError(err.key, err.value, err.expected, err.fix) from None
        launcher = type(self.launcher).__name__
        in_process = launcher == "BasicLauncher"  # Hydra's own: the jobs run in this process
        if settings.probes == AUTO:  # the ladder job by job where that is free and prunes
            settings = settings.resolved(probes="job" if in_process else "stage")
        if settings.warmup_job == AUTO:  # a process's first job is slower: in process, one
            settings = settings.resolved(warmup_job=in_process)
        params = OmegaConf.to_container(self.params, resolve=False) if self.params else {}
        parsed = parse(params, arguments, self.config, settings, self._here(launcher, params,
                                                                           arguments))
        self._check_profiler()
        self._check_values(parsed.space, parsed.fixed)
        with open_dict(self.config.hydra.sweeper):  # what the search varies, as the grid's params
            self.config.hydra.sweeper.params = {
                k.name: (f"interval({k.interval[0]},{k.interval[1]})" if k.interval
                         else ",".join(k.values)) for k in parsed.space.keys}
        fixed = [o for o in parsed.fixed if not o.partition("=")[0].lstrip("+~").startswith(
            "autotune.")]
        return Setup(parsed.space, settings, fixed, time.time(), parsed.notes, launcher)

    def _here(self, launcher: str, params: Any, arguments: list[str]) -> Here:
        """The machine the jobs run on, as far as the default space and device-bound values
        need it."""
        from harness.autotune.command_line import Here, config_value

        assert self.config is not None
        if "Slurm" in launcher:
            cpus = self.config.hydra.launcher.get("cpus_per_task")
            return Here(here=False, cpus=cpus if isinstance(cpus, int) else None)
        typed = " ".join([*(f"{k}={v}" for k, v in (params or {}).items()), *arguments])
        cuda = False
        if "precision" in typed:
            import torch

            accelerator = str(config_value(self.config, "trainer.accelerator") or "auto")
            cuda = torch.cuda.is_available() and accelerator in ("auto", "gpu", "cuda")
        cxx = True
        if "compile" in typed:
            from harness.run.compile import find_cxx

            cxx = find_cxx() is not None
        affinity = getattr(os, "sched_getaffinity", None)
        return Here(here=True, cuda=cuda, cxx=cxx,
                    cpus=len(affinity(0)) if affinity else os.cpu_count())

    def _check_profiler(self) -> None:
        from harness.autotune.command_line import SpaceError

        assert self.config is not None
        profiler = self.config.get("profiler")
        if not hasattr(profiler, "keys") or "speed" not in profiler:
            raise SpaceError("profiler: autotune ranks by the speed preset's examples/s, and this"
                             " profiler list has no speed. Fix: keep speed in it, e.g."
                             " profiler=[speed,diagnose]")

    def _check_values(self, space: Space, fixed: list[str]) -> None:
        """Each value of each key composed into the config and checked as a job checks its
        config (knobs, `+key` typos, targets and their arguments): one line, exit 2. An
        interval is checked at its two ends."""
        from hydra.core.hydra_config import HydraConfig

        from harness.run.job import check_config

        assert self.config is not None and self.hydra_context is not None
        loader, hydra = self.hydra_context.config_loader, HydraConfig.instance()
        before = hydra.cfg
        try:
            for key in space.keys:
                values = [str(v) for v in key.interval] if key.interval else list(key.values)
                for value in values:
                    overrides = [*fixed, f"{key.name}={value}"]
                    composed = loader.load_sweep_config(self.config, overrides)
                    hydra.set_config(composed)  # ${hydra:...} resolves as in the job
                    check_config(composed, overrides)
        finally:
            hydra.cfg = before

    def _shape(self) -> Shape:
        from harness.autotune import job as autotune_job
        from harness.autotune.command_line import config_value

        assert self.config is not None

        def count(key: str) -> int | None:
            value = config_value(self.config, key)
            return int(value) if value is not None and value.isdigit() else None

        return autotune_job.Shape(train_batches=count("data.train_batches"),
                                  predict_batches=count("data.predict_batches"),
                                  accumulate=count(autotune_job.ACCUMULATE) or 1,
                                  workers=count(autotune_job.WORKERS) or 0,
                                  prefetch=count(autotune_job.PREFETCH) or 2)

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

    # -- while it runs -----------------------------------------------------------------------
    @staticmethod
    def _job_dir(ret: Any, sweep_dir: Path, idx: int) -> Path:
        """The job's output directory: Hydra's record of it (JobReturn.working_dir is the
        working directory, which hydra.job.chdir=false leaves unchanged)."""
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
