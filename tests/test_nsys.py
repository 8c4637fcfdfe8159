"""profiler=nsys: the re-launch command, the capture range, and runs with and without nsys."""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from harness.errors import ConfigError, HarnessError
from harness.instrument import switches
from harness.launch import nsys as nsys_launch
from harness.launch.nsys import (
    CHILD_ENV,
    NsysOptions,
    child_command,
    manual_command,
    relaunch_under_nsys,
)
from harness.profilers.nsys import NsysPreset

GUIDE_TRACES = "--trace=cuda,nvtx,osrt,cudnn,cublas"


@pytest.fixture(autouse=True)
def _switches_off():
    switches.reset()
    yield
    switches.reset()


def test_child_command_runs_the_same_job_into_the_same_directory():
    command = child_command(
        NsysOptions(executable="/opt/nsys"),
        Path("/runs/a b"),
        ["batch_size=8", "profiler=[speed,nsys]"],
        python="/py",
    )
    assert command == [
        "/opt/nsys",
        "profile",
        GUIDE_TRACES,
        "--sample=none",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--output=/runs/a b/reports/nsys",
        "--force-overwrite=true",
        "--stats=false",
        "--",
        "/py",
        "-m",
        "harness.cli",
        "batch_size=8",
        "profiler=[speed,nsys]",
        "hydra.run.dir='/runs/a b'",
    ]


def test_options_and_manual_command():
    options = NsysOptions.read(
        {
            "trace": ["cuda", "nvtx"],
            "sample": "process-tree",
            "stats": True,
            "extra_args": ["--cuda-memory-usage=true"],
        }
    )
    text = manual_command(options, ["profiler=[speed,nsys]"])
    assert text.startswith(f"{CHILD_ENV}=1 nsys profile --trace=cuda,nvtx --sample=process-tree")
    assert "--stats=true --cuda-memory-usage=true -- harness 'profiler=[speed,nsys]'" in text
    for node, key in (
        ({"trace": ["cuda", "gpu"]}, "trace"),
        ({"sample": "cpu-all"}, "sample"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"active_steps": 0}, "active_steps"),
        ({"on_missing": "skip"}, "on_missing"),
    ):
        with pytest.raises(ConfigError) as caught:
            NsysOptions.read(node)
        assert caught.value.key == f"profiler.nsys.{key}"


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []


def _drive(capture: NsysPreset, batches: int) -> None:
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cuda", 0)))
    capture.setup(trainer, None, "fit")
    for index in range(batches):
        capture.on_train_batch_start(trainer, None, None, index)
        capture.calls.append(f"step {index}")  # type: ignore[attr-defined]
        capture.on_train_batch_end(trainer, None, None, None, index)
    capture.on_train_end(trainer, None)
    capture.teardown(trainer, None, "fit")


@pytest.fixture
def fake_cuda(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: calls.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: calls.append("stop"))
    return calls


def test_capture_range_opens_after_warmup_and_closes_after_active_steps(monkeypatch, fake_cuda):
    monkeypatch.setenv(CHILD_ENV, "1")
    capture = NsysPreset(warmup_steps=2, active_steps=3)
    capture.calls = fake_cuda  # type: ignore[attr-defined]
    _drive(capture, batches=7)
    assert fake_cuda == [
        "step 0",
        "step 1",
        "sync",
        "start",
        "step 2",
        "step 3",
        "step 4",
        "sync",
        "stop",
        "step 5",
        "step 6",
    ]
    assert (capture.started_at, capture.stopped_after, capture.state) == (2, 4, "done")


def test_capture_range_closes_when_training_ends_inside_it(monkeypatch, fake_cuda):
    monkeypatch.setenv(CHILD_ENV, "1")
    capture = NsysPreset(warmup_steps=1, active_steps=10)
    capture.calls = fake_cuda  # type: ignore[attr-defined]
    _drive(capture, batches=3)
    assert fake_cuda == ["step 0", "sync", "start", "step 1", "step 2", "sync", "stop"]


def test_outside_nsys_the_preset_does_nothing(monkeypatch, fake_cuda):
    monkeypatch.delenv(CHILD_ENV, raising=False)
    capture = NsysPreset(warmup_steps=0, active_steps=1)
    capture.calls = fake_cuda  # type: ignore[attr-defined]
    _drive(capture, batches=2)
    assert fake_cuda == ["step 0", "step 1"]
    assert capture.write_reports(Path("/nonexistent")).metrics == {}


def test_child_switches_annotate_ranges_to_nvtx(monkeypatch, fake_cuda):
    pushed: list[str] = []
    fake = types.ModuleType("nvtx")
    fake.push_range = lambda message=None, **kw: pushed.append(message)
    fake.pop_range = lambda **kw: None
    monkeypatch.setitem(sys.modules, "nvtx", fake)
    monkeypatch.setenv(CHILD_ENV, "1")
    capture = NsysPreset()
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cuda", 0)))
    capture.setup(trainer, None, "fit")
    assert switches.is_enabled("nvtx")
    from harness.instrument.annotate import annotate

    with annotate("workload.forward"):
        pass
    capture.teardown(trainer, None, "fit")
    assert pushed == ["workload.forward"] and not switches.is_enabled("nvtx")


def _job(tmp_path: Path) -> tuple[Path, list[str]]:
    """(run directory, overrides) of a job, as harness.run.job hands them to the relaunch."""
    return tmp_path, ["profiler=[speed,nsys]"]


