"""profiler=pyspy: py-spy samples the run for real; clear messages when it cannot."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.errors import ConfigError, HarnessError
from harness.profilers.pyspy import PyspyPreset, permission_problem, pyspy_command

# What py-spy 0.4.3 prints when ptrace is refused (captured by running it as an
# unprivileged user against a root process with setpriv).
PTRACE_REFUSED = (
    "Permission Denied: Try running again with elevated permissions by going"
    " 'sudo env \"PATH=$PATH\" !!'"
)


def test_command_line():
    command = pyspy_command(
        "py-spy",
        42,
        Path("/r/pyspy.svg"),
        "flamegraph",
        250,
        subprocesses=True,
        native=False,
        idle=True,
        gil=False,
        nonblocking=True,
    )
    assert command == [
        "py-spy",
        "record",
        "--pid",
        "42",
        "--rate",
        "250",
        "--format",
        "flamegraph",
        "--output",
        "/r/pyspy.svg",
        "--subprocesses",
        "--idle",
        "--nonblocking",
    ]


def test_permission_problem_is_recognised():
    assert permission_problem(PTRACE_REFUSED)
    assert permission_problem("Error: Operation not permitted (os error 1)")
    assert not permission_problem("Error: Failed to find python version from target process")


def test_missing_pyspy_warns_or_stops(capsys):
    preset = PyspyPreset(executable="/nonexistent/py-spy")
    assert preset.problem and "not installed" in preset.problem
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the run goes on without py-spy" in err
    with pytest.raises(HarnessError, match=r"pip install 'lightning-harness\[pyspy\]'"):
        PyspyPreset(executable="/nonexistent/py-spy", on_missing="error")


@pytest.mark.parametrize(
    ("key", "value"),
    [("rate", 0), ("formats", ["png"]), ("start_step", -1), ("steps", 0), ("on_missing", "ignore")],
)
def test_bad_options_name_their_key(key, value):
    """Refused by the job's one check before a build (the constructor trusts its arguments)."""
    from omegaconf import OmegaConf

    from harness.config.arguments import check_node

    with pytest.raises(ConfigError) as caught:
        check_node("profiler.pyspy", PyspyPreset, OmegaConf.create({key: value}))
    assert caught.value.key == f"profiler.pyspy.{key}"


@pytest.mark.slow
def test_pyspy_records_the_workload(harness):
    """`<venv>/bin/harness profiler=pyspy` with the venv's bin/ NOT on PATH (a venv used
    without activating it, as the README's commands do) still finds the venv's py-spy."""
    from conftest import venv_tool

    venv_bin = str(Path(venv_tool("py-spy")).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and p != venv_bin)
    assert shutil.which("py-spy", path=path) is None or venv_bin not in path
    # The built-in workload at its full size: ~1.5 s of steps, so well over 100 samples and
    # a few stacks read while they change cannot dominate the error share below.
    done = harness(
        "profiler=[pyspy]", "mode=train", "data.train_batches=24", "logger=none",
        "trainer.enable_progress_bar=false", fast=False, env={"PATH": path},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reports = done.run_dir() / "reports"
    svg = (reports / "pyspy.svg").read_text()
    assert svg.startswith("<?xml") and "<svg" in svg
    # The flame graph names the built-in workload's functions and files.
    assert "harness/workload/model.py" in svg and "forward" in svg
    speedscope = json.loads((reports / "pyspy.speedscope.json").read_text())
    frames = speedscope["shared"]["frames"]
    assert any(
        f["name"] == "Attention.forward" and f["file"].endswith("workload/model.py") for f in frames
    )
    assert sum(len(p["samples"]) for p in speedscope["profiles"]) > 0
    report = done.report("pyspy")
    assert report["window"] == "whole run" and report["problem"] is None
    # A few samples can fail when a stack changes while being read; most must not.
    assert report["samples"] > 0 and report["sampling_errors"] < 0.1 * report["samples"]
    assert done.result()["metrics"]["pyspy_samples"] == report["samples"]


def _fake_refusing_pyspy(folder: Path) -> Path:
    fake = folder / "py-spy"
    fake.write_text(f"#!/bin/sh\necho '{PTRACE_REFUSED.replace(chr(39), '')}' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake


def test_ptrace_refusal_with_on_missing_error_stops_the_run(tmp_path):
    preset = PyspyPreset(executable=str(_fake_refusing_pyspy(tmp_path)), on_missing="error")
    trainer = SimpleNamespace(is_global_zero=True, default_root_dir=str(tmp_path))
    with pytest.raises(HarnessError, match="ptrace not permitted.*SYS_PTRACE"):
        preset.setup(trainer, None, "fit")


@pytest.mark.slow
def test_ptrace_refusal_is_one_clear_line(harness, tmp_path):
    fake = _fake_refusing_pyspy(tmp_path)
    done = harness("profiler=[pyspy]", "mode=train", f"profiler.pyspy.executable={fake}")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if "profiler=pyspy" in line]
    assert len(lines) == 1
    assert "ptrace not permitted" in lines[0] and "SYS_PTRACE" in lines[0]
    assert done.result()["status"] == "ok"
    assert "ptrace not permitted" in done.report("pyspy")["problem"]


@pytest.mark.slow
def test_window_past_the_end_of_training_is_one_clear_line(harness):
    done = harness("profiler=[pyspy]", "mode=train", "profiler.pyspy.start_step=20")  # 12 steps
    assert done.returncode == 1
    assert "profiler.pyspy: the recording window (start_step + steps = 40 training steps)" in (
        done.stderr)
    assert "Traceback" not in done.stderr and done.result()["status"] == "failed"


def test_step_window_starts_and_stops_py_spy_at_the_configured_steps(monkeypatch, tmp_path):
    events: list[str] = []
    monkeypatch.setattr(
        "harness.profilers.pyspy.Recorder.start",
        lambda self, timeout_s: events.append(f"start {self.fmt}"),
    )
    monkeypatch.setattr(
        "harness.profilers.pyspy.Recorder.stop",
        lambda self, timeout_s=60: events.append(f"stop {self.fmt}"),
    )
    preset = PyspyPreset(
        executable=shutil.which("sh"), start_step=2, steps=3, formats=["flamegraph"]
    )
    trainer = SimpleNamespace(is_global_zero=True, default_root_dir=str(tmp_path))
    preset.setup(trainer, None, "fit")
    for index in range(7):
        preset.on_train_batch_start(trainer, None, None, index)
        events.append(f"step {index}")
        preset.on_train_batch_end(trainer, None, None, None, index)
    preset.on_train_end(trainer, None)
    assert events == [
        "step 0",
        "step 1",
        "start flamegraph",
        "step 2",
        "step 3",
        "step 4",
        "stop flamegraph",
        "step 5",
        "step 6",
    ]
    assert preset.recorders[0].command[:4] == [
        shutil.which("sh"),
        "record",
        "--pid",
        str(os.getpid()),
    ]
    assert preset.write_reports(tmp_path / "reports").metrics == {}
    report = json.loads((tmp_path / "reports" / "pyspy.json").read_text())
    assert report["window"] == "training steps 2 to 4"
