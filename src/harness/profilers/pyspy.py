"""The `pyspy` preset: py-spy samples the run's own process and its children from outside.

py-spy reads the Python stacks of a running process through ptrace at a fixed
rate, so it sees every Python function (the Lightning loop, the data pipeline,
user code) without changing the program. `--subprocesses` follows DataLoader
workers and the ranks Lightning launches. One py-spy process runs per output
format, because py-spy writes one format per recording.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from harness.config.checks import list_of, non_negative_int, one_of, positive_int
from harness.profilers.outside_tool import ON_MISSING, tool_unavailable
from harness.profilers.window import StepWindow, check_window
from harness.reports.files import write_json

# py-spy format -> file name under reports/
OUTPUTS = {
    "flamegraph": "pyspy.svg",
    "speedscope": "pyspy.speedscope.json",
    "chrometrace": "pyspy.chrometrace.json",
    "raw": "pyspy.collapsed.txt",
}
PTRACE_FIX = (
    "run as root, allow ptrace (sudo sysctl kernel.yama.ptrace_scope=0), or in a container add"
    " --cap-add=SYS_PTRACE"
)
_SAMPLES = re.compile(r"Samples:\s*(\d+)\s+Errors:\s*(\d+)")


def permission_problem(stderr: str) -> bool:
    """Whether py-spy's error output says it may not attach (ptrace refused)."""
    text = stderr.lower()
    return any(word in text for word in ("permission denied", "operation not permitted", "ptrace"))


def pyspy_command(
    executable: str,
    pid: int,
    output: Path,
    fmt: str,
    rate: int,
    subprocesses: bool,
    native: bool,
    idle: bool,
    gil: bool,
    nonblocking: bool,
) -> list[str]:
    """The `py-spy record` command line for one output format."""
    command = [
        executable,
        "record",
        "--pid",
        str(pid),
        "--rate",
        str(rate),
        "--format",
        fmt,
        "--output",
        str(output),
    ]
    for flag, wanted in (
        ("--subprocesses", subprocesses),
        ("--native", native),
        ("--idle", idle),
        ("--gil", gil),
        ("--nonblocking", nonblocking),
    ):
        if wanted:
            command.append(flag)
    return command


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
    sampling: bool = False
    _log: Path | None = None

    def start(self, timeout_s: float) -> str | None:
        """Start py-spy and wait until it samples; returns why it could not, or None."""
        self.output.parent.mkdir(parents=True, exist_ok=True)
        # py-spy's messages go to a file, not a pipe: a thread reading a pipe
        # would itself show up in the samples.
        handle, name = tempfile.mkstemp(prefix="harness-pyspy-", suffix=".log")
        self._log = Path(name)
        with os.fdopen(handle, "w") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        # Training waits until py-spy reports that it samples, so the window is covered.
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self._read_log()
            if "Sampling process" in text:
                self.sampling = True
                return None
            if self.process.poll() is not None:
                self.stderr = self._read_log()
                self._remove_log()
                lines = self.stderr.strip().splitlines()
                return lines[-1] if lines else f"exit status {self.process.returncode}"
            time.sleep(0.02)
        return None  # slow to say so, but running: keep it

    def _read_log(self) -> str:
        return self._log.read_text(errors="replace") if self._log and self._log.is_file() else ""

    def _remove_log(self) -> None:
        if self._log is not None:
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
        if self._log is not None:
            self.stderr = self._read_log()
            self._remove_log()
        found = _SAMPLES.search(self.stderr)
        if found:
            self.samples, self.errors = int(found[1]), int(found[2])


def _run_dir(trainer: pl.Trainer) -> Path:
    """Hydra's output directory of this job (where reports go), else Lightning's root dir."""
    from hydra.core.hydra_config import HydraConfig

    try:
        return Path(HydraConfig.get().runtime.output_dir)
    except ValueError:  # built outside a Hydra job
        return Path(trainer.default_root_dir)


