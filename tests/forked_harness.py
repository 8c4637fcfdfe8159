"""The `harness` command in a process of its own that starts without paying for its imports.

Every test run of the CLI in a fresh interpreter spends seconds of CPU importing torch,
Lightning, MLflow and Hydra before it reads its first override: most of the suite's time.
Here runs are forked from a server process (multiprocessing's forkserver, one per pytest
process) that imported them once (tests/preloaded_imports.py) and never ran a torch op, so
each child starts as the console script would, only later in its imports: its own pid, exit
status, stdout and stderr, environment, working directory and signal handlers, and
`harness.cli.main()`, the function the console script calls.

A forked run's DDP ranks are forked from the same server too (`_fork_ranks_too`): Lightning
starts ranks 1..N-1 as `python -m harness.cli ...`, each importing the same libraries again.
So is its MLflow tracker process (`_fork_trackers_too`), from a server of the session's that
imported MLflow (tests/tracker_fork_server.py): a job's process never holds MLflow.

What differs from a fresh `harness` process, and where a test needs that, it runs the real
command instead (conftest.run_harness(fresh=True), harness_command()): the modules above are
imported before main() runs (so the run cannot show that it imports them lazily), and
import-time environment variables were read in the server's environment (the OpenMP runtime
read OMP_NUM_THREADS, which conftest sets to 1, when torch was imported; Lightning's rank,
which `_child` reads again), and a run's DDP ranks are the server's children, not the run's
(`still_running()` finds what is left of them). What a run changes
in its process (os.environ, torch's switches, signal handlers) dies with it: the server and
the next run never see it. tests/test_forked_harness.py checks the rest against the real
command.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing
import multiprocessing.forkserver
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from multiprocessing import reduction
from pathlib import Path
from types import SimpleNamespace
from typing import Any

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(["preloaded_imports"])
_TESTS_DIR = Path(__file__).resolve().parent


# Environment variables read when a process or a library in it starts (glibc's malloc, the
# OpenMP runtime, the interpreter): a forked run got the server's values, whatever its own say.
_READ_AT_START = ("MALLOC_", "LD_", "OMP_", "GOMP_", "KMP_", "MKL_", "PYTHON")
# The server's environment: the session's, as this module is imported (before any test's
# monkeypatch), whenever the server starts.
_SERVER_ENVIRON = {**os.environ, "PYTHONPATH": os.pathsep.join(
    p for p in (str(_TESTS_DIR), os.environ.get("PYTHONPATH")) if p)}


def read_at_start(env: dict[str, str]) -> list[str]:
    """The variables of `env`, read at a process's start, whose values differ from those the
    fork server started with: a forked run would not see them as the real command does."""
    keys = {k for k in (*env, *_SERVER_ENVIRON) if k.startswith(_READ_AT_START)}
    return sorted(k for k in keys - {"PYTHONPATH"} if env.get(k) != _SERVER_ENVIRON.get(k))


_forked_from_server = False  # in a forked run: the server's address came with the fork


def _start_server() -> None:
    """Start this process's fork server in _SERVER_ENVIRON, tests/ on its PYTHONPATH: the
    server imports its preload with the import path it starts with (Python 3.11 ignores the
    sys.path it is handed), and an ImportError there is silent: every run would import torch
    again."""
    if _forked_from_server:  # a run's ranks: the server that forked the run forks them too
        multiprocessing.forkserver._forkserver.ensure_running = lambda: None
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(_SERVER_ENVIRON)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _exit_code(err: SystemExit) -> int:
    """The status the interpreter exits with for `raise SystemExit(code)`."""
    if err.code is None:
        return 0
    if isinstance(err.code, int):
        return err.code
    print(err.code, file=sys.stderr)
    return 1


class _Fd:
    """One end of a pipe, duplicated into the child as multiprocessing hands it fds."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple:
        return _received_fd, (reduction.DupFd(self.fd),)


def _received_fd(duplicate: Any) -> int:
    return duplicate.detach()


def _as_main_process() -> None:
    """Undo what being a multiprocessing child left behind: the run is the main process, and
    processes it starts (DataLoader workers, ...) start the interpreter's default way (fork),
    not through a fork server that preloads the suite's imports."""
    from preloaded_imports import MAIN_PROCESS

    if MAIN_PROCESS.__name__ != "_MainProcess":  # imported here, not in the server
        raise RuntimeError("the fork server did not preload tests/preloaded_imports.py")
    multiprocessing.set_start_method(None, force=True)
    multiprocessing.forkserver._forkserver._preload_modules = ["__main__"]  # its default
    multiprocessing.process._current_process = MAIN_PROCESS()
    multiprocessing.process._parent_process = None


