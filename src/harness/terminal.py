"""What harness tells the user, through logging, so a run's log file holds all of it
(docs/architecture.md, "Messages through logging"). Nothing heavy is imported."""

from __future__ import annotations

import contextlib
import functools
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
# Log only unless verbose ("Launching N jobs": the sweep's progress lines replace it).
_LOG_ONLY = ("py.warnings", "hydra._internal.core_plugins.basic_launcher")
_JOB_ENDING = ("harness.cli.job",)  # a job's "failed: ...": the sweep's job line says it
_SHOWN_MARK = "harness_shown"  # set on a record the console printed (for SweepLogHandler)
# Printed even while a sweep's job runs: an interruption ends the whole sweep.
_ALWAYS = ("harness.launch.job_scope",)
FILE_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # as in job_logging


def _under(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(f"{root}.") for root in roots)


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
    """A sweep starts (its object) or ends (None)."""
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
    """Whether the terminal prints `record`; a sweep's job's warnings once per sweep."""
    if verbose() or _under(record.name, _ALWAYS):
        return True
    if _under(record.name, _LOG_ONLY):
        return False
    if _sweep is not None and _sweep.job_running:
        if record.levelno < logging.WARNING or _under(record.name, _JOB_ENDING):
            return False
        if record.getMessage() in _sweep.printed_warnings:  # the same warning, the next job
            return False
        _sweep.printed_warnings.add(record.getMessage())
        return True
    if getattr(record, "renderable", None) is not None or _under(record.name, _OWN):
        return True
    return record.levelno >= logging.WARNING or (
        _under(record.name, _SHOWN) and record.levelno == logging.INFO)


class ConsoleHandler(logging.Handler):
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
            if renderable is not None:  # a line of text is not cut: a path stays one word
                _rich_console().print(renderable, soft_wrap=isinstance(renderable, str))
            elif _under(record.name, _OWN):
                level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
                print(f"{self.prefix}: {level}{record.getMessage()}", file=own_stream(), flush=True)
            elif _under(record.name, _SHOWN) and record.levelno == logging.INFO:
                print(record.getMessage(), flush=True)
            else:
                # another library's record: its first line (a driver's error can run long)
                lines = record.getMessage().splitlines() or [""]
                more = " [...]" if len(lines) > 1 else ""
                print(f"[{record.name}][{record.levelname}] {lines[0]}{more}", flush=True)
        except BrokenPipeError:  # `| head` closed the pipe: nothing more to print
            pass
        except Exception:
            self.handleError(record)


class LogFile(logging.FileHandler):
    """The run's log file: a failed write (disk full) is said once and ends it, not a traceback per record."""

    broken = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.broken:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # only from emit, before broken
        self.broken = True
        err = sys.exc_info()[1]
        why = getattr(err, "strerror", None) or err
        print(f"{PREFIX}: warning: cannot write the log file {self.baseFilename} ({why});"
              " messages from here on reach the terminal only", file=own_stream(), flush=True)
        with contextlib.suppress(OSError):
            self.close()


_terminal: TextIO | None = None  # the terminal's stderr while fd 2 is a job's log


def own_stream() -> TextIO:
    """The terminal's stderr, also while `libraries_to_log` points fd 2 at the job's log."""
    return _terminal or sys.stderr


@contextlib.contextmanager
def libraries_to_log() -> Iterator[None]:
    """For the block, fd 2 appends to the job's log (O_APPEND: whole writes), unless verbose=true."""
    global _terminal
    log_file = next((h for h in logging.getLogger().handlers
                     if isinstance(h, LogFile) and not h.broken), None)
    log_fd = None
    if not verbose() and log_file is not None and _terminal is None:
        with contextlib.suppress(OSError, ValueError):  # no log to write to: the terminal keeps all
            sys.stderr.flush()
            log_fd = os.open(log_file.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    if log_fd is None:
        yield
        return
    terminal = os.fdopen(os.dup(2), "w", buffering=1, encoding=sys.stderr.encoding or "utf-8",
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
    """The job's log takes no more records: the job ended the process (an interrupted sweep)."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, LogFile)]:
        root.removeHandler(handler)
        handler.close()


def _strip_newline(record: logging.LogRecord) -> bool:
    if isinstance(record.msg, str):
        record.msg = record.msg.rstrip()
    return True


def quiet_libraries() -> None:
    """Python warnings and MLflow's messages into logging; alembic's migration INFO lines not at all."""
    logging.captureWarnings(True)
    warnings_log = logging.getLogger("py.warnings")
    if _strip_newline not in warnings_log.filters:
        warnings_log.addFilter(_strip_newline)
    os.environ.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")
    logging.getLogger("alembic").setLevel(logging.WARNING)


@functools.cache
def _rich_console() -> Any:
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # `| head` closed the pipe: rich would exit 1 before the files are written
            self.quiet = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    return _Console(highlight=False)


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


def size(value: float | None, per: str = "") -> str:
    """704698368 -> '672.1 MiB' (binary units, as nvidia-smi counts); `per='/s'`; None -> '-'."""
    if value is None:
        return "-"
    from rich.filesize import pick_unit_and_suffix

    unit, suffix = pick_unit_and_suffix(int(abs(value)), ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"], 1024)
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
    """<sweep dir>/sweep.log: the sweep's records, of a running job's only what the terminal
    showed. Opens the file per record: Hydra closes the handlers it finds around every job."""

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
            sweep.log_path = None  # the sweep says so in one line; no traceback per record
        except Exception:
            self.handleError(record)
