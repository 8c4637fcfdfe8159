"""What harness tells the user, through logging, so a job's log file holds all of it.

Every module logs to its own `harness.*` logger. In a Hydra job the config
`conf/hydra/job_logging/harness.yaml` sends each record to two handlers: the job's
log file (`cli.log` in the run directory) and `ConsoleHandler`, which prints:

- harness's own messages as one line on stderr: `harness: warning: ...`;
- tables and results (`show`) with rich on stdout, and as plain text in the log;
- other libraries' warnings and errors as `[name][LEVEL] ...` on stdout.

What the terminal leaves to the log (all of it printed with `verbose=true`, the
HARNESS_VERBOSE variable): other libraries' INFO lines (Lightning's banner and tips,
MLflow creating its database), Python warnings (`quiet_libraries` routes them into
logging: Lightning's `srun` hint, deprecations), Hydra's "Launching N jobs" lines
(the sweep's progress lines say it better), and, while a job of an in-process sweep
runs, the job's own tables and notes: the sweep prints one line per job instead, and
each distinct warning once. The sweep in progress (harness.sweep.progress) is an object
of its own that the terminal follows (`follow`): it says whether a job runs, where its
sweep.log is, and which warnings were printed.

Libraries that write to the process's stderr file descriptor themselves never pass
through logging: torch's C++ side (kineto's `USDT:... profiler_start` lines, c10's
`[W... CPUAllocator.cpp:245] ...` warnings), torch's own log handler (TorchDynamo's
`W1125 ...` lines, bound to the `sys.stderr` of the moment torch was imported), a library's
`print(file=sys.stderr)`. For the length of a job (`libraries_to_log`, entered by
harness.cli) file descriptor 2 is the job's log file, and harness's own
`harness: ...` lines go to a copy of the terminal's descriptor (`own_stream`). Child
processes started in the job (Lightning's DDP ranks) inherit the log as their stderr.

Outside Hydra (harness-report, harness-mlflow-upload, a user's own script)
`use_console()` installs the console handler once. Nothing heavy is imported
here: rich loads only when a table is shown.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, TextIO

PREFIX = "harness"
OUTPUT = "harness.output"  # the logger of tables and results
VERBOSE_ENV = "HARNESS_VERBOSE"
_OWN = ("harness", "hydra_plugins.harness_launcher")
_SHOWN = ("hydra",)  # other loggers whose INFO lines show: Hydra's own messages
# Log only, unless verbose: Python warnings (logging.captureWarnings), and the basic
# launcher's "Launching N jobs locally" / "#0 : ..." lines, which the sweep's progress
# lines (harness.sweep.progress) replace.
_LOG_ONLY = ("py.warnings", "hydra._internal.core_plugins.basic_launcher")
# The job's own ending ("failed: ..."), which the sweep's line for the job already says.
_JOB_ENDING = ("harness.cli.job",)
_SHOWN_MARK = "harness_shown"  # set on a record the console printed (for SweepLogHandler)
# Printed even while a sweep's job runs: a job's interruption (SIGTERM, preemption) ends the
# whole sweep, and no job line will say it.
_ALWAYS = ("harness.launch.job_scope",)
FILE_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # as in job_logging


def _under(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(f"{root}.") for root in roots)


def _own(record: logging.LogRecord) -> bool:
    return _under(record.name, _OWN)


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


class FollowedSweep(Protocol):
    """What the terminal reads of the sweep in progress (harness.sweep.progress)."""

    job_running: bool  # a job of the sweep runs in this process
    log_path: Path | None  # sweep.log; the terminal sets it to None when it cannot write it
    printed_warnings: set[str]  # the warnings printed while its jobs ran, each once


_sweep: FollowedSweep | None = None  # the sweep the terminal follows, if any
_hidden_warnings = 0  # Python warnings left to the log since the last reset


def follow(sweep: FollowedSweep | None) -> None:
    """A sweep starts (its object) or ends (None): see the module docstring."""
    global _sweep
    _sweep = sweep


def hidden_warnings(reset: bool = False) -> int:
    """Python warnings the terminal left to the log since the last reset."""
    global _hidden_warnings
    count = _hidden_warnings
    if reset:
        _hidden_warnings = 0
    return count


def shown(record: logging.LogRecord) -> bool:
    """Whether the terminal prints `record` (the log file gets it anyway). While a job of a
    sweep runs, a warning it prints is remembered, and not printed again."""
    if verbose() or _under(record.name, _ALWAYS):
        return True
    if _under(record.name, _LOG_ONLY):
        return False
    own = _own(record)
    if _sweep is not None and _sweep.job_running:
        if record.levelno < logging.WARNING or _under(record.name, _JOB_ENDING):
            return False
        if record.getMessage() in _sweep.printed_warnings:  # the same warning, the next job
            return False
        _sweep.printed_warnings.add(record.getMessage())
        return True
    if getattr(record, "renderable", None) is not None or own:
        return True
    return record.levelno >= logging.WARNING or (
        _under(record.name, _SHOWN) and record.levelno == logging.INFO)


class ConsoleHandler(logging.Handler):
    """The terminal side of harness's logging; see the module docstring."""

    def __init__(self, level: int = logging.NOTSET, prefix: str = PREFIX) -> None:
        super().__init__(level)
        self.prefix = prefix

    def emit(self, record: logging.LogRecord) -> None:
        global _hidden_warnings
        try:
            if not shown(record):
                if record.name == "py.warnings":
                    _hidden_warnings += 1
                return
            setattr(record, _SHOWN_MARK, True)
            renderable = getattr(record, "renderable", None)
            if renderable is not None:
                # A line of text is not cut at the terminal's width: a path stays one word.
                _rich_console().print(renderable, soft_wrap=isinstance(renderable, str))
            elif _own(record):
                level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
                print(f"{self.prefix}: {level}{record.getMessage()}", file=own_stream(), flush=True)
            elif _under(record.name, _SHOWN) and record.levelno == logging.INFO:
                print(record.getMessage(), flush=True)
            else:
                # Another library's record: its first line (a driver's error can run to a
                # hundred lines); the log file keeps all of it.
                lines = record.getMessage().splitlines() or [""]
                more = " [...]" if len(lines) > 1 else ""
                print(f"[{record.name}][{record.levelname}] {lines[0]}{more}", flush=True)
        except BrokenPipeError:  # `| head` closed the pipe: nothing more to print
            pass
        except Exception:
            self.handleError(record)