def _child(argv: Sequence[str], cwd: str, env: dict[str, str], out: int, err: int, status: int,
           new_session: bool, path_head: str, trackers: str) -> None:
    """Become `harness argv[1:]` started in `cwd` with `env`, stdout and stderr the pipes
    `out` and `err` (pipes, as subprocess gives: a limit on file sizes does not apply to
    them), `path_head` first on its import path; then end as the interpreter would:
    non-daemon threads joined, atexit handlers run."""
    if new_session:  # as Popen(start_new_session=True): its own process group to signal
        os.setsid()
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - ours until os._exit
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    # The interpreter's import path: the console script's own directory (`python -m`: the cwd)
    # first, then PYTHONPATH.
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [path_head, *extra, *(p for p in sys.path if p and p not in extra)]
    sys.argv[:] = list(argv)
    _as_main_process()
    # Lightning reads a process's rank from its environment as it is imported (the server's:
    # rank 0); a rank forked here reads its own, as in a process of its own
    from lightning.fabric.utilities.rank_zero import _get_rank, rank_zero_only

    rank_zero_only.rank = _get_rank() or 0
    global _forked_from_server, _trackers
    _forked_from_server, _trackers = True, trackers
    _fork_ranks_too()
    _fork_trackers_too()
    code = 0
    try:
        from harness.cli import main

        main()
    except SystemExit as stop:
        code = _exit_code(stop)
    except BaseException:  # noqa: BLE001 - as the interpreter: the traceback, exit 1
        traceback.print_exc()
        code = 1
    finally:
        threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter does at exit
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError):
                stream.flush()
        os.write(status, str(code).encode())
        os._exit(code)


def _fork_ranks_too() -> None:
    """Lightning's DDP launcher starts this run's ranks > 0 as `python -m harness.cli ...`
    (subprocess.Popen, stdout and stderr inherited): fork them from the same server instead,
    where what they read at start is the server's. Not in a session of its own (a rank must
    share its process group, which a process of another session cannot join)."""
    from lightning.pytorch.strategies.launchers import subprocess_script

    def popen(command: Sequence[str], env: dict[str, str] | None = None, cwd: str | None = None,
              **kwargs: Any) -> Any:
        env = dict(os.environ if env is None else env)
        if (kwargs or list(command[:3]) != [sys.executable, "-m", "harness.cli"]
                or read_at_start(env) or os.getsid(0) == os.getpid()):
            return subprocess.Popen(command, env=env, cwd=cwd, **kwargs)
        import harness.cli

        cwd = cwd or os.getcwd()
        return ForkedRun([harness.cli.__file__, *command[3:]], Path(cwd), env, path_head=cwd,
                         output=(1, 2))

    subprocess_script.subprocess = SimpleNamespace(Popen=popen)


def _fork_trackers_too() -> None:
    """harness.tracking.tracker starts the run's MLflow tracker as `python -m
    harness.tracking.tracker_process` (stdin and stdout pipes, stderr the run's): forked by the
    tracker fork server instead, which imported MLflow once. Not for a run in a session of its
    own: its tracker belongs to the run's process group, as a signal to the group finds it."""
    from harness.tracking import tracker

    def popen(command: Sequence[str], env: dict[str, str] | None = None, **kwargs: Any) -> Any:
        env = dict(os.environ if env is None else env)
        if (list(command[1:]) != ["-m", "harness.tracking.tracker_process"] or read_at_start(env)
                or os.getsid(0) == os.getpid()):
            return subprocess.Popen(command, env=env, **kwargs)
        return ForkedTracker(env)

    tracker.subprocess = SimpleNamespace(Popen=popen, PIPE=subprocess.PIPE,
                                         TimeoutExpired=subprocess.TimeoutExpired)


# The tracker fork server's socket: the session's (its first process starts it, pytest-xdist's
# workers find it in their environment), handed to each forked run.
_trackers = os.environ.get("HARNESS_TEST_TRACKERS", "")


def _tracker_server() -> str:
    """The session's tracker fork server (tests/tracker_fork_server.py), started on first use
    where none is; it ends with the process that started it."""
    global _trackers, _tracker_process
    if not _trackers:
        path = os.path.join(tempfile.mkdtemp(prefix="harness-trackers-"), "socket")
        _tracker_process = subprocess.Popen(
            [sys.executable, str(_TESTS_DIR / "tracker_fork_server.py"), path, str(os.getpid())],
            env=_SERVER_ENVIRON, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            start_new_session=True)  # holds none of a run's pipes, takes no signal to its group
        _trackers = os.environ["HARNESS_TEST_TRACKERS"] = path
    return _trackers


_tracker_process: subprocess.Popen | None = None


