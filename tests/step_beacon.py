"""Test helpers that know where a run is without reading a clock: a callback that writes the
number of training steps done to a file, and the wait for it (a test knows when a run is
mid-training before it sends a signal); and a rendezvous that holds each run at the start of
training until all of them are there (runs that pass it ran at the same time, however busy
the machine).

Use: `+profiler.beacon._target_=step_beacon.StepBeacon +profiler.beacon.path=/abs/file`,
`+profiler.meet._target_=step_beacon.Rendezvous +profiler.meet.path=/abs/dir
+profiler.meet.runs=N` (tests/ is on PYTHONPATH for runs started by conftest.run_harness).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

TESTS_DIR = Path(__file__).resolve().parent


class StepBeacon(Callback):
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.steps = 0

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.steps += 1
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(str(self.steps))
        tmp.replace(self.path)


class Rendezvous(Callback):
    """Holds training at its start until `runs` runs have arrived (one file each in `path`)."""

    def __init__(self, path: str, runs: int, timeout_s: float = 300) -> None:
        self.path, self.runs, self.timeout_s = Path(path), runs, timeout_s

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / str(os.getpid())).touch()
        deadline = time.monotonic() + self.timeout_s
        while len(list(self.path.iterdir())) < self.runs:
            if time.monotonic() > deadline:  # a bound on the wait, not a measurement
                raise RuntimeError(f"only {len(list(self.path.iterdir()))} of {self.runs} runs"
                                   f" reached {self.path} in {self.timeout_s} s")
            time.sleep(0.05)


def rendezvous(path: Path, runs: int) -> list[str]:
    """Overrides adding tests/step_beacon.py's Rendezvous of `runs` runs in directory `path`."""
    return ["+profiler.meet._target_=step_beacon.Rendezvous", f"+profiler.meet.path={path}",
            f"+profiler.meet.runs={runs}"]


def beacon(path: Path) -> list[str]:
    """Overrides adding tests/step_beacon.py: it writes the training steps done to `path`."""
    return ["+profiler.beacon._target_=step_beacon.StepBeacon", f"+profiler.beacon.path={path}"]


def run_env() -> dict[str, str]:
    """The environment conftest.run_harness gives runs: tests/ importable (step_beacon)."""
    return {**os.environ,
            "PYTHONPATH": str(TESTS_DIR) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def wait_for_steps(path: Path, at_least: int, timeout: float,
                   proc: subprocess.Popen | None = None) -> None:
    """Until the beacon at `path` says `at_least` training steps are done."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before {at_least} steps")
        text = path.read_text().strip() if path.exists() else ""
        if text.isdigit() and int(text) >= at_least:
            return
        time.sleep(0.2)
    raise AssertionError(f"training did not reach {at_least} steps in {timeout} s")