class LogFile(logging.FileHandler):
    """The run's log file (cli.log, sweep.log). A write that fails (disk full, file gone) is
    said once, as one line on the terminal, and ends the file: logging's default is a
    traceback on stderr for every record that follows."""

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = None) -> None:
        super().__init__(filename, mode=mode, encoding=encoding)
        self.broken = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.broken:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        if self.broken:
            return
        self.broken = True
        err = sys.exc_info()[1]
        why = getattr(err, "strerror", None) or err
        print(f"{PREFIX}: warning: cannot write the log file {self.baseFilename} ({why});"
              " messages from here on reach the terminal only", file=own_stream(), flush=True)
        with contextlib.suppress(OSError):
            self.close()


_terminal: TextIO | None = None  # the terminal's stderr while fd 2 is a job's log


def own_stream() -> TextIO:
    """Where harness's own `harness: ...` lines go: the terminal's stderr, also while a job
    has pointed file descriptor 2 at its log (`libraries_to_log`)."""
    return _terminal or sys.stderr


def _job_log() -> LogFile | None:
    """The log file Hydra's job logging gave the root logger (cli.log, ddp_rank<N>.log)."""
    return next((h for h in logging.getLogger().handlers
                 if isinstance(h, LogFile) and not h.broken), None)


@contextlib.contextmanager
def libraries_to_log() -> Iterator[None]:
    """For the block, whatever writes to file descriptor 2 past logging (see the module
    docstring) appends to the job's log; harness's own lines still reach the terminal. The
    log is opened O_APPEND like logging's own handle, so the two writers interleave by whole
    writes. Nothing moves with verbose=true, outside a Hydra job (no job log: a user's own
    script keeps its stderr) or when fd 2 already points at a log."""
    global _terminal
    log_file = _job_log()
    if verbose() or log_file is None or _terminal is not None:
        yield
        return
    try:
        sys.stderr.flush()
        log_fd = os.open(log_file.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except (OSError, ValueError):  # no log to write to: the terminal keeps everything
        yield
        return
    saved = os.dup(2)
    terminal = os.fdopen(saved, "w", buffering=1, encoding=sys.stderr.encoding or "utf-8",
                         errors="backslashreplace")
    os.dup2(log_fd, 2)
    os.close(log_fd)
    _terminal = terminal
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(terminal.fileno(), 2)
        _terminal = None
        terminal.close()


def end_job_log() -> None:
    """The job's log file takes no more records: the job ended the process (an interrupted
    sweep), and what the process says next (the table of the jobs that finished) is the
    sweep's, for sweep.log. Hydra would drop the handler after a job that returns."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, LogFile)]:
        root.removeHandler(handler)
        handler.close()


def _strip_newline(record: logging.LogRecord) -> bool:
    """A Python warning is logged as warnings.formatwarning's text, which ends in a newline:
    a blank line in the log after each one."""
    if isinstance(record.msg, str):
        record.msg = record.msg.rstrip()
    return True


def quiet_libraries() -> None:
    """Route the libraries' own output into logging, so the log keeps it and the terminal
    shows it only with verbose=true: Python warnings (Lightning's hints and deprecations)
    through `logging.captureWarnings`; MLflow's messages (it prints "Creating initial
    MLflow database tables" through a handler of its own unless told not to, before it
    is imported); alembic's schema-migration INFO lines, dozens per new store, not at all."""
    logging.captureWarnings(True)
    warnings_log = logging.getLogger("py.warnings")
    if _strip_newline not in warnings_log.filters:
        warnings_log.addFilter(_strip_newline)
    os.environ.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")
    logging.getLogger("alembic").setLevel(logging.WARNING)


_console: Any = None


def _rich_console() -> Any:
    global _console
    if _console is None:
        from rich.console import Console

        class _Console(Console):
            def on_broken_pipe(self) -> None:
                # `| head` closed the pipe. rich's default exits with status 1, before
                # files still to be written are; instead, stdout goes quiet and work goes on.
                self.quiet = True
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())

        _console = _Console(highlight=False)
    return _console


