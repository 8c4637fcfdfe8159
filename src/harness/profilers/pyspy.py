"""The `pyspy` preset: one `py-spy record` per output format samples the run's own process
and its children, over the whole run or a window of training steps."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
from hydra.core.hydra_config import HydraConfig
from typing_extensions import override

from harness.config.checks import NonNegativeInt, PositiveInt, PositiveNumber, one_or_more
from harness.launch.outside_tool import ON_MISSING, find_executable, tool_unavailable
from harness.profilers.preset import Report, RunShared, StepWindow, WindowPreset, check_window, figures_table
from harness.reports.files import write_json

log = logging.getLogger(__name__)
DOC = "docs/profiling-your-code.md#3-where-does-the-python-time-go-profilerpyspy"
OUTPUTS = {"flamegraph": "pyspy.svg", "speedscope": "pyspy.speedscope.json",
           "chrometrace": "pyspy.chrometrace.json", "raw": "pyspy.collapsed.txt"}
Formats = one_or_more(OUTPUTS)
PTRACE_FIX = ("run as root, allow ptrace (sudo sysctl kernel.yama.ptrace_scope=0), or in a container add"
              " --cap-add=SYS_PTRACE")
_SAMPLES = re.compile(r"Samples:\s*(\d+)\s+Errors:\s*(\d+)")


def permission_problem(stderr: str) -> bool:
    """Whether py-spy's error output says it may not attach (ptrace refused)."""
    text = stderr.lower()
    return any(word in text for word in ("permission denied", "operation not permitted", "ptrace"))


def pyspy_command(executable: str, pid: int, output: Path, fmt: str, rate: int, **flags: bool) -> list[str]:
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
        with os.fdopen(handle, "w") as output:
            self.process = subprocess.Popen(self.command, stdout=output, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
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
        if found := _SAMPLES.search(self.stderr):
            self.samples, self.errors = int(found[1]), int(found[2])


class PyspyPreset(WindowPreset):
    """Runs `py-spy record` against this process for the whole run or a window of training steps."""

    def __init__(self, executable: str = "py-spy", rate: PositiveInt = 100,  # samples per second
                 formats: Formats = ("flamegraph", "speedscope"), start_step: NonNegativeInt | None = None,
                 steps: PositiveInt = 20, subprocesses: bool = True, native: bool = False,
                 idle: bool = False, gil: bool = False, nonblocking: bool = False,
                 attach_timeout_s: PositiveNumber = 20.0, on_missing: Literal[ON_MISSING] = "warn"
                 ) -> None:
        self.formats = [formats] if isinstance(formats, str) else list(formats)
        self.rate, self.start_step, self.steps = rate, start_step, steps
        self.on_missing, self.attach_timeout_s = on_missing, attach_timeout_s
        self.pyspy_flags = {"subprocesses": subprocesses, "native": native, "idle": idle,
                            "gil": gil, "nonblocking": nonblocking}
        self.executable = find_executable(executable)
        self.problem: str | None = None
        if self.executable is None:
            self._unavailable(f"py-spy ({executable}) is not installed: not beside {sys.executable} nor on"
                              " PATH. Fix: pip install 'lightning-harness[pyspy]' (or pip install py-spy)")
        self.recorders: list[Recorder] = []
        self.window = StepWindow(start_step, steps) if start_step is not None else None
        self._state = "idle"  # idle -> recording -> done
        self.shared = RunShared()  # alone until linked: nothing times the steps

    def _unavailable(self, message: str) -> None:
        self.problem = message
        tool_unavailable("pyspy", "py-spy", message, self.on_missing)

    def _start(self, trainer: pl.Trainer) -> None:
        if self._state != "idle" or self.problem or not trainer.is_global_zero:
            return
        self._state = "recording"
        try:  # the reports directory of this job, else of Lightning's root
            reports = Path(HydraConfig.get().runtime.output_dir) / "reports"
        except ValueError:  # built outside a Hydra job
            reports = Path(trainer.default_root_dir) / "reports"
        for index, fmt in enumerate(self.formats):
            output = reports / OUTPUTS[fmt]
            # two blocking samplers lose a third of their samples to each other
            flags = {**self.pyspy_flags, "nonblocking": self.pyspy_flags["nonblocking"] or index > 0}
            recorder = Recorder(fmt, output, pyspy_command(str(self.executable), os.getpid(),
                                                           output, fmt, self.rate, **flags))
            self.recorders.append(recorder)
            failure = recorder.start(self.attach_timeout_s)
            if failure is not None:
                self._stop()
                if permission_problem(failure + recorder.stderr):
                    self._unavailable(f"py-spy may not attach to process {os.getpid()} (ptrace not"
                                      f" permitted: {failure.strip()}). Fix: {PTRACE_FIX}")
                else:
                    self._unavailable(f"py-spy stopped at once: {failure.strip()}")
                return

    def _stop(self) -> None:
        if self._state == "recording":
            self._state = "done"
            for recorder in self.recorders:
                recorder.stop()

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.start_step is None:
            self._start(trainer)

    @override
    def on_train_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if self.start_step is not None:  # a window that never opens would record nothing
            check_window("pyspy", trainer, start_step=self.start_step, steps=self.steps)

    @override
    def window_opens(self, trainer: pl.Trainer) -> None:
        self._start(trainer)

    @override
    def window_closed(self) -> None:
        # stopping waits for py-spy to write its files: seconds kept out of timed steps
        self.shared.untimed(self._stop)

    @override
    def on_train_end(self, *_: Any) -> None:
        if self.start_step is not None:
            self._stop()  # fewer steps than the window: close it with training

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        self._stop()
        for recorder in self.recorders:  # py-spy wrote where the run dir was guessed at start
            if recorder.output.is_file() and recorder.output.parent != reports_dir:
                reports_dir.mkdir(parents=True, exist_ok=True)
                recorder.output = Path(shutil.move(recorder.output, reports_dir / recorder.output.name))
        missing = [r.output.name for r in self.recorders if not r.output.is_file()]
        samples = max((r.samples for r in self.recorders if r.samples is not None), default=None)
        if self.recorders or self.problem:
            write_json(reports_dir / "pyspy.json", {
                "report": "pyspy", "doc": DOC,
                "window": ("whole run" if self.start_step is None else
                           f"training steps {self.start_step} to {self.start_step + self.steps - 1}"),
                "subprocesses": self.pyspy_flags["subprocesses"], "rate_hz": self.rate,
                "files": {r.fmt: r.output.name for r in self.recorders if r.output.is_file()},
                "missing_files": missing, "samples": samples,
                "sampling_errors": max((r.errors for r in self.recorders if r.errors is not None),
                                       default=None),
                "problem": self.problem, "commands": [" ".join(r.command) for r in self.recorders],
            })
        if missing and not self.problem:
            log.warning("profiler=pyspy: py-spy wrote no %s (%s)", ", ".join(missing),
                        self.recorders[0].stderr.strip()[-300:] or "no message")
        if not self.recorders:
            return Report()
        return Report({} if samples is None else {"pyspy_samples": samples}, tables=[figures_table(
            f"py-spy ({self.rate} samples/s)", ("format", "file", "samples"),
            [(r.fmt, str(r.output) if r.output.is_file() else "(not written)",
              "-" if r.samples is None else str(r.samples)) for r in self.recorders], labels=2)])
