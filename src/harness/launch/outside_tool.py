"""Outside programs harness drives (py-spy, nsys, git): where to find them, and what happens
when one cannot run."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

from harness.errors import HarnessError

log = logging.getLogger(__name__)
ON_MISSING = ("warn", "error")  # the choices of profiler.<preset>.on_missing


def find_executable(name: str) -> str | None:
    """The program `name`: a path as given, else beside the running Python, else on PATH."""
    if Path(name).name != name:  # a path: use it as it is
        return str(Path(name)) if shutil.which(name) else None
    return shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)


def tool_unavailable(preset: str, tool: str, message: str, on_missing: str) -> None:
    """Stop the run (`on_missing: error`) or say in one line that it goes on without `tool`."""
    if on_missing == "error":
        raise HarnessError(f"profiler={preset}: {message}")
    log.warning("profiler=%s: %s; the run goes on without %s"
                " (profiler.%s.on_missing=error stops it instead)", preset, message, tool, preset)


def git_commit(directory: Path) -> tuple[str | None, bool | None]:
    """(commit, has uncommitted changes) of the git checkout holding `directory`, if any."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=directory, capture_output=True, text=True, timeout=10)

    try:
        commit = git("rev-parse", "HEAD")
        if commit.returncode != 0:
            return None, None
        status = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None
