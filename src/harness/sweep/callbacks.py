"""The Hydra callbacks of a sweep (conf/config.yaml, `hydra.callbacks`): Hydra's hooks, told
to the sweep in progress (harness.sweep.progress).

- `ProgressCallback` (`progress`) applies the top-level `verbose` knob, in single runs too;
  in a multirun it starts the sweep, says when each job of an in-process sweep starts
  and ends, and ends the sweep (Hydra calls it last: its sweep.log starts before and ends
  after the other callbacks' lines).
- `ComparisonCallback` (`sweep_report`) checks its settings (`rows`, `baseline`,
  `repeat_keys`) when the sweep starts, against the keys and values it varies, so a typo or
  a row over a pooled key costs no compute; when
  the multirun ends it writes comparison.{md,csv,json,png} into the sweep directory and
  shows the table. It reads the jobs back from disk (Hydra gives callbacks no job return
  values, and other launchers run jobs elsewhere), so it sees exactly what
  `harness-report` sees.

A callback cannot end the command without cutting short the callbacks after it: the
sweep's verdict (exit 1 only when no job measured its point) stays on the sweep for
`harness.cli`. A sweep stopped before its end (Ctrl-C, SIGTERM) never reaches
`on_multirun_end`: harness.cli ends it instead (SweepInProgress.end_early).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from typing_extensions import override

from harness import terminal
from harness.sweep.progress import TableSettings, current, sweep_of

log = logging.getLogger(__name__)


def check_verbose(config: DictConfig) -> bool:
    from harness.config.checks import boolean

    return boolean("verbose", config.get("verbose", False))


class ProgressCallback(Callback):
    """Applies `verbose`; in a multirun, the sweep's progress (see the module docstring)."""

    def _apply_verbose(self, config: DictConfig) -> None:
        if check_verbose(config):  # the jobs, their DDP ranks and submitit jobs inherit it
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
    def _job(config: DictConfig) -> tuple[int, str]:
        """(number, label) of the job `config` is of, in the sweep's progress lines."""
        from harness.config.sweep_keys import job_label

        sweep = current()
        number = int(config.hydra.job.get("num", 0)) + 1
        return number, job_label(list(config.hydra.overrides.task), sweep.swept if sweep else [])

    @override
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = current()
        if sweep is not None and sweep.running:  # a job of this process's sweep
            sweep.job_starting(*self._job(config))

    @override
    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        output_dir = Path(str(config.hydra.runtime.output_dir))
        sweep = current()
        if sweep is None:  # a single run (or a job a submitit launcher started elsewhere)
            self._say_hidden(output_dir / f"{config.hydra.job.name}.log")
        elif sweep.running:
            sweep.job_ended(*self._job(config), output_dir)

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


def _plain(value: Any) -> Any:
    """A ListConfig as Hydra hands it to the callback, as a list (anything else as it is)."""
    from omegaconf import ListConfig, OmegaConf

    return OmegaConf.to_container(value) if isinstance(value, ListConfig) else value


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
            repeat_keys = check_repeat_keys(_plain(self._repeat_keys))
            check_settings(self.settings.rows, self.settings.baseline, swept_values_of(config),
                           repeat_keys=repeat_keys)
            self.settings = replace(self.settings, repeat_keys=repeat_keys)
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
