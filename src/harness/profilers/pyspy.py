"""The `pyspy` preset: one `py-spy record` per output format samples the run's own process
and its children, over the whole run or a window of training steps."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from hydra.core.hydra_config import HydraConfig
from typing_extensions import override

from harness.config.checks import list_of, non_negative_int, one_of, positive_int
from harness.launch.outside_tool import ON_MISSING, find_executable, tool_unavailable
from harness.profilers.preset import Report, RunShared, StepWindow, WindowPreset, check_window, figures_table
from harness.profilers.pyspy_process import PTRACE_FIX, Recorder, permission_problem, pyspy_command
from harness.reports.files import write_json

log = logging.getLogger(__name__)
DOC = "docs/profiling-your-code.md#3-where-does-the-python-time-go-profilerpyspy"
OUTPUTS = {
    "flamegraph": "pyspy.svg",
    "speedscope": "pyspy.speedscope.json",
    "chrometrace": "pyspy.chrometrace.json",
    "raw": "pyspy.collapsed.txt",
}


def _run_dir(trainer: pl.Trainer) -> Path:
    """Hydra's output directory of this job (where reports go), else Lightning's root dir."""
    try:
        return Path(HydraConfig.get().runtime.output_dir)
    except ValueError:  # built outside a Hydra job
        return Path(trainer.default_root_dir)


class PyspyPreset(WindowPreset):
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
        self.formats = list_of("profiler.pyspy.formats", formats, tuple(OUTPUTS),
                               "[flamegraph,speedscope]")
        self.rate = positive_int("profiler.pyspy.rate", rate, 100,
                                 "samples per second, an integer > 0")
        self.start_step = (None if start_step is None
                           else non_negative_int("profiler.pyspy.start_step", start_step))
        self.steps = positive_int("profiler.pyspy.steps", steps)
        self.on_missing = one_of("profiler.pyspy.on_missing", on_missing, ON_MISSING)
        self.pyspy_flags = {"subprocesses": subprocesses, "native": native, "idle": idle,
                            "gil": gil, "nonblocking": nonblocking}
        self.attach_timeout_s = attach_timeout_s
        self.executable = find_executable(executable)
        self.problem: str | None = None
        if self.executable is None:
            self._unavailable(f"py-spy ({executable}) is not installed: not beside {sys.executable}"
                              " nor on PATH. Fix: pip install 'lightning-harness[pyspy]' (or pip"
                              " install py-spy)")
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
        reports = _run_dir(trainer) / "reports"
        for index, fmt in enumerate(self.formats):
            output = reports / OUTPUTS[fmt]
            flags = dict(self.pyspy_flags)
            # two blocking samplers lose a third of their samples to each other
            flags["nonblocking"] = flags["nonblocking"] or index > 0
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
        if self._state != "recording":
            return
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
            check_window(
                "pyspy", "start_step + steps", self.start_step + self.steps, trainer,
                "lower profiler.pyspy.start_step / profiler.pyspy.steps",
            )

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
        files = {r.fmt: r.output.name for r in self.recorders if r.output.is_file()}
        missing = [r.output.name for r in self.recorders if not r.output.is_file()]
        samples = max((r.samples for r in self.recorders if r.samples is not None), default=None)
        payload = {
            "report": "pyspy",
            "doc": DOC,
            "window": ("whole run" if self.start_step is None
                       else f"training steps {self.start_step} to {self.start_step + self.steps - 1}"),
            "subprocesses": self.pyspy_flags["subprocesses"],
            "rate_hz": self.rate,
            "files": files,
            "missing_files": missing,
            "samples": samples,
            "sampling_errors": max((r.errors for r in self.recorders if r.errors is not None),
                                   default=None),
            "problem": self.problem,
            "commands": [" ".join(r.command) for r in self.recorders],
        }
        if self.recorders or self.problem:
            write_json(reports_dir / "pyspy.json", payload)
        if missing and not self.problem:
            log.warning("profiler=pyspy: py-spy wrote no %s (%s)", ", ".join(missing),
                        self.recorders[0].stderr.strip()[-300:] or "no message")
        metrics = {"pyspy_samples": samples} if samples is not None else {}
        if not self.recorders:
            return Report(metrics)
        table = figures_table(f"py-spy ({self.rate} samples/s)", ("format", "file", "samples"),
                              labels=2)
        for r in self.recorders:
            table.add_row(r.fmt, str(r.output) if r.output.is_file() else "(not written)",
                          "-" if r.samples is None else str(r.samples))
        return Report(metrics, tables=[table])
