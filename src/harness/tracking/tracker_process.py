"""The tracker process: runs a job's MLflow calls (harness.tracking.tracker) on a real store.

`python -m harness.tracking.tracker_process`, started by the job; messages come in on stdin,
answers go out on a private copy of stdout (fd 1 then points at stderr, so a library's print
cannot corrupt an answer). Calls run in the order they were made. Nothing is lost:
- the first failed call of a run turns the rest of that run's calls off (as a failing store
  did in the job before) and is kept for the job's `sync`, which answers once every call
  before it is done;
- SIGINT and SIGTERM are ignored (Ctrl-C and SLURM signal the whole process group): the
  tracker ends when the job closes the pipe, after the job's last calls;
- a job that dies without ending its runs (SIGKILL, a crash in C) closes the pipe too: each
  run it opened and never ended is set KILLED, never left RUNNING.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from harness.tracking import store_access
from harness.tracking.store_ops import StoreOps
from harness.tracking.tracker import read_frame, write_frame


class _Collected(logging.Handler):
    """Log records kept for the next answer: the job logs them as its own (forward_logs)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.records.append((record.name, record.levelno, record.getMessage()))

    def take(self) -> list[tuple[str, int, str]]:
        records, self.records = self.records, []
        return records


class _Store:
    """The store, opened on the job's first call that needs it when it does not exist yet: a
    job that stops at its config checks leaves no new mlflow.db behind."""

    def __init__(self) -> None:
        self.ops = StoreOps()
        self.opening: tuple[str, int, int] | None = None
        self.unopened: str | None = None  # why the store could not be opened

    def open(self, uri: str, http_timeout_s: int, http_max_retries: int) -> None:
        from harness.tracking.store_ops import load_mlflow

        self.opening, self.unopened = None, None
        load_mlflow(http_timeout_s, http_max_retries)  # beside the job's Lightning import
        path = store_access.sqlite_path(uri)
        if path is not None and not Path(path).exists():
            self.opening = (uri, http_timeout_s, http_max_retries)
            return
        self._open(uri, http_timeout_s, http_max_retries)

    def _open(self, *args: Any) -> None:
        try:
            self.ops.open(*args)
        except Exception as err:  # noqa: BLE001 - said to the job at its first call
            self.unopened = store_access.short_reason(err)

    def ready(self) -> StoreOps:
        """The open store, or the reason it cannot be opened (raised as a StoreError)."""
        if self.opening is not None:
            opening, self.opening = self.opening, None
            self._open(*opening)
        if self.unopened is not None:
            raise store_access.StoreError(self.unopened)
        return self.ops


def serve(requests: Any, replies: Any, collected: _Collected) -> None:
    """Run the job's calls in order until it closes the pipe; then end what it left open."""
    store = _Store()
    failures: dict[str, tuple[str, str]] = {}  # run id -> its first failed call (reason, step)
    open_runs: set[str] = set()

    def answer(ok: bool, value: Any) -> None:
        nonlocal replies
        if replies is None:
            return
        try:
            write_frame(replies, (ok, value, collected.take()))
        except OSError:  # the job is gone: the calls still go in
            replies = None

    while True:
        try:
            method, args, step, asked = read_frame(requests)
        except EOFError:
            break
        if method == "open":
            store.open(*args)
            continue
        if method == "sync":  # every call before it is done: the failures of these runs
            (run_ids,) = args
            answer(True, {r: failures[r] for r in run_ids if r in failures})
            continue
        run_id = None if asked else args[0]  # a call sent without waiting names its run first
        if not asked and run_id in failures:
            continue  # a failing store: the rest of this run's calls are not tried
        try:
            ops = store.ready()
            if method == "client":
                name, call_args, call_kwargs = args
                value = getattr(ops.client, name)(*call_args, **call_kwargs)
            else:
                value = getattr(ops, method)(*args)
        except Exception as err:  # noqa: BLE001 - every store failure is said to the job
            reason = store_access.short_reason(err)
            if asked:
                answer(False, (reason, step))
            else:
                failures[run_id] = (reason, step or method)
            continue
        if method == "start_run":
            open_runs.add(value[1])
        elif method == "set_terminated":
            open_runs.discard(args[0])
        if asked:
            answer(True, value)
    for run_id in sorted(open_runs):  # the job is gone and never ended these
        with contextlib.suppress(Exception):  # nobody is left to tell
            store.ready().set_terminated(run_id, "KILLED")


def main() -> None:
    # Ctrl-C and a SIGTERM to the group reach this process too: it stays until the job is done.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    collected = _Collected()
    root = logging.getLogger()
    root.addHandler(collected)
    root.setLevel(logging.INFO)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # dozens of lines per new store
    logging.captureWarnings(True)
    try:
        serve(sys.stdin.buffer, replies, collected)
    except BaseException as err:  # noqa: BLE001 - one line, never a traceback on the terminal
        print(f"harness: warning: the MLflow tracker process stopped: {type(err).__name__}:"
              f" {err}", file=sys.stderr)
    # Every call was answered or done, each store write committed: leave without the
    # interpreter's teardown of MLflow's modules (~2 s of CPU the job would wait for).
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
