"""The sweep in progress in this process: one `SweepInProgress`, and the lines it prints.

A multirun's Hydra callbacks (harness.sweep.callbacks) start it when the multirun starts;
`current()` returns it, in the process that runs the sweep only (a submitit job or a
single run has none). It holds:

- where the sweep writes: its directory, and its `sweep.log`, which harness.terminal
  copies every line it prints into; and whether one of its jobs is running in this
  process (`job_running`: the terminal then leaves the job's own output to its cli.log
  and prints each warning once per sweep);
- its progress (`Progress`): job k/N, elapsed time and ETA, one line per finished job
  (status, examples/s and between-steps share, `contended` / `noisy` after a phase so
  flagged, from the job's result.json). Hydra's basic
  launcher runs the jobs in this process and the callbacks say when each starts and ends;
  the submitit launchers run them elsewhere and say the same when they submit and collect
  them; the rounds sweeper announces how many jobs there are;
- its comparison (`table`: rows, baseline, plot, repeat keys) and, once written, its
  `verdict`: the exit status of the command, non-zero only when no job of the sweep
  measured its point;
- how to end it before Hydra does: between its jobs SIGTERM stops it as Ctrl-C does, and
  `harness.cli` calls `end_early`, which writes the table of the jobs that finished.

Its MLflow parent run is found the way its jobs find it, through the sweep directory
(harness.tracking.parent_run). Nothing heavy is imported here: harness.cli asks `current()`
after every command.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import terminal
from harness.measured import MAIN_PHASES, USABLE, is_finite_number

log = logging.getLogger(__name__)
SWEEP_LOG = "sweep.log"  # what the sweep printed: progress, table, the jobs' warnings


def duration(seconds: float) -> str:
    """9.4 s, 1m05s, 2h03m."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def job_outcome(output_dir: Path) -> tuple[str, str]:
    """(status, 'ok: train 1,234.5 ex/s (between steps 3%) contended, inference ...') from
    result.json; a phase's figures end with ` contended` / ` noisy` as the table's cells do."""
    from harness.errors import HarnessError
    from harness.result.store import load_result
    from harness.sweep.verdict import cautions

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
            marks = "".join(f" {caution}" for caution in cautions(result.flags, phase))
            figures.append(f"{phase} {rate:,.1f} ex/s{waited}{marks}")
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
        self.total = total  # the jobs of the sweep, every round included, once announced
        self.clock = clock
        self.started = clock()
        self.durations: list[float] = []
        self.statuses: list[str] = []

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


@dataclass(frozen=True)
class TableSettings:
    """How the sweep's comparison is made (hydra.callbacks.sweep_report)."""

    rows: str | None = None
    baseline: str | None = None
    plot: bool = True
    repeat_keys: tuple[str, ...] | None = None  # None: harness.sweep.table.REPEAT_KEYS


@dataclass(frozen=True)
class Verdict:
    """How the sweep ended, for the command's exit status."""

    exit_code: int
    message: str | None = None


def verdict_of(statuses: list[str]) -> Verdict:
    """Non-zero when no job of the sweep ended ok or partial (or none ran)."""
    if not statuses:
        return Verdict(1, "the sweep ran no job")
    if "ok" in statuses or "partial" in statuses:
        return Verdict(0)
    if "invalid" not in statuses:
        return Verdict(1, f"all {len(statuses)} jobs of the sweep failed (see comparison.md)")
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))
    return Verdict(1, f"no job of the sweep measured what it was asked ({counts};"
                      " see comparison.md)")


