"""The Hydra callbacks of a sweep (conf/config.yaml `hydra.callbacks`): `ProgressCallback` says
each job's start and end; `ComparisonCallback` refuses bad input before the first job and writes
comparison.* at the end. The sweep's verdict waits in harness.sweep.progress for `harness.cli`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, ListConfig, OmegaConf
from typing_extensions import override

from harness import terminal
from harness.sweep.progress import SweepInProgress, TableSettings, current, sweep_of

log = logging.getLogger(__name__)


class ProgressCallback(Callback):
    """Applies `verbose`; in a multirun, the sweep's progress (see the module docstring)."""

    def _apply_verbose(self, config: DictConfig) -> None:
        from harness.config.checks import check

        if check("verbose", config.get("verbose", False), bool, "true"):  # jobs inherit it
            os.environ[terminal.VERBOSE_ENV] = "1"

    @override
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._apply_verbose(config)

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._apply_verbose(config)
        sweep = sweep_of(config)
        quiet = "" if terminal.verbose() else " (verbose=true prints it here too)"
        log.info("sweep in %s: one line per job; each job's own output is in its cli.log%s",
                 sweep.directory, quiet)

    @staticmethod
    def _job(config: DictConfig, sweep: SweepInProgress) -> tuple[int, str]:
        """(number, label) of the job `config` is of, in the sweep's progress lines."""
        from harness.config.sweep_keys import job_label

        number = int(config.hydra.job.get("num", 0)) + 1
        return number, job_label(list(config.hydra.overrides.task), sweep.swept)

    @override
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = current()
        if sweep is not None and sweep.running:  # a job of this process's sweep
            sweep.job_starting(*self._job(config, sweep))

    @override
    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        output_dir = Path(str(config.hydra.runtime.output_dir))
        sweep = current()
        if sweep is None:  # a single run (or a job a submitit launcher started elsewhere)
            self._say_hidden(output_dir / f"{config.hydra.job.name}.log")
        elif sweep.running:
            sweep.job_ended(*self._job(config, sweep), output_dir)

    @override
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = current()
        if sweep is None or not sweep.running:
            return
        if sweep.progress.statuses:  # launchers that run the jobs elsewhere keep their own count
            log.info("sweep done: %s", sweep.progress.summary())
        self._say_hidden("the jobs' cli.log")
        sweep.end()

    @staticmethod
    def _say_hidden(where: Any) -> None:
        count = terminal.hidden_warnings(reset=True)
        if count and not terminal.verbose():
            log.info("%d Python warning(s) (from libraries) are in %s only; verbose=true"
                     " prints them", count, where)


def _check_values(config: DictConfig) -> None:
    from hydra.core.global_hydra import GlobalHydra

    from harness.config.composed import check_values
    from harness.config.knobs import FP16, Here, check_device, cuda_here
    from harness.config.overrides import as_typed
    from harness.config.sweep_keys import split_sweep

    sweeper = config.hydra.get("sweeper") or {}
    if "Autotune" in str(sweeper.get("_target_", "")) or not GlobalHydra.instance().is_initialized():
        return  # outside Hydra's multirun (a test's bare config) there is nothing to compose
    values, fixed = split_sweep(as_typed(config.hydra.overrides.task), sweeper.get("params") or {})
    precisions = values.get("precision") or [str(config.get("precision"))]
    launcher = str(OmegaConf.select(config, "hydra.launcher._target_", default="")).lower()
    here = "slurm" not in launcher  # the local launcher's processes run here too
    cuda = here and any(p.lower() in FP16 for p in precisions) and cuda_here(config)
    check_device({"precision": precisions}, Here(here=here, cuda=cuda))
    check_values(config, values, fixed)


class ComparisonCallback(Callback):
    """Writes comparison.{md,csv,json,png} into the sweep directory and shows the table."""

    def __init__(self, rows: str | None = None, baseline: str | None = None,
                 plot: bool = True, repeat_keys: Any = None) -> None:
        self.settings = TableSettings(rows, baseline, plot)
        self._repeat_keys = repeat_keys  # checked when the sweep starts: one line, exit 2

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from harness.config.composed import check_added_keys
        from harness.config.overrides import as_typed
        from harness.config.sweep_keys import swept_values_of
        from harness.errors import ConfigError
        from harness.sweep.table import check_repeat_keys, check_settings

        try:
            # `+batchsize=1,2` would fail every job: said once, before the first.
            check_added_keys(as_typed(config.hydra.overrides.task),
                             [k for k in config if k != "hydra"])
            plain = self._repeat_keys  # as Hydra hands it over: a ListConfig, or None
            repeat_keys = check_repeat_keys(
                OmegaConf.to_container(plain) if isinstance(plain, ListConfig) else plain)
            check_settings(self.settings.rows, self.settings.baseline, swept_values_of(config),
                           repeat_keys=repeat_keys)
            from harness.sweep.rounds import SweepSettings, repeat_of

            repeat_of(config)
            threads = swept_values_of(config).get("sweep.threads")
            if threads:  # the sweeper gives every job one count
                raise ConfigError("sweep.threads", ",".join(threads), "one count for the whole"
                                  " sweep: both sides of a comparison run at it",
                                  "sweep.threads=1 (or auto); compare thread counts in two sweeps")
            self.settings = replace(self.settings, repeat_keys=repeat_keys,
                                    tolerance=SweepSettings.read(config).decide_within)
            _check_values(config)
        except ConfigError as err:
            log.error("%s", err)
            # Hydra turns a callback's Exception into a warning and runs the sweep anyway.
            raise SystemExit(err.exit_status) from None
        sweep_of(config).table = self.settings

    @override
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = current()
        if sweep is not None and sweep.running:
            sweep.write_comparison()
