"""Reaching a tracking store without stalling a benchmark on it.

MLflow retries an HTTP request 7 times with exponential backoff by default,
which can hold a run for minutes when the server is down; a sqlite store is
created on first use by whichever process gets there first, and parallel
jobs racing to create it can trip over each other.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path


def configure_http(timeout_s: int, max_retries: int) -> None:
    """Bound MLflow's HTTP requests for this process (read by MLflow at each request)."""
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(int(timeout_s))
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(int(max_retries))
    # Backoff factor 1 keeps the retries to seconds, not minutes.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")


def is_http(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def probe(uri: str, timeout_s: float) -> str | None:
    """Why the store cannot take a run (an http(s) server that does not answer, a sqlite
    file that cannot be written), or None if it can.

    Any HTTP answer counts as reachable (a server behind auth answers 401);
    only a refused connection, a DNS failure or a timeout does not.
    """
    if not is_http(uri):
        return _sqlite_problem(uri)
    import requests

    try:
        requests.get(uri.rstrip("/") + "/health", timeout=timeout_s)
    except requests.RequestException as err:
        return f"cannot reach {uri}: {type(err).__name__}"
    return None


def _sqlite_problem(uri: str) -> str | None:
    """Why a sqlite store cannot be written (read-only file or directory), checked by opening
    it as sqlite would rather than asked of MLflow, which answers with a long traceback."""
    path = sqlite_path(uri)
    if path is None:
        return None
    import tempfile

    try:
        if path.exists():
            with open(path, "r+b"):  # opened for writing, nothing written
                pass
        if path.parent.is_dir():  # sqlite writes its journal beside the database
            with tempfile.TemporaryFile(dir=path.parent):
                pass
    except OSError as err:
        where = err.filename if isinstance(err.filename, str) else path
        return f"the store is read-only ({where}: {err.strerror or err})"
    return None


def gone(uri: str) -> str | None:
    """Why a sqlite store that was open is no longer there, or None."""
    path = sqlite_path(uri)
    if path is None or path.exists():
        return None
    return f"the store is gone: {path.resolve()} no longer exists"


def route_mlflow_logs() -> None:
    """MLflow's own log lines go through harness's logging (the run's log file; the
    terminal shows a warning's first line), not MLflow's handler, which prints whole
    SQLAlchemy tracebacks. Call before mlflow is imported."""
    os.environ.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a sqlite:/// URI, or None for any other store."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri.removeprefix("sqlite:///"))


def absolute_uri(uri: str) -> str:
    """The same store named so that it works from any working directory."""
    path = sqlite_path(uri)
    if path is None or path.is_absolute():
        return uri
    return f"sqlite:///{path.resolve()}"


@contextlib.contextmanager
def creation_lock(uri: str) -> Iterator[None]:
    """Serialise creating the store, experiment and run across local processes.

    Only for a sqlite file: a server serialises on its own. Per-step writes
    need no lock, since MLflow sets a 20 s sqlite busy timeout on each session.
    """
    path = sqlite_path(uri)
    try:
        import fcntl
    except ImportError:  # not on POSIX: go without, as MLflow itself does
        fcntl = None
    if path is None or fcntl is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # A hidden file beside the database: sqlite's own locks stay untouched.
    with open(path.parent / f".{path.name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class StoreError(RuntimeError):
    """A store call that failed elsewhere (the tracker process): its message is already the
    one-line reason."""


# The database driver's own line inside MLflow's message: "(sqlite3.OperationalError) ...".
_DRIVER_LINE = re.compile(r"\((\w+\.\w+Error)\) ([^\n\[]+)")


def short_reason(err: BaseException) -> str:
    """One line about a tracking failure, without MLflow's multi-line detail: the database's
    own error when there is one (MLflow's first line is often about SQLAlchemy's autoflush)."""
    text = str(err).strip()
    if isinstance(err, StoreError):
        return text
    driver = _DRIVER_LINE.search(text)
    if driver:
        why = driver[2].strip()
        if "readonly database" in why:
            why = f"the store is read-only: {why}"
        return f"{why} ({driver[1]})"
    first = text.splitlines()[0] if text else ""
    return f"{type(err).__name__}: {first[:200]}" if first else type(err).__name__


def now_ms() -> int:
    """Now, in the milliseconds since the epoch that MLflow timestamps are in."""
    import time

    return int(time.time() * 1000)
