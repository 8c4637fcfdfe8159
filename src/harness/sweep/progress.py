"""The sweep this process runs (`current()`; None in a submitit job or a single run): its directory and
sweep.log, progress lines, comparison settings, the `verdict` that sets the exit status, and `end_early`."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import terminal
from harness.config.overrides import REPEAT_KEYS
from harness.config.sweep_keys import swept_values_of
from harness.errors import HarnessError
from harness.judge import TOLERANCE
from harness.launch.signals import restore_sigterm, stop_sweep_on_sigterm
from harness.measured import MAIN_PHASES, USABLE, cautions, duration, is_finite_number

log = logging.getLogger(__name__)
SWEEP_LOG = "sweep.log"  # what the sweep printed: progress, table, the jobs' warnings


def job_outcome(output_dir: Path) -> tuple[str, str]:
    """(status, 'ok: train 1,234.5 ex/s (between steps 3%) contended, inference ...')."""
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
            marks = "".join(f" {caution}" for caution in cautions(result.flags, phase))
            figures.append(f"{phase} {rate:,.1f} ex/s{waited}{marks}")
    text = result.status + (": " + ", ".join(figures) if figures else "")
    if result.status != "ok" and result.reason:
        text += f"{'; ' if figures else ': '}{result.reason[:400]} (see {output_dir}/)"
    return result.status, text


class Progress:
    """Counts the jobs of one sweep and says where it stands."""

    def __init__(self, total: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
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
        if self.durations and left > 0:  # the mean job so far: rough where jobs differ, so "~"
            text += f", ETA ~{duration(sum(self.durations) / len(self.durations) * left)}"
        return text

    def starting(self, number: int, label: str, note: str = "running") -> None:
        log.info("%s %s: %s (%s)", self._job(number), label, note, self._clock())

    def finished(self, number: int, label: str, output_dir: Path, seconds: float) -> None:
        """One line for a finished job (an error when it measured nothing)."""
        self.durations.append(seconds)
        status, outcome = job_outcome(output_dir)
        self.statuses.append(status)
        level = {"ok": logging.INFO, "partial": logging.WARNING}.get(status, logging.ERROR)
        log.log(level, "%s %s: %s [%s; %s]", self._job(number), label, outcome,
                duration(seconds), self._clock())

    def summary(self) -> str:
        counts = ", ".join(f"{self.statuses.count(s)} {s}" for s in dict.fromkeys(self.statuses))
        return (f"{len(self.statuses)} job(s) in {duration(self.clock() - self.started)}"
                + (f" ({counts})" if counts else ""))


@dataclass(frozen=True)
class TableSettings:
    """How the sweep's comparison is made (hydra.callbacks.sweep_report; harness.sweep.table.build)."""

    rows: str | None = None
    baseline: str | None = None
    plot: bool = True
    repeat_keys: tuple[str, ...] = REPEAT_KEYS
    tolerance: float = TOLERANCE  # the verdicts' threshold (sweep.decide_within)


@dataclass(frozen=True)
class Verdict:
    """How the sweep ended, for the command's exit status."""

    exit_code: int
    message: str | None = None


def verdict_of(statuses: list[str]) -> Verdict:
    """Non-zero when no job ended ok or partial."""
    if not statuses:
        return Verdict(1, "the sweep ran no job")
    if "ok" in statuses or "partial" in statuses:
        return Verdict(0)
    if "invalid" not in statuses:
        return Verdict(1, f"all {len(statuses)} jobs of the sweep failed (see comparison.md)")
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))
    return Verdict(1, f"no job of the sweep measured what it was asked ({counts}; see comparison.md)")


@dataclass
class SweepInProgress:
    """The sweep this process runs (the module docstring)."""

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
        """How many jobs the sweep launches, every round included (from the sweeper)."""
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
        """SIGTERM back to what it was, the terminal no longer following; the verdict stays."""
        if self._stop():
            terminal.follow(None)

    def end_early(self, interrupted: bool) -> None:
        """Stopped early (`interrupted`: Ctrl-C or SIGTERM, else an error): the finished jobs' table."""
        if not self._stop() or self.table is None:
            return
        settings, self.table = self.table, None
        if not any(p.is_dir() and p.name != ".submitit" for p in self.directory.glob("*")):
            return  # stopped before its first job: no table to write
        statuses = self._write_table(settings)
        done = sum(status not in ("interrupted", "missing") for status in statuses)
        log.warning("the sweep %s: %s in %s. Rebuild the table once the rest have run: harness-report %s",
                    "was interrupted" if interrupted else "stopped early", f"the table shows the {done}"
                    " job(s) that finished" if done else "no job finished", self.directory, self.directory)

    def _stop(self) -> bool:
        """Whether it ran until now."""
        if not self.running:
            return False
        # Hydra skips on_job_end for a job that raised SystemExit: what follows is the sweep's
        self.running = self.job_running = False
        restore_sigterm(self._sigterm_before)
        return True

    def _write_table(self, settings: TableSettings) -> list[str]:
        """comparison.* and the table of the jobs in the sweep directory; their statuses."""
        try:
            from harness.sweep.report_cli import report_sweep

            comparison = report_sweep(self.directory, **vars(settings))
            return [job.status for job in comparison.jobs]
        except Exception as err:  # the jobs' own results are safe on disk: say so, go on
            from harness.result.jobs import collect

            log.warning("could not build the sweep comparison: %s. Rebuild it with:"
                        " harness-report %s", err, self.directory)
            try:
                return [job.status for job in collect(self.directory).jobs]
            except HarnessError:
                return []


_current: SweepInProgress | None = None  # the sweep this process started last


def current(running: bool = False) -> SweepInProgress | None:
    """The sweep this process runs or, not `running`, the one it ran last (its verdict); else None."""
    found = _current is not None and _current.pid == os.getpid() and (_current.running or not running)
    return _current if found else None


def sweep_of(config: Any) -> SweepInProgress:
    """The sweep of this multirun's `config`, started by the first callback that asks."""
    global _current
    directory = Path(str(config.hydra.sweep.dir))
    if (sweep := current(running=True)) is not None and sweep.directory == directory:
        return sweep
    directory.mkdir(parents=True, exist_ok=True)
    sweep = SweepInProgress(directory, list(swept_values_of(config)), log_path=directory / SWEEP_LOG)
    sweep._sigterm_before = stop_sweep_on_sigterm()
    terminal.follow(sweep)
    _current = sweep
    return sweep


def sweep_progress() -> Progress:
    """The progress of this process's sweep, or a count of its own where none started."""
    return sweep.progress if (sweep := current(running=True)) is not None else Progress()
