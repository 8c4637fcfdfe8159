"""One `py-spy record` process: its command line, start, stop and what it said."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PTRACE_FIX = (
    "run as root, allow ptrace (sudo sysctl kernel.yama.ptrace_scope=0), or in a container add"
    " --cap-add=SYS_PTRACE"
)
_SAMPLES = re.compile(r"Samples:\s*(\d+)\s+Errors:\s*(\d+)")


def permission_problem(stderr: str) -> bool:
    """Whether py-spy's error output says it may not attach (ptrace refused)."""
    text = stderr.lower()
    return any(word in text for word in ("permission denied", "operation not permitted", "ptrace"))


def pyspy_command(executable: str, pid: int, output: Path, fmt: str, rate: int,
                  **flags: bool) -> list[str]:
    """The `py-spy record` command line for one format; `flags`: py-spy's switches, on or off."""
    return [executable, "record", "--pid", str(pid), "--rate", str(rate), "--format", fmt,
            "--output", str(output), *(f"--{flag}" for flag, on in flags.items() if on)]


@dataclass
class Recorder:
    """One running `py-spy record`, and what it said."""

    fmt: str
    output: Path
    command: list[str]
    process: subprocess.Popen | None = None
    stderr: str = ""  # what py-spy printed (stdout and stderr together)
    samples: int | None = None
    errors: int | None = None
    _log: Path | None = None

    def start(self, timeout_s: float) -> str | None:
        """Start py-spy and wait until it samples; returns why it could not, or None."""
        self.output.parent.mkdir(parents=True, exist_ok=True)
        # a file, not a pipe: a thread reading a pipe would show up in the samples
        handle, name = tempfile.mkstemp(prefix="harness-pyspy-", suffix=".log")
        self._log = Path(name)
        with os.fdopen(handle, "w") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        # Training waits until py-spy reports that it samples, so the window is covered.
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if "Sampling process" in self._read_log():
                return None
            if self.process.poll() is not None:
                self._take_log()
                lines = self.stderr.strip().splitlines()
                return lines[-1] if lines else f"exit status {self.process.returncode}"
            time.sleep(0.02)
        return None  # slow to say so, but running: keep it

    def _read_log(self) -> str:
        return self._log.read_text(errors="replace") if self._log and self._log.is_file() else ""

    def _take_log(self) -> None:
        if self._log is not None:
            self.stderr = self._read_log()
            self._log.unlink(missing_ok=True)
            self._log = None

    def stop(self, timeout_s: float = 60) -> None:
        """Ask py-spy to finish (Ctrl+C), which makes it write its output file."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._take_log()
        found = _SAMPLES.search(self.stderr)
        if found:
            self.samples, self.errors = int(found[1]), int(found[2])
