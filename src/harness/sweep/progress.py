"""What a sweep shows while it runs: job k/N, elapsed time and ETA, one line per finished job.

Hydra's basic launcher runs the jobs in this process: `ProgressCallback` says when a job
starts and, when it ends, its status, examples/s and between-steps share (from its
result.json); while a job runs, the terminal leaves the job's own output to its cli.log
(harness.terminal.job_running). The submitit launchers run the jobs elsewhere and say the
same through `Progress` when they submit and collect them. The callback also applies the
top-level `verbose` knob, in single runs too.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from typing_extensions import override

from harness import terminal
from harness.measured import MAIN_PHASES, USABLE, is_finite_number

log = logging.getLogger(__name__)
SWEEP_LOG = "sweep.log"  # what the sweep printed: progress, table, the jobs' warnings
_sweep: dict[str, Any] = {}  # this process's sweep: its job count and its Progress


def announce_jobs(total: int) -> None:
    """The sweeper tells how many jobs the sweep launches, every round included."""
    _sweep["jobs"] = total


def announced_jobs() -> int | None:
    return _sweep.get("jobs")


def current() -> Progress:
    """The Progress of this process's sweep (a launcher's lines add to the callback's)."""
    if "progress" not in _sweep:
        _sweep["progress"] = Progress()
    return _sweep["progress"]


def duration(seconds: float) -> str:
    """9.4 s, 1m05s, 2h03m."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def job_outcome(output_dir: Path) -> tuple[str, str]:
    """(status, 'ok: train 1,234.5 ex/s (between steps 3%), inference ...') from result.json."""
    from harness.errors import HarnessError
    from harness.result.store import load_result

    try:
        result = load_result(output_dir)
    except HarnessError as err:
        return "no result", f"no result ({err})"
    figures = []
    # an invalid job's figures measured something else than its label: no number for it
    for phase in MAIN_PHASES if result.status in USABLE else ():
        rate = result.metrics.get(f"{phase}_examples_per_second")
        if is_finite_number(rate):
            wait = result.metrics.get(f"{phase}_between_steps_share")
            waited = f" (between steps {wait:.0%})" if is_finite_number(wait) else ""
            figures.append(f"{phase} {rate:,.1f} ex/s{waited}")
    text = result.status
    if figures:
        text += ": " + ", ".join(figures)
    if result.status != "ok" and result.reason:
        text += f"{'; ' if figures else ': '}{result.reason[:400]} (see {output_dir}/)"
    return result.status, text


class Progress:
    """Counts the jobs of one sweep and says where it stands (through logging)."""

    def __init__(self, total: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._total = total
        self.clock = clock
        self.started = clock()
        self.durations: list[float] = []
        self.statuses: list[str] = []

    @property
    def total(self) -> int | None:
        return self._total or announced_jobs()

    def _job(self, number: int) -> str:
        return f"job {number}/{self.total}" if self.total else f"job {number}"

    def _clock(self) -> str:
        text = f"elapsed {duration(self.clock() - self.started)}"
        left = (self.total or 0) - len(self.durations)
        if self.durations and left > 0:
            # The mean job so far: rough where jobs differ much (batch sizes), so "~".
            eta = sum(self.durations) / len(self.durations) * left
            text += f", ETA ~{duration(eta)}"
        return text

    def starting(self, number: int, label: str, note: str = "running") -> None:
        log.info("%s %s: %s (%s)", self._job(number), label, note, self._clock())

    def finished(self, number: int, label: str, output_dir: Path, seconds: float) -> str:
        """One line for a finished job; returns its status."""
        self.durations.append(seconds)
        status, outcome = job_outcome(output_dir)
        self.statuses.append(status)
        # A job that measured nothing is an error line; one that measured part, a warning.
        level = {"ok": logging.INFO, "partial": logging.WARNING}.get(status, logging.ERROR)
        log.log(level, "%s %s: %s [%s; %s]", self._job(number), label, outcome,
                duration(seconds), self._clock())
        return status

    def summary(self) -> str:
        counts = ", ".join(f"{self.statuses.count(s)} {s}" for s in dict.fromkeys(self.statuses))
        return (f"{len(self.statuses)} job(s) in {duration(self.clock() - self.started)}"
                + (f" ({counts})" if counts else ""))


def check_verbose(config: DictConfig) -> bool:
    from harness.config.checks import boolean

    return boolean("verbose", config.get("verbose", False))


class ProgressCallback(Callback):
    """Applies `verbose`; in a multirun, the lines above (see the module docstring)."""

    def __init__(self) -> None:
        self.pid: int | None = None  # the process that runs the sweep (not a submitit job)
        self.swept: list[str] = []
        self.progress: Progress | None = None
        self._job_started = 0.0

    def _apply_verbose(self, config: DictConfig) -> None:
        if check_verbose(config):  # the jobs, their DDP ranks and submitit jobs inherit it
            os.environ[terminal.VERBOSE_ENV] = "1"

    @override
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._apply_verbose(config)

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from harness.config.sweep_keys import swept_keys_of

        self._apply_verbose(config)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        terminal.sweep_started(sweep_dir / SWEEP_LOG)
        self.pid, self.swept, self.progress = os.getpid(), swept_keys_of(config), Progress()
        _sweep["progress"] = self.progress
        quiet = "" if terminal.verbose() else " (verbose=true prints it here too)"
        log.info("sweep in %s: one line per job; each job's own output is in its cli.log%s",
                 sweep_dir, quiet)

    def _ours(self) -> bool:
        return self.progress is not None and self.pid == os.getpid()

    def _label(self, config: DictConfig) -> tuple[int, str]:
        from harness.config.sweep_keys import job_label

        number = int(config.hydra.job.get("num", 0)) + 1
        return number, job_label(list(config.hydra.overrides.task), self.swept)

    @override
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not self._ours():
            return
        assert self.progress is not None
        self.progress.starting(*self._label(config))
        self._job_started = time.monotonic()
        terminal.job_running(True)

    @override
    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        output_dir = Path(str(config.hydra.runtime.output_dir))
        if self.pid is None:  # a single run
            self._say_hidden(output_dir / f"{config.hydra.job.name}.log")
            return
        if not self._ours():
            return
        assert self.progress is not None
        terminal.job_running(False)
        self.progress.finished(*self._label(config), output_dir,
                               time.monotonic() - self._job_started)

    @override
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if not self._ours():
            return
        assert self.progress is not None
        if self.progress.statuses:  # launchers that run the jobs elsewhere keep their own count
            log.info("sweep done: %s", self.progress.summary())
        self._say_hidden("the jobs' cli.log")
        terminal.sweep_ended()
        self.pid = self.progress = None
        _sweep.clear()

    @staticmethod
    def _say_hidden(where: Any) -> None:
        count = terminal.hidden_warnings(reset=True)
        if count and not terminal.verbose():
            log.info("%d Python warning(s) (from libraries) are in %s only; verbose=true"
                     " prints them", count, where)