class ForkedTracker:
    """A tracker forked by the tracker fork server: the parts of subprocess.Popen that
    harness.tracking.tracker uses (stdin, stdout, pid, poll, wait, kill)."""

    def __init__(self, env: dict[str, str]) -> None:
        self._server = socket.socket(socket.AF_UNIX)
        deadline = time.monotonic() + 120  # the server imports MLflow before it listens
        while True:
            try:
                self._server.connect(_trackers)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        (stdin_r, stdin_w), (stdout_r, stdout_w) = os.pipe(), os.pipe()
        request = json.dumps({"cwd": os.getcwd(), "env": env}).encode()
        socket.send_fds(self._server, [request], [stdin_r, stdout_w, 2])
        os.close(stdin_r)
        os.close(stdout_w)
        self.stdin, self.stdout = open(stdin_w, "wb"), open(stdout_r, "rb")  # noqa: SIM115
        self._said = b""
        self.args = [sys.executable, "-m", "harness.tracking.tracker_process"]
        self.pid = int(self._line(None))
        self.returncode: int | None = None

    def _line(self, timeout: float | None) -> bytes | None:
        """The server's next line, or None if none came within `timeout` seconds."""
        while b"\n" not in self._said:
            if not select.select([self._server], [], [], timeout)[0]:
                return None
            chunk = self._server.recv(64)
            self._said += chunk or b"255\n"  # the server is gone: so is what it relayed
        line, _, self._said = self._said.partition(b"\n")
        return line

    def poll(self) -> int | None:
        if self.returncode is None and (line := self._line(0)) is not None:
            self.returncode = int(line)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            line = self._line(timeout)
            if line is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.returncode = int(line)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


class _Drain(threading.Thread):
    """Reads a pipe to its end (the child and everything it started closed it)."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.chunks = fd, []

    def run(self) -> None:
        with open(self.fd, "rb") as pipe:
            for chunk in iter(lambda: pipe.read1(65536), b""):
                self.chunks.append(chunk)

    def text(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")


class ForkedRun:
    """A started run: the parts of subprocess.Popen the tests use."""

    def __init__(self, argv: Sequence[str], cwd: Path, env: dict[str, str],
                 new_session: bool = False, path_head: str | None = None,
                 output: tuple[int, int] | None = None) -> None:
        """`path_head`: first on the run's import path (default: the console script's
        directory); `output`: the fds its stdout and stderr are (default: pipes read here)."""
        _start_server()
        if differ := read_at_start(env):
            raise ValueError(f"{', '.join(differ)} would keep the fork server's value in a "
                             "forked run: start the real command (run_harness(fresh=True))")
        pipes = [] if output else [os.pipe(), os.pipe()]
        self._status, status_w = os.pipe()
        os.set_blocking(self._status, False)
        out, err = output or (pipes[0][1], pipes[1][1])
        self._process = _context.Process(
            target=_child, args=(list(argv), str(cwd), dict(env), _Fd(out), _Fd(err),
                                 _Fd(status_w), new_session, path_head or str(Path(argv[0]).parent),
                                 _tracker_server()))
        try:
            self._process.start()
        finally:
            for fd in (status_w, *(w for _, w in pipes)):
                os.close(fd)
        self._drains = tuple(_Drain(r) for r, _ in pipes)
        for drain in self._drains:
            drain.start()
        self._lock = threading.Lock()  # a rank's poll runs in a watching thread as well
        self.pid = self._process.pid
        self.args = list(argv)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None and not self._process.is_alive():
                self._process.join()
                # the status the run wrote as it ended: multiprocessing's own reads 255
                # whenever the fork server that relays it is gone
                try:
                    said = os.read(self._status, 16)
                except BlockingIOError:  # killed by a signal: it wrote none
                    said = b""
                os.close(self._status)
                self.returncode = int(said) if said else self._process.exitcode
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self._process.kill()

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode  # type: ignore[return-value]

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the end of the run and of its output, then (stdout, stderr)."""
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self._process.join()
            raise
        for drain in self._drains:
            drain.join(timeout)
        out, err = (drain.text() for drain in self._drains)
        return out, err


def start(argv: Sequence[str], cwd: Path, env: dict[str, str],
          new_session: bool = False) -> ForkedRun:
    """Start `argv` (the harness command and its arguments) forked from the server; with
    `new_session`, in a session and process group of its own."""
    return ForkedRun(argv, cwd, env, new_session)


def still_running() -> list[int]:
    """The pids of what this process's server forked that has not ended (runs, their ranks)."""
    import psutil

    pid = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
    if pid is None:
        return []
    return [p.pid for p in psutil.Process(pid).children()
            if p.status() != psutil.STATUS_ZOMBIE]


def stop_server() -> None:
    """Stop this process's fork server (at the end of the session), so that it and the CPU
    time of the runs it forked are accounted to this process, as a subprocess's would be."""
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    if server is not None and getattr(server, "_forkserver_pid", None) is not None:
        server._stop()
    if _tracker_process is not None:
        _tracker_process.kill()
        _tracker_process.wait()
        shutil.rmtree(Path(_trackers).parent, ignore_errors=True)
