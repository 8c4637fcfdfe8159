"""What harness tells the user, through logging, so a job's log file holds all of it.

Every module logs to its own `harness.*` logger. In a Hydra job the config
`conf/hydra/job_logging/harness.yaml` sends each record to two handlers: the job's
log file (`cli.log` in the run directory) and `ConsoleHandler`, which prints:

- harness's own messages as one line on stderr: `harness: warning: ...`;
- tables and results (`show`) with rich on stdout, and as plain text in the log;
- other libraries' records (Lightning's INFO lines, say) as `[name][LEVEL] ...`
  on stdout, warnings and errors only unless `HARNESS_VERBOSE=1` (the `verbose`
  knob) asks for all of them: the job's log file keeps them either way.

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
from typing import Any

PREFIX = "harness"
OUTPUT = "harness.output"  # the logger of tables and results
VERBOSE_ENV = "HARNESS_VERBOSE"
_OWN = ("harness", "hydra_plugins.harness_launcher")
_SHOWN = ("hydra",)  # other loggers whose INFO lines always show: Hydra's launch lines


def _under(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(f"{root}.") for root in roots)


def _own(record: logging.LogRecord) -> bool:
    return _under(record.name, _OWN)


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0", "false")


class ConsoleHandler(logging.Handler):
    """The terminal side of harness's logging; see the module docstring."""

    def __init__(self, level: int = logging.NOTSET, prefix: str = PREFIX) -> None:
        super().__init__(level)
        self.prefix = prefix

    def emit(self, record: logging.LogRecord) -> None:
        try:
            renderable = getattr(record, "renderable", None)
            if renderable is not None:
                _rich_console().print(renderable)
                return
            if _own(record):
                level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
                print(f"{self.prefix}: {level}{record.getMessage()}", file=sys.stderr, flush=True)
            elif _under(record.name, _SHOWN) and record.levelno == logging.INFO:
                print(record.getMessage(), flush=True)
            elif record.levelno >= logging.WARNING or verbose():
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
              " messages from here on reach the terminal only", file=sys.stderr, flush=True)
        with contextlib.suppress(OSError):
            self.close()


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


def log_file(path: Any) -> None:
    """From now on, the process's log file is `path` (a sweep's sweep.log after its jobs,
    instead of the last job's cli.log), appended to."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)
        handler.close()
    try:
        handler = LogFile(path, mode="a")
    except OSError:  # an unwritable directory: the terminal still gets every line
        return
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    root.addHandler(handler)
