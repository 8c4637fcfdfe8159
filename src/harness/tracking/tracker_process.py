"""The tracker process (docs/tracking.md): runs a job's calls (harness.tracking.tracker) on
StoreOps, in order, answering on a private copy of stdout (a library's print cannot corrupt it)."""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import sys
from typing import Any

from harness.tracking.store_access import short_reason
from harness.tracking.store_ops import StoreOps
from harness.tracking.tracker import write_message

ENDS = ("record_run", "log_sweep")  # each ends its run, FAILED when it breaks off


class _Collected(logging.Handler):
    """Log records kept for the next answer: the job logs them as its own."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.records.append((record.name, record.levelno, record.getMessage()))


def serve(requests: Any, replies: Any, collected: _Collected) -> None:
    """Run the job's calls in order until it closes the pipe; then end what it left open."""
    ops: Any = None
    failures: dict[str, tuple[str, str]] = {}  # run id -> its first failed write (reason, step)
    open_runs: set[str] = set()

    def answer(ok: bool, value: Any) -> None:
        nonlocal replies
        records, collected.records = collected.records, []
        if replies is None:
            return
        try:
            write_message(replies, (ok, value, records))
        except OSError:  # the job is gone: the calls still go in
            replies = None

    while True:
        try:
            method, args, kwargs, step, asked = pickle.load(requests)
        except (EOFError, pickle.UnpicklingError):  # the job closed the pipe, or died mid-call
            break
        if method == "open":
            ops = StoreOps(*args)  # MLflow's import, beside the job's Lightning import
            continue
        if method == "sync":  # every call before it is done: the failures of these runs
            answer(True, {r: failures[r] for r in args[0] if r in failures})
            continue
        run_id = None if asked else args[0]  # a write names its run first
        if run_id in failures:
            continue  # a failing store: the rest of this run's writes are not tried
        if method in ENDS:
            open_runs.discard(run_id)
        try:
            target = ops if hasattr(StoreOps, method) else ops.client
            value = getattr(target, method)(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - every store failure is said to the job
            if asked:
                answer(False, (short_reason(err), step))
            else:
                failures[run_id] = (short_reason(err), getattr(err, "step", None) or step or method)
            continue
        if method == "start_run":
            open_runs.add(value[1])
        if asked:
            answer(True, value)
    for run_id in sorted(open_runs):  # the job is gone and never ended these
        with contextlib.suppress(Exception):  # nobody is left to tell
            ops.client.set_terminated(run_id, "KILLED")


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
