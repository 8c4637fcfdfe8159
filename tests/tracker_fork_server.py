"""Forks the MLflow tracker processes of the suite's forked runs (tests/forked_harness.py).

A run's tracker is `python -m harness.tracking.tracker_process`: a fresh interpreter that
imports MLflow (seconds of CPU) before it serves the run. This server imports it once, as the
run's own fork server imports torch, and forks a tracker per request. The job processes never
hold MLflow (issue #22): it lives here, not in their fork server.

    python tracker_fork_server.py SOCKET OWNER_PID

A request: a connection to SOCKET sending the tracker's stdin, stdout and stderr (SCM_RIGHTS)
with its working directory and environment (JSON). The answer: the tracker's pid, then, once
it ended, its exit status (a line each). The server ends with the process OWNER_PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import sys

os.environ["MLFLOW_CONFIGURE_LOGGING"] = "false"  # as harness.tracking.tracker starts one

# ruff: noqa: E402, F401 - imported for their side effect: loaded once, here
import mlflow
import mlflow.store.tracking.sqlalchemy_store

import harness.tracking.tracker_process


def _tracker(fds: list[int], cwd: str, env: dict[str, str]) -> None:
    """In the forked child: become the tracker process Popen would have started."""
    for fd, target in zip(fds, (0, 1, 2), strict=True):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own until os._exit
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    harness.tracking.tracker_process.main()  # ends with os._exit


def serve(path: str, owner: int) -> None:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(16)
    waiting: dict[int, socket.socket] = {}  # tracker pid -> its requester's connection
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    while True:
        if selector.select(timeout=0.05):
            conn, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            request = json.loads(message)
            pid = os.fork()
            if pid == 0:
                for held in (listener, conn, *waiting.values()):
                    held.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _tracker(fds, request["cwd"], request["env"])
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            waiting[pid] = conn
        for pid in list(waiting):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                conn = waiting.pop(pid)
                with contextlib.suppress(OSError):  # the run that asked ended first
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                conn.close()
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            return


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
