"""Shared helpers: run the real `harness` CLI in a subprocess and read what it wrote."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# One thread per torch process. The suite runs its tests side by side (pytest-xdist, one
# worker per core) and each test's runs are processes of their own: with torch's default of
# one OpenMP thread per core, idle threads spin for CPU another process needs. No test is
# about threads. Set before torch is imported here or in any process a test starts, and
# before forked_harness takes the environment its fork server starts with.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import forked_harness  # noqa: E402 - after the environment it copies

TESTS_DIR = Path(__file__).resolve().parent

# A small, quick workload: a few seconds per run on a laptop CPU.
FAST = (
    "data.train_batches=12",
    "data.val_batches=4",
    "data.predict_batches=8",
    "data.seq_len=16",
    "data.dim=32",
    "batch_size=4",
    "trainer.enable_progress_bar=false",
    "logger=none",  # MLflow costs seconds per run; tests/test_tracking.py turns it back on
)


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str
    cwd: Path

    def run_dirs(self) -> list[Path]:
        """Every directory under cwd holding a result.json, oldest first."""
        found = (p.parent for p in self.cwd.rglob("result.json") if "mlruns" not in p.parts)
        return sorted(found, key=lambda p: p.stat().st_mtime)

    def run_dir(self) -> Path:
        dirs = self.run_dirs()
        assert len(dirs) == 1, f"expected one run, found {dirs}\n{self.stderr[-3000:]}"
        return dirs[0]

    def result(self) -> dict[str, Any]:
        return json.loads((self.run_dir() / "result.json").read_text())

    def report(self, name: str) -> dict[str, Any]:
        return json.loads((self.run_dir() / "reports" / f"{name}.json").read_text())


def harness_command() -> list[str]:
    exe = shutil.which("harness", path=str(Path(sys.executable).parent)) or shutil.which("harness")
    return [exe] if exe else [sys.executable, "-m", "harness.cli"]


def harness_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a test's `harness` process: tests/ importable (its modules)."""
    path = str(TESTS_DIR) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": path, **(env or {})}


def start_harness(cwd: Path, *args: str, env: dict[str, str] | None = None,
                  fast: bool = False, new_session: bool = False) -> forked_harness.ForkedRun:
    """Start `harness args` in `cwd`, forked from a process that already imported torch,
    Lightning and Hydra (tests/forked_harness.py); it runs on while the test goes on.
    new_session: in a process group of its own, for a test that signals the whole group."""
    command = [harness_command()[0], *(FAST if fast else ()), *args]
    return forked_harness.start(command, cwd, harness_env(env), new_session)


def run_harness(
    cwd: Path, *overrides: str, fast: bool = True, env: dict[str, str] | None = None,
    timeout: float = 600, fresh: bool = False,
) -> Completed:
    """Run `harness` with `overrides` in `cwd` (outputs land there) and capture its output.

    The process is forked from one that imported the heavy libraries already
    (tests/forked_harness.py); fresh=True starts the console script itself, for a test about
    what happens before those imports (the import path, what the command loads). So does an
    `env` that sets what a process reads when it starts (MALLOC_*, OMP_*, ...)."""
    if not fresh and not forked_harness.read_at_start(harness_env(env)):
        run = start_harness(cwd, *overrides, env=env, fast=fast)
        stdout, stderr = run.communicate(timeout=timeout)
        return Completed(run.returncode, stdout, stderr, cwd)  # type: ignore[arg-type]
    args = [*harness_command(), *(FAST if fast else ()), *overrides]
    proc = subprocess.run(
        args, cwd=cwd, env=harness_env(env), capture_output=True, text=True, timeout=timeout
    )
    return Completed(proc.returncode, proc.stdout, proc.stderr, cwd)


@pytest.fixture(autouse=True)
def harness_console():
    """harness's log lines on stderr, as in a run (tests read them with capsys)."""
    from harness.terminal import use_console

    use_console()


# Skips CI accepts: hardware or outside tools that `pip install -e '.[test]'` cannot bring, and
# the long fault tests HARNESS_FULL=1 opts into (a shorter test of the same behaviour runs in CI).
ACCEPTED_SKIPS = ("CUDA", "Nsight Systems", "SLURM", "local SLURM", "nvtx package is installed",
                  "HARNESS_FULL=1 runs it")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI (CI=true), a test skipped for anything but ACCEPTED_SKIPS fails: a tool that the
    test extra installs must be found, not skipped over (py-spy once was, silently)."""
    report = (yield).get_result()
    if not (os.environ.get("CI") and report.skipped and call.when in ("setup", "call")):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if not any(accepted in reason for accepted in ACCEPTED_SKIPS):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI ({reason}): what the test extra installs must be found"


def venv_tool(name: str) -> str:
    """The path of a tool the test extra installs (next to this Python), or fail: no skip."""
    from harness.launch.outside_tool import find_executable

    found = find_executable(name)
    assert found, f"{name} is not installed beside {sys.executable}: pip install -e '.[test]'"
    return found


@pytest.fixture
def harness(tmp_path: Path):
    """`harness(*overrides)` runs the CLI in a fresh temporary directory."""

    def _run(*overrides: str, **kwargs: Any) -> Completed:
        return run_harness(tmp_path, *overrides, **kwargs)

    return _run


def sweep_dir(cwd: Path) -> Path:
    """The one multirun directory (multirun/DATE/TIME) a sweep started in `cwd` made."""
    dirs = list(cwd.glob("multirun/*/*"))
    assert len(dirs) == 1, dirs
    return dirs[0]


def job_results(root: Path) -> dict[int, dict[str, Any]]:
    """Job number -> result.json, for every job directory of the sweep at `root`."""
    return {int(p.parent.name): json.loads(p.read_text()) for p in root.glob("*/result.json")}


def harness_report(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the installed `harness-report` command."""
    exe = shutil.which("harness-report", path=str(Path(harness_command()[0]).parent))
    assert exe, "the harness-report command is not installed"
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=300)



def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n logical` (README's command): a worker per CPU and one more. A share of the suite
    waits rather than computes (planted sleeps, SLURM's scheduler, a shaped link): on 2 cores
    two workers kept 1.5 of them busy, and a third fills the waits (the suite in 370 s where
    two took 392-416 s that hour). PYTEST_XDIST_AUTO_NUM_WORKERS=N still sets N."""
    import psutil

    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").isdigit():
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    return (psutil.cpu_count(logical=True) or 1) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first: run side by side (pytest-xdist), the last tests to start are then
    short ones, and no worker waits at the end for one long test of the other."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Under --dist loadgroup, fail rather than run grouped tests apart: xdist marks a grouped
    test by appending @group to its id, which some pytest versions ignore (see pyproject)."""
    if not getattr(session.config.option, "loadgroup", False):  # set in xdist's workers only
        return
    apart = [item.nodeid for item in session.items
             if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if apart:
        raise pytest.UsageError(f"pytest-xdist did not group {apart[0]} (pytest "
                                f"{pytest.__version__}): install what pyproject's test extra pins")


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # one tracker fork server for the session's workers
        forked_harness._tracker_server()


def pytest_sessionfinish(session: pytest.Session) -> None:
    forked_harness.stop_server()
