"""The Hydra callbacks of a sweep (conf/config.yaml `hydra.callbacks`): `ProgressCallback` says each job's
start and end; `CheckCallback` refuses bad input before the first job; `ComparisonCallback` writes
comparison.* at the end. The sweep's verdict waits in harness.sweep.progress for `harness.cli`."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from typing_extensions import override

from harness import terminal
from harness.config.checks import check
from harness.config.composed import check_added_keys, check_values
from harness.config.knobs import SweepSettings, jobs_run_here, repeat_of
from harness.config.overrides import as_typed
from harness.config.sweep_keys import job_label, split_sweep, swept_values_of
from harness.errors import ConfigError, HarnessError
from harness.sweep.progress import SweepInProgress, TableSettings, current, sweep_of

log = logging.getLogger(__name__)


class ProgressCallback(Callback):
    """Applies `verbose`; in a multirun, the sweep's progress (see the module docstring)."""

    def _apply_verbose(self, config: DictConfig) -> None:
        if check("verbose", config.get("verbose", False), bool, "true"):  # jobs inherit it
            os.environ[terminal.VERBOSE_ENV] = "1"

    @override
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._apply_verbose(config)

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._apply_verbose(config)
        quiet = "" if terminal.verbose() else " (verbose=true prints it here too)"
        log.info("sweep in %s: one line per job; each job's own output is in its cli.log%s",
                 sweep_of(config).directory, quiet)

    @staticmethod
    def _job(config: DictConfig, sweep: SweepInProgress) -> tuple[int, str]:
        """(number, label) of the job `config` is of, in the sweep's progress lines."""
        number = int(config.hydra.job.get("num", 0)) + 1
        return number, job_label(list(config.hydra.overrides.task), sweep.swept)

    @override
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if (sweep := current(running=True)) is not None:  # a job of this process's sweep
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
        if (sweep := current(running=True)) is None:
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
    from hydra.utils import get_class

    from harness.config.knobs import FP16, Here, check_device, cuda_here  # cuda_here: tests plant it

    if not GlobalHydra.instance().is_initialized():
        return  # outside Hydra's multirun (a test's bare config) there is nothing to compose
    sweeper = config.hydra.sweeper
    own = getattr(get_class(str(sweeper._target_)), "check_before_any_job", None)
    if own is not None:  # a sweeper that checks its own (autotune: its space, values, budget)
        own(config)
        return
    values, fixed = split_sweep(as_typed(config.hydra.overrides.task), sweeper.get("params") or {})
    precisions = values.get("precision") or [str(config.get("precision"))]
    here = jobs_run_here(config)  # the local launcher's processes run here too
    cuda = here and any(p.lower() in FP16 for p in precisions) and cuda_here(config)
    check_device({"precision": precisions}, Here(here=here, cuda=cuda))
    check_values(config, values, fixed)


def table_settings(config: DictConfig) -> TableSettings:
    """The sweep's table settings (hydra.callbacks.sweep_report, sweep.decide_within), checked."""
    from harness.sweep.table import check_repeat_keys, check_settings

    node = config.hydra.callbacks.get("sweep_report") or {}
    repeat_keys = check_repeat_keys(node.get("repeat_keys"))  # a ListConfig is a Sequence
    settings = TableSettings(node.get("rows"), node.get("baseline"), bool(node.get("plot", True)),
                             repeat_keys, SweepSettings.read(config).decide_within)
    check_settings(settings.rows, settings.baseline, swept_values_of(config), repeat_keys=repeat_keys)
    return settings


WORLD_KEYS = ("trainer.devices", "trainer.num_nodes")


def _check_scaling_keys(config: DictConfig, repeat_keys: Any) -> None:
    """A scaling study (scaling.mode set) sweeps the world size alone: each point's speed-up is
    over the smallest world's, so another swept key would compare unlike settings."""
    if (config.get("scaling") or {}).get("mode") is None:
        return
    other = [k for k in swept_values_of(config) if k not in WORLD_KEYS and k not in (repeat_keys or ())]
    if other:
        raise ConfigError(other[0], ",".join(swept_values_of(config)[other[0]]),
                          "one value in a scaling study, which sweeps trainer.devices and"
                          " trainer.num_nodes only", f"one scaling study per {other[0]} value")


class CheckCallback(Callback):
    """Refuses a sweep's bad input in one line (exit 2) before anything of it exists: its
    directory (claimed empty, and given back), sweep.log, the MLflow parent run. First in
    conf/config.yaml's callbacks for that."""

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            # `+batchsize=1,2` would fail every job: said once, before the first.
            check_added_keys(as_typed(config.hydra.overrides.task), [k for k in config if k != "hydra"])
            repeat_keys = table_settings(config).repeat_keys
            repeat_of(config)
            _check_scaling_keys(config, repeat_keys)
            threads = swept_values_of(config).get("sweep.threads")
            if threads:  # the sweeper gives every job one count
                raise ConfigError("sweep.threads", ",".join(threads), "one count for the whole"
                                  " sweep: both sides of a comparison run at it",
                                  "sweep.threads=1 (or auto); compare thread counts in two sweeps")
            _check_values(config)
        except HarnessError as err:  # a ConfigError, autotune's SpaceError: exit 2
            log.error("%s", err)
            claimed = Path(str(config.hydra.sweep.dir))  # unique_dir made it, still empty
            with contextlib.suppress(OSError):  # and multirun/DATE when it was the first
                for directory in (claimed, claimed.parent, claimed.parent.parent):
                    directory.rmdir()
            # Hydra turns a callback's Exception into a warning and runs the sweep anyway.
            raise SystemExit(err.exit_status) from None


class ComparisonCallback(Callback):
    """Writes comparison.{md,csv,json,png} into the sweep directory and shows the table."""

    def __init__(self, **_: Any) -> None:
        pass  # its settings are read from the config the sweep starts with (table_settings)

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_of(config).table = table_settings(config)

    @override
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if (sweep := current(running=True)) is not None:
            sweep.write_comparison()