def test_relaunch_decisions(monkeypatch, tmp_path, capsys):
    from harness.terminal import use_console

    use_console()  # harness's warnings on stderr, as in a run
    monkeypatch.delenv(CHILD_ENV, raising=False)
    without = OmegaConf.create({"profiler": {"speed": {}}})
    assert relaunch_under_nsys(without, *_job(tmp_path)) is None
    missing = OmegaConf.create({"profiler": {"nsys": {"executable": "/nonexistent/nsys"}}})
    assert relaunch_under_nsys(missing, *_job(tmp_path)) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not on PATH" in err and "goes on without nsys" in err
    missing.profiler.nsys.on_missing = "error"
    with pytest.raises(HarnessError, match="profiler=nsys: Nsight Systems"):
        relaunch_under_nsys(missing, *_job(tmp_path))
    # Inside the child the job runs here, whatever the config says: no second re-launch.
    monkeypatch.setenv(CHILD_ENV, "1")
    monkeypatch.setattr(nsys_launch, "find_executable", lambda name: "/usr/bin/true")
    assert relaunch_under_nsys(missing, *_job(tmp_path)) is None


FAKE_NSYS = """#!{python}
# Stands in for `nsys profile`: logs how it was called, runs the program, writes a report.
import json, os, subprocess, sys
args = sys.argv[1:]
split = args.index("--")
with open({log!r}, "a") as log:
    log.write(json.dumps({{"nsys": args[:split], "program": args[split + 1:],
                           "marker": os.environ.get("{env}")}}) + "\\n")
rc = subprocess.run(args[split + 1:]).returncode
output = next(a for a in args if a.startswith("--output=")).split("=", 1)[1]
open(output + ".nsys-rep", "w").write("fake report")
sys.exit(rc)
"""


@pytest.mark.slow
def test_relaunch_under_a_fake_nsys(harness, tmp_path):
    log = tmp_path / "nsys_calls.jsonl"
    fake = tmp_path / "bin" / "nsys"
    fake.parent.mkdir()
    fake.write_text(FAKE_NSYS.format(python=sys.executable, log=str(log), env=CHILD_ENV))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    done = harness(
        "profiler=[speed,nsys]",
        "mode=train",
        f"profiler.nsys.executable={fake}",
        "profiler.nsys.warmup_steps=2",
        "profiler.nsys.active_steps=3",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 1  # the child did not re-launch itself
    call = calls[0]
    run_dir = done.run_dir()  # one run directory: the child wrote into the parent's
    assert call["marker"] == "1"
    assert call["nsys"][:2] == ["profile", GUIDE_TRACES]
    assert "--capture-range=cudaProfilerApi" in call["nsys"]
    assert f"--output={run_dir}/reports/nsys" in call["nsys"]
    assert call["program"][1:3] == ["-m", "harness.cli"]
    assert call["program"][-1] == f"hydra.run.dir={run_dir}"
    assert "profiler.nsys.warmup_steps=2" in call["program"]
    result = done.result()
    assert result["status"] == "ok"
    assert "reports/nsys.nsys-rep" in result["reports"]
    assert result["nsys_command"].startswith(str(fake))
    assert result["metrics"]["train_examples_per_second"] > 0
    assert done.report("nsys")["capture"] == "no-cuda"  # CPU here: no range to open
    assert "running this job again under Nsight Systems" in done.stderr


@pytest.mark.slow
def test_missing_nsys_runs_on_unprofiled_and_unmarked_code_writes_nothing(harness):
    # Two checks on one run: nsys absent (warn) and @harness.profile without profiler=line.
    done = harness(
        "profiler=[speed,nsys]",
        "mode=train",
        "profiler.nsys.executable=/nonexistent/nsys",
        "model._target_=instrumented_workload.CallingModule",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sum("profiler=nsys" in line for line in done.stderr.splitlines()) == 1
    assert done.result()["status"] == "ok"
    written = {p.name for p in (done.run_dir() / "reports").iterdir()}
    assert written == {"speed.json", "speed.csv", "speed_steps.csv"}


def _nvtx_names(report: Path, tmp_path: Path) -> set[str]:
    database = tmp_path / "nsys.sqlite"
    subprocess.run(
        [
            "nsys",
            "export",
            "--type=sqlite",
            f"--output={database}",
            "--force-overwrite=true",
            str(report),
        ],
        check=True,
        capture_output=True,
    )
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT COALESCE(e.text, s.value) FROM NVTX_EVENTS e"
            " LEFT JOIN StringIds s ON e.textId = s.id"
        ).fetchall()
    return {name for (name,) in rows if name}


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.skipif(
    shutil.which("nsys") is None or not torch.cuda.is_available(),
    reason="needs Nsight Systems (nsys on PATH) and a CUDA device",
)
def test_real_nsys_run_records_the_capture_range(harness, tmp_path):
    done = harness(
        "profiler=[speed,nsys]",
        "mode=train",
        "data.train_batches=12",
        "profiler.nsys.warmup_steps=3",
        "profiler.nsys.active_steps=4",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = done.report("nsys")
    assert (report["capture"], report["capture_first_step"], report["capture_last_step"]) == (
        "done",
        3,
        6,
    )
    rep = done.run_dir() / "reports" / "nsys.nsys-rep"
    assert rep.is_file() and rep.stat().st_size > 0
    names = _nvtx_names(rep, tmp_path)
    assert {"workload.forward", "workload.backward", "workload.optimizer_step"} <= names