def plain_text(renderable: Any, width: int = 120) -> str:
    """A rich renderable (or a string with rich markup) as plain text, for the log file."""
    from rich.console import Console
    from rich.errors import MarkupError
    from rich.text import Text

    if isinstance(renderable, str):
        try:
            return Text.from_markup(renderable).plain
        except MarkupError:
            return renderable

    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(renderable)
    return buffer.getvalue().rstrip("\n")


BINARY_UNITS = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"]


def size(value: float | None, per: str = "") -> str:
    """Bytes as a person reads them: 704698368 -> '672.1 MiB' (binary units, as `free -h`
    and nvidia-smi count memory); `per='/s'` for a rate; '-' for None."""
    if value is None:
        return "-"
    from rich.filesize import pick_unit_and_suffix

    unit, suffix = pick_unit_and_suffix(int(abs(value)), BINARY_UNITS, 1024)
    number = f"{value:,.0f}" if unit == 1 else f"{value / unit:,.1f}"
    return f"{number} {suffix}{per}"


def show(renderable: Any) -> None:
    """Show a table or a result line: rich on the terminal, plain text in the log."""
    logging.getLogger(OUTPUT).info(plain_text(renderable), extra={"renderable": renderable})


def use_console(prefix: str = PREFIX) -> None:
    """Outside a Hydra job: print harness's records on the terminal (once per process)."""
    root = logging.getLogger()
    if any(isinstance(h, ConsoleHandler) for h in root.handlers):
        return
    root.addHandler(ConsoleHandler(prefix=prefix))
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)


class SweepLogHandler(logging.Handler):
    """<sweep dir>/sweep.log: every line the terminal showed while the sweep ran (its
    progress, its table, the jobs' warnings) and the sweep process's other records
    (MLflow creating the parent run's store, say), none of a running job's own: those
    are in the job's cli.log. Listed after the console handler in both logging configs,
    so it sees whether the console printed a record. Opens the file per record: Hydra
    reconfigures logging around every job, closing the handlers it finds."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.setFormatter(logging.Formatter(FILE_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        sweep = _sweep
        if sweep is None or sweep.log_path is None or (
                sweep.job_running and not getattr(record, _SHOWN_MARK, False)):
            return
        try:
            with open(sweep.log_path, "a", encoding="utf-8") as handle:
                handle.write(self.format(record) + "\n")
        except OSError:
            # An unwritable sweep directory: the sweep itself says so in one line (an
            # OutputError); sweep.log is given up rather than a traceback per record.
            sweep.log_path = None
        except Exception:
            self.handleError(record)