@dataclass
class SweepInProgress:
    """The sweep this process runs; see the module docstring."""

    directory: Path
    swept: list[str] = field(default_factory=list)  # the keys it varies: they name its jobs
    progress: Progress = field(default_factory=Progress)
    log_path: Path | None = None  # sweep.log; None once it cannot be written
    job_running: bool = False
    printed_warnings: set[str] = field(default_factory=set)  # each is printed once per sweep
    table: TableSettings | None = None  # set by the comparison callback; None once written
    verdict: Verdict | None = None
    running: bool = True
    pid: int = field(default_factory=os.getpid)
    _job_started: float = 0.0
    _sigterm_before: Any = None

    def announce_jobs(self, total: int) -> None:
        """The sweeper tells how many jobs the sweep launches, every round included."""
        self.progress.total = total

    def job_starting(self, number: int, label: str) -> None:
        self.progress.starting(number, label)
        self._job_started = time.monotonic()
        self.job_running = True

    def job_ended(self, number: int, label: str, output_dir: Path) -> None:
        self.job_running = False
        self.progress.finished(number, label, output_dir, time.monotonic() - self._job_started)

    def write_comparison(self) -> None:
        """At the sweep's end: comparison.* and the table, then the verdict."""
        settings, self.table = self.table, None
        if settings is not None:
            self.verdict = verdict_of(self._write_table(settings))

    def end(self) -> None:
        """The sweep is over: SIGTERM back to what it was, the terminal no longer follows it.
        Its verdict stays, for harness.cli."""
        if not self.running:
            return
        self._stop()
        terminal.follow(None)

    def end_early(self, interrupted: bool) -> None:
        """The sweep stopped before its end (`interrupted`: by Ctrl-C or SIGTERM, else by an
        error: a setting refused at its start, a job that exited): the table of the jobs
        that finished, and the command that rebuilds it. harness.cli calls this; Hydra does
        not. What is said after it still goes to sweep.log."""
        if not self.running:
            return
        self._stop()
        settings, self.table = self.table, None
        if settings is None:
            return
        if not any(p.is_dir() and p.name != ".submitit" for p in self.directory.glob("*")):
            return  # stopped before its first job: no table to write
        statuses = self._write_table(settings)
        done = sum(status not in ("interrupted", "missing") for status in statuses)
        log.warning("the sweep %s: %s in %s. Rebuild the table once the rest have run:"
                    " harness-report %s", "was interrupted" if interrupted else "stopped early",
                    f"the table shows the {done} job(s) that finished" if done
                    else "no job finished", self.directory, self.directory)

    def _stop(self) -> None:
        from harness.launch.signals import restore_sigterm

        # Hydra skips on_job_end for a job that raised SystemExit (an interrupted job): the
        # job is over, and what follows is the sweep's to print.
        self.running = self.job_running = False
        restore_sigterm(self._sigterm_before)

    def _write_table(self, settings: TableSettings) -> list[str]:
        """comparison.* and the table of the jobs in the sweep directory; their statuses."""
        try:
            from harness.sweep.report_cli import report_sweep

            comparison = report_sweep(self.directory, rows=settings.rows,
                                      baseline=settings.baseline, plot=settings.plot,
                                      repeat_keys=settings.repeat_keys)
            return [job.status for job in comparison.jobs]
        except Exception as err:  # the jobs' own results are safe on disk: say so, go on
            log.warning("could not build the sweep comparison: %s. Rebuild it with:"
                        " harness-report %s", err, self.directory)
            return _statuses_on_disk(self.directory)


_current: SweepInProgress | None = None  # the sweep this process started last


def current() -> SweepInProgress | None:
    """The sweep this process runs (or ran last: its verdict); None in any other process."""
    if _current is None or _current.pid != os.getpid():
        return None
    return _current


def sweep_of(config: Any) -> SweepInProgress:
    """The sweep of this multirun's composed `config`, started by the first callback that
    asks: its directory made, SIGTERM turned into a stop between jobs (the table of the
    jobs that finished is still written), the terminal following it."""
    from harness.config.sweep_keys import swept_keys_of
    from harness.launch.signals import stop_sweep_on_sigterm

    global _current
    directory = Path(str(config.hydra.sweep.dir))
    sweep = current()
    if sweep is not None and sweep.running and sweep.directory == directory:
        return sweep
    directory.mkdir(parents=True, exist_ok=True)
    sweep = SweepInProgress(directory, swept_keys_of(config), log_path=directory / SWEEP_LOG)
    sweep._sigterm_before = stop_sweep_on_sigterm()
    terminal.follow(sweep)
    _current = sweep
    return sweep


def sweep_progress() -> Progress:
    """The progress of this process's sweep (a launcher's lines add to the callbacks'), or
    a count of its own where no callback started one."""
    sweep = current()
    return sweep.progress if sweep is not None and sweep.running else Progress()


def _statuses_on_disk(sweep_dir: Path) -> list[str]:
    from harness.errors import HarnessError
    from harness.sweep.collect import collect

    try:
        return [job.status for job in collect(sweep_dir).jobs]
    except HarnessError:
        return []
