"""The RunResult of the job in progress (written however the job ends), and how an exception
becomes a status."""

from __future__ import annotations

import contextlib
import datetime as dt
import tempfile
import time
import traceback
from pathlib import Path

from harness.errors import HarnessError, OutputError, first_line
from harness.launch.ranks import global_rank, rank_path
from harness.reports.files import write_text
from harness.result.schema import RunResult
from harness.result.store import RESULT_FILE, write_result

ERROR_LOG = "error.log"


def classify_failure(err: BaseException) -> tuple[str, str]:
    """(status, one-line reason) for an exception that ended a run."""
    if isinstance(err, (KeyboardInterrupt, SystemExit)):
        # Lightning turns Ctrl+C into a graceful shutdown that ends in SystemExit.
        return "interrupted", f"interrupted ({type(err).__name__})"
    if isinstance(err, HarnessError):
        return "failed", str(err)
    text = first_line(err, with_type=False)
    compiling = type(err).__module__.startswith(("torch._dynamo", "torch._inductor"))
    if (oom := _out_of_memory(err)) is not None:
        where = " while compiling" if compiling and oom is not err else ""
        return "oom", f"out of memory{where}: {first_line(oom, with_type=False)[:300]}"
    if compiling:
        return "failed", f"compile failed: {type(err).__name__}: {text[:300]}"
    return "failed", f"{type(err).__name__}: {text[:300]}"


def _out_of_memory(err: BaseException) -> BaseException | None:
    """The out-of-memory error `err` is or wraps (BackendCompilerFailed's `inner_exception`), else None."""
    seen: set[int] = set()
    found: BaseException | None = err
    while found is not None and id(found) not in seen:
        seen.add(id(found))
        if type(found).__name__ == "OutOfMemoryError" or (
                "out of memory" in first_line(found, with_type=False).lower()):
            return found
        inner = getattr(found, "inner_exception", None)
        found = (inner if isinstance(inner, BaseException) else found.__cause__
                 or (None if found.__suppress_context__ else found.__context__))
    return None


def error_log_path(output_dir: Path) -> Path:
    """The run's error.log; a DDP rank > 0, in the same directory, writes error_rank<N>.log."""
    path = Path(output_dir) / ERROR_LOG
    return path if global_rank() == 0 else rank_path(path)


def write_error_log(output_dir: Path, err: BaseException) -> Path:
    """The traceback of `err` in the run's error.log (a message may point there)."""
    return write_text(error_log_path(output_dir), "".join(traceback.format_exception(err)))


def saved_traceback(err: BaseException, output_dir: Path | None = None) -> str:
    """Where `err`'s traceback is, for a message: the run's error.log (written if need be), else a
    temporary file, else why it is not saved."""
    if output_dir is not None:
        path = error_log_path(output_dir)
        try:
            return f"traceback in {path if path.is_file() else write_error_log(output_dir, err)}"
        except OSError:
            pass
    try:
        handle, name = tempfile.mkstemp(prefix="harness-error-", suffix=".log")
        with open(handle, "w") as out:
            out.write("".join(traceback.format_exception(err)))
    except OSError as why:
        return f"traceback not saved: {why.strerror or why}"
    return f"traceback in {name}"


class RunRecord:
    """The job's RunResult and where it goes; `write` may be called more than once."""

    def __init__(self, output_dir: Path, overrides: list[str] | None = None) -> None:
        self.output_dir = Path(output_dir)
        self.started = time.time()
        started_at = dt.datetime.fromtimestamp(self.started, dt.timezone.utc).isoformat()
        self.result = RunResult(overrides=list(overrides or []), started_at=started_at)

    def fail(self, err: BaseException) -> None:
        self.result.status, self.result.reason = classify_failure(err)
        if not isinstance(err, (HarnessError, KeyboardInterrupt, SystemExit)):
            with contextlib.suppress(OSError):  # the disk is full: result.json says what it can, without it
                self.result.error_log = write_error_log(self.output_dir, err).name

    def add_reports(self, paths: list[Path]) -> None:
        self.result.reports = sorted({*self.result.reports,
                                      *(str(path.relative_to(self.output_dir)) for path in paths)})

    def write(self) -> Path:
        """result.json, or an OutputError naming it when it cannot be written."""
        self.result.duration_s = time.time() - self.started
        try:
            return write_result(self.output_dir, self.result)
        except OSError as err:
            raise OutputError(err, self.output_dir / RESULT_FILE) from err
