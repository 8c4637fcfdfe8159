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


def run_harness(
    cwd: Path, *overrides: str, fast: bool = True, env: dict[str, str] | None = None,
    timeout: float = 600,
) -> Completed:
    """Run `harness` with `overrides` in `cwd` (outputs land there) and capture its output."""
    args = [*harness_command(), *(FAST if fast else ()), *overrides]
    full_env = {**os.environ, "PYTHONPATH": str(TESTS_DIR) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    full_env.update(env or {})
    proc = subprocess.run(
        args, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )
    return Completed(proc.returncode, proc.stdout, proc.stderr, cwd)


@pytest.fixture(autouse=True)
def harness_console():
    """harness's log lines on stderr, as in a run (tests read them with capsys)."""
    from harness.terminal import use_console

    use_console()


# Skips CI accepts: hardware or outside tools that `pip install -e '.[test]'` cannot bring.
ACCEPTED_SKIPS = ("CUDA", "Nsight Systems", "SLURM", "local SLURM", "nvtx package is installed")


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