class PySpyRecorder(Callback):
    """Runs `py-spy record` against this process for the whole run or a window of training steps."""

    def __init__(
        self,
        executable: str = "py-spy",
        rate: int = 100,
        formats: Sequence[str] = ("flamegraph", "speedscope"),
        start_step: int | None = None,
        steps: int = 20,
        subprocesses: bool = True,
        native: bool = False,
        idle: bool = False,
        gil: bool = False,
        nonblocking: bool = False,
        attach_timeout_s: float = 20.0,
        on_missing: str = "warn",
    ) -> None:
        formats = list_of("profiler.pyspy.formats", formats, tuple(OUTPUTS),
                          "[flamegraph,speedscope]")
        positive_int("profiler.pyspy.rate", rate, 100, "samples per second, an integer > 0")
        if start_step is not None:
            non_negative_int("profiler.pyspy.start_step", start_step)
        positive_int("profiler.pyspy.steps", steps)
        one_of("profiler.pyspy.on_missing", on_missing, ON_MISSING)
        self.rate = rate
        self.formats = list(formats)
        self.start_step = start_step
        self.steps = steps
        self.flags = {
            "subprocesses": subprocesses,
            "native": native,
            "idle": idle,
            "gil": gil,
            "nonblocking": nonblocking,
        }
        self.attach_timeout_s = attach_timeout_s
        self.on_missing = on_missing
        self.executable = shutil.which(executable)
        self.problem: str | None = None
        if self.executable is None:
            self._unavailable(
                f"py-spy ({executable}) is not installed or not on PATH."
                " Fix: pip install 'lightning-harness[pyspy]' (or pip install py-spy)"
            )
        self.recorders: list[Recorder] = []
        self.reports_dir: Path | None = None
        self.window = StepWindow(start_step, steps) if start_step is not None else None
        self._state = "idle"  # idle -> recording -> done

    def _unavailable(self, message: str) -> None:
        self.problem = message
        tool_unavailable("pyspy", "py-spy", message, self.on_missing)

    # -- starting and stopping py-spy -------------------------------------------
    def _start(self, trainer: pl.Trainer) -> None:
        if self._state != "idle" or self.problem or not trainer.is_global_zero:
            return
        self._state = "recording"
        reports = _run_dir(trainer) / "reports"
        self.reports_dir = reports
        for index, fmt in enumerate(self.formats):
            output = reports / OUTPUTS[fmt]
            flags = dict(self.flags)
            # Only one tracer can hold the process paused at a time: two blocking
            # samplers lose a third of their samples to each other, so every
            # recorder after the first reads the stacks without pausing.
            flags["nonblocking"] = flags["nonblocking"] or index > 0
            recorder = Recorder(
                fmt,
                output,
                pyspy_command(str(self.executable), os.getpid(), output, fmt, self.rate, **flags),
            )
            self.recorders.append(recorder)
            failure = recorder.start(self.attach_timeout_s)
            if failure is not None:
                self._stop()
                if permission_problem(failure + recorder.stderr):
                    self._unavailable(
                        f"py-spy may not attach to process {os.getpid()} (ptrace not permitted:"
                        f" {failure.strip()}). Fix: {PTRACE_FIX}"
                    )
                else:
                    self._unavailable(f"py-spy stopped at once: {failure.strip()}")
                return

    def _stop(self) -> None:
        if self._state != "recording":
            return
        self._state = "done"
        for recorder in self.recorders:
            recorder.stop()

    # -- Lightning hooks -----------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.start_step is None:
            self._start(trainer)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.start_step is not None:  # a window that never opens would record nothing
            check_window(
                "pyspy", "start_step + steps", self.start_step + self.steps, trainer,
                "lower profiler.pyspy.start_step / profiler.pyspy.steps",
            )

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.window is not None and self.window.opens_now():
            self._start(trainer)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self.window is not None and self.window.step_done():
            self._stop()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.start_step is not None:
            self._stop()  # fewer steps than the window: close it with training

    # -- reports -------------------------------------------------------------------
    def write_reports(self, reports_dir: Path) -> dict[str, Any]:
        self._stop()
        for recorder in self.recorders:  # py-spy wrote where the run dir was guessed at start
            if recorder.output.is_file() and recorder.output.parent != reports_dir:
                reports_dir.mkdir(parents=True, exist_ok=True)
                recorder.output = Path(
                    shutil.move(recorder.output, reports_dir / recorder.output.name)
                )
        files = {r.fmt: r.output.name for r in self.recorders if r.output.is_file()}
        missing = [r.output.name for r in self.recorders if not r.output.is_file()]
        samples = max((r.samples for r in self.recorders if r.samples is not None), default=None)
        payload = {
            "report": "pyspy",
            "what": "sampled Python stacks of the run's process"
            + (" and its subprocesses" if self.flags["subprocesses"] else ""),
            "window": "whole run"
            if self.start_step is None
            else f"training steps {self.start_step} to {self.start_step + self.steps - 1}",
            "rate_hz": self.rate,
            "files": files,
            "missing_files": missing,
            "samples": samples,
            "sampling_errors": max(
                (r.errors for r in self.recorders if r.errors is not None), default=None
            ),
            "problem": self.problem,
            "commands": [" ".join(r.command) for r in self.recorders],
            "expected_overhead": (
                "py-spy pauses the process for each sample unless nonblocking=true;"
                " see benchmarks/pyspy_overhead.py"
            ),
        }
        if self.recorders or self.problem:
            write_json(reports_dir / "pyspy.json", payload)
        if missing and self.recorders and not self.problem:
            print(
                f"harness: warning: profiler=pyspy: py-spy wrote no {', '.join(missing)}"
                f" ({self.recorders[0].stderr.strip()[-300:] or 'no message'})",
                file=sys.stderr,
            )
        return {"pyspy_samples": samples} if samples is not None else {}

    def console_tables(self) -> list[Any]:
        if not self.recorders or self.reports_dir is None:
            return []
        from rich.table import Table

        table = Table(title=f"py-spy ({self.rate} samples/s)")
        table.add_column("format")
        table.add_column("file")
        table.add_column("samples", justify="right")
        for r in self.recorders:
            table.add_row(
                r.fmt,
                str(r.output) if r.output.is_file() else "(not written)",
                "-" if r.samples is None else str(r.samples),
            )
        return [table]
