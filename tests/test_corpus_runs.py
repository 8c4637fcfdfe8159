"""The cases of issue 13's corpus where the process itself is the point: its exit status, the
one line on stderr, and what is on disk (and in MLflow) afterwards. Each runs the real
`harness` (or harness-report, harness-mlflow-upload) on the smallest workload that shows it;
the in-process cases are in tests/test_corpus.py.

Read-only directories stop nobody running as root: there the process runs without the
capability that lets root write anywhere (setpriv), as an ordinary user would.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import FAST, harness_command, harness_report, run_harness, start_harness
from forked_harness import ForkedRun
from step_beacon import beacon, run_env, wait_for_steps

# A run as small as the case allows: training only, no report but what the case reads.
SMALL = ("mode=train", "profiler=none", "trainer.max_steps=3")


def _unprivileged() -> list[str]:
    """The prefix that makes a root process subject to file permissions like anyone."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "running as root needs setpriv (util-linux) to test read-only directories"
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]


def _harness(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*_unprivileged(), *harness_command(), *args], cwd=cwd,
                          env={**run_env(), **(env or {})}, capture_output=True, text=True,
                          timeout=300)


def _one_error_line(stderr: str, *needles: str) -> str:
    """The run's only `harness: error:` line, with no traceback anywhere."""
    assert "Traceback" not in stderr and "Logging error" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("harness: error:")]
    assert len(errors) == 1, stderr[-3000:]
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _read_only(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o555)
    return path


# -- config errors the process must record on disk ---------------------------------------

def test_unresolvable_interpolation_exit_2_one_line_and_a_failed_result(tmp_path):
    done = run_harness(tmp_path, "batch_size=${nope}")
    assert done.returncode == 2
    _one_error_line(done.stderr, "batch_size", "${nope}", "Fix:")
    result = done.result()
    assert result["status"] == "failed" and result["reason"].startswith("batch_size=")
    assert not (done.run_dir() / "error.log").exists()  # no traceback for a config error


def test_multirun_with_cfg_is_one_line(tmp_path):
    done = run_harness(tmp_path, "-m", "--cfg", "job", "batch_size=1,2", fast=False)
    assert done.returncode == 2
    _one_error_line(done.stderr, "--cfg job batch_size=1")


# -- bad output locations: one line, exit 2, nothing half-written --------------------------

@pytest.mark.parametrize("where", ["read-only run dir", "run dir under a file",
                                   "read-only cwd", "read-only sweep dir"])
def test_bad_output_location(where, tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    args = ["logger=none", "batch_size=1"]
    if where == "read-only run dir":
        args.append(f"hydra.run.dir={_read_only(tmp_path / 'ro')}")
        names = str(tmp_path / "ro")
    elif where == "run dir under a file":
        (tmp_path / "afile").write_text("x")
        args.append(f"hydra.run.dir={tmp_path / 'afile' / 'run'}")
        names = str(tmp_path / "afile" / "run")
    elif where == "read-only cwd":
        _read_only(cwd)
        names = str(cwd / "outputs")
    else:
        args = ["-m", *args, f"hydra.sweep.dir={_read_only(tmp_path / 'ro')}", "seed=1,2"]
        names = str(tmp_path / "ro")
    before = _files(tmp_path)
    done = _harness(cwd, *args)
    assert done.returncode == 2, done.stderr[-2000:]
    _one_error_line(done.stderr, names, "Fix:")
    assert _files(tmp_path) == before  # not a byte written, no temporary left


@pytest.mark.slow
def test_disk_full_mid_run(tmp_path):
    """From the first training step on, no file can grow (RLIMIT_FSIZE 0, the errors of a full
    disk): one warning for the log file, one error naming result.json, no .tmp left."""
    done = run_harness(tmp_path, *SMALL, "model._target_=failing_module.FailAtBatchSize",
                       "+model.fail_at=4", "+model.error=disk_full")
    assert done.returncode == 1
    line = _one_error_line(done.stderr, "result.json", "free space")
    assert "error.log" not in line
    warnings = [x for x in done.stderr.splitlines() if "cannot write the log file" in x]
    assert len(warnings) == 1, done.stderr[-2000:]
    files = _files(tmp_path)
    assert not [f for f in files if f.endswith(".tmp") or "result.json" in f], files


# -- the run goes on, and says what it found ------------------------------------------------

@pytest.mark.slow
def test_nan_loss_and_read_only_store_each_said_once(tmp_path):
    """Two faults in one run: a NaN training loss (flagged, not hidden) and a read-only
    mlflow.db (one warning that says read-only, no SQLAlchemy traceback); the run completes."""
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"")
    db.chmod(0o444)
    done = _harness(tmp_path, *FAST, *SMALL, "logger=mlflow",
                    "model._target_=failing_module.FailAtBatchSize", "+model.fail_at=4",
                    "+model.error=nan_loss")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "sqlalchemy" not in done.stderr.lower()
    store = [x for x in done.stderr.splitlines() if "MLflow tracking" in x]
    assert len(store) == 1 and "read-only" in store[0] and "harness-mlflow-upload" in store[0]
    nan = [x for x in done.stderr.splitlines() if "NaN or infinite" in x]
    assert len(nan) == 1 and "nonfinite_loss" in nan[0]
    result = json.loads(next(tmp_path.glob("outputs/*/*/result.json")).read_text())
    assert result["status"] == "ok" and "nonfinite_loss" in result["flags"]
    assert result["tracking"]["logged"] is False and "read-only" in result["tracking"]["failure"]


# -- interruptions ----------------------------------------------------------------------------

# Thresholds no figure reaches: a busy machine makes steps noisy or contended, and the run
# would rightly say so in a line of its own (docs/presets/speed.md).
QUALITY_FLAGS_OFF = ("profiler.speed.noisy_above=1000", "profiler.speed.noisy_mean_over_median=1000",
                     "profiler.speed.contended_above=1000")


def _start(cwd: Path, *args: str, flags: tuple[str, ...] = ()) -> ForkedRun:
    return start_harness(cwd, *flags, *FAST, *args)


def _stop(proc: ForkedRun, signum: int) -> tuple[int, str, str]:
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


@pytest.mark.slow
def test_sigint_mid_run_is_one_line_and_an_interrupted_result(tmp_path):
    steps = tmp_path / "steps.txt"
    proc = _start(tmp_path, "mode=train", "data.train_batches=100000",
                  "profiler.speed.warmup_steps=2", *QUALITY_FLAGS_OFF, *beacon(steps))
    wait_for_steps(steps, at_least=14, timeout=120, proc=proc)  # not thin: no other line
    code, _, err = _stop(proc, signal.SIGINT)
    assert code == 130
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("harness")]
    assert len(lines) == 1 and "interrupted by SIGINT (Ctrl-C)" in lines[0], err[-2000:]
    run_dir = next(tmp_path.glob("outputs/*/*"))
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "interrupted" and "SIGINT" in result["reason"]
    assert (run_dir / "reports" / "speed.json").is_file()  # the steps measured so far


def test_ctrl_c_while_the_target_is_imported(tmp_path):
    started = tmp_path / "importing"
    (tmp_path / "slow_import.py").write_text(
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).write_text('x')\n"
        "time.sleep(120)\n")
    proc = start_harness(tmp_path, "logger=none", "model._target_=slow_import.Model",
                         env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{run_env()['PYTHONPATH']}"})
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    code, _, err = _stop(proc, signal.SIGINT)
    assert code == 130
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("harness")]
    assert len(lines) == 1 and "interrupted by SIGINT" in lines[0], err[-2000:]
    result = json.loads(next(tmp_path.glob("outputs/*/*/result.json")).read_text())
    assert result["status"] == "interrupted"


@pytest.mark.slow
def test_sigterm_mid_sweep_keeps_the_table_and_kills_the_parent_run(tmp_path):
    """Job 0 finishes, job 1 is stopped mid-training: the table of what finished is written,
    the user is told how to rebuild it, and the MLflow parent run is KILLED, not RUNNING."""
    steps = tmp_path / "steps.txt"
    proc = _start(tmp_path, "logger=mlflow", "mode=train", "profiler.speed.warmup_steps=2",
                  "data.train_batches=12,100000", *beacon(steps), flags=("-m",))
    wait_for_steps(steps, at_least=20, timeout=180, proc=proc)  # only job 1 gets that far
    code, out, err = _stop(proc, signal.SIGTERM)
    assert code == 143
    assert "Traceback" not in err
    sweep = next(tmp_path.glob("multirun/*/*"))
    # the table of what finished reaches the terminal, not only comparison.md
    assert f"comparison: {sweep.relative_to(tmp_path)}/comparison.md" in out + err, out[-3000:]
    told = [x for x in err.splitlines() if "the sweep was interrupted" in x]
    rebuild = f"harness-report {sweep.relative_to(tmp_path)}"  # as typed where it ran
    assert len(told) == 1 and rebuild in told[0], err[-3000:]
    table = (sweep / "comparison.md").read_text()
    assert "interrupted" in table
    statuses = {p.parent.name: json.loads(p.read_text())["status"]
                for p in sweep.glob("*/result.json")}
    assert statuses == {"0": "ok", "1": "interrupted"}
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("harness").experiment_id])
    parent = next(r for r in runs if r.data.tags.get("harness.kind") == "sweep")
    assert parent.info.status == "KILLED"
    assert "comparison.md" in {a.path for a in client.list_artifacts(parent.info.run_id)}


# -- nothing lost -----------------------------------------------------------------------------

@pytest.mark.slow
def test_four_concurrent_runs_in_one_directory_each_keep_their_own_files(tmp_path):
    """Started in the same second: 4 run directories, 4 result.json, 4 FINISHED MLflow runs,
    each holding its own result.json."""
    procs = [start_harness(tmp_path, *SMALL, "logger=mlflow", f"seed={seed}", fast=True)
             for seed in range(4)]
    errors = [proc.communicate(timeout=300)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0, 0], errors
    run_dirs = sorted(p.parent for p in tmp_path.glob("outputs/*/*/result.json"))
    assert len(run_dirs) == 4, run_dirs
    results = {d: json.loads((d / "result.json").read_text()) for d in run_dirs}
    assert sorted(r["knobs"]["seed"] for r in results.values()) == [0, 1, 2, 3]
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("harness").experiment_id])
    assert len(runs) == 4 and {r.info.status for r in runs} == {"FINISHED"}
    by_id = {r.info.run_id: r for r in runs}
    for result in results.values():
        run_id = result["tracking"]["run_id"]
        logged = json.loads(Path(client.download_artifacts(
            run_id, "result.json", str(tmp_path / "dl" / run_id))).read_text())
        assert logged == result  # its own file, not another run's
        assert by_id[run_id].data.params["seed"] == str(result["knobs"]["seed"])


@pytest.mark.slow
def test_a_store_that_disappears_mid_run_loses_nothing_and_the_upload_works(tmp_path):
    db = tmp_path / "mlflow.db"
    done = run_harness(tmp_path, "mode=train", "trainer.max_steps=8", "logger=mlflow",
                       "profiler.speed.warmup_steps=2",
                       "+profiler.breaker._target_=store_breaker.RemoveStore",
                       f"+profiler.breaker.path={db}")
    assert done.returncode == 0, done.stderr[-3000:]
    warning = [x for x in done.stderr.splitlines() if "MLflow tracking" in x]
    assert len(warning) == 1, done.stderr[-3000:]
    assert "the store is gone" in warning[0]
    for step in ("params", "final metrics", "artifacts", "end status"):
        assert step in warning[0].split("not logged:")[1], warning[0]
    run_dir = done.run_dir()
    assert {"result.json", "reports/speed.json", "reports/speed_steps.csv"} <= _files(run_dir)
    result = done.result()
    assert result["status"] == "ok" and result["tracking"]["logged"] is False
    upload = shlex.split(warning[0].split("Upload them later with: ")[1])
    assert upload == shlex.split(result["tracking"]["upload_command"])
    uploaded = subprocess.run(upload, cwd=tmp_path, env=run_env(), capture_output=True,
                              text=True, timeout=300)
    assert uploaded.returncode == 0, uploaded.stderr
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    (run,) = client.search_runs([client.get_experiment_by_name("harness").experiment_id])
    assert run.info.status == "FINISHED"
    assert {"result.json", "reports"} <= {a.path for a in client.list_artifacts(run.info.run_id)}


# -- harness-report ---------------------------------------------------------------------------

def _sweep_on_disk(root: Path) -> Path:
    for job, size in (("0", 1), ("1", 2)):
        (root / job / ".hydra").mkdir(parents=True)
        (root / job / ".hydra" / "overrides.yaml").write_text(f"- batch_size={size}\n")
        (root / job / "result.json").write_text(json.dumps({
            "schema_version": 2, "status": "ok", "overrides": [f"batch_size={size}"],
            "metrics": {"train_examples_per_second": 10.0 * size}}))
    return root


def test_report_into_a_read_only_sweep_dir(tmp_path):
    sweep = _sweep_on_disk(tmp_path / "sweep")
    sweep.chmod(0o555)
    before = _files(tmp_path)
    exe = shutil.which("harness-report", path=str(Path(harness_command()[0]).parent))
    done = subprocess.run([*_unprivileged(), exe, str(sweep)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    errors = [x for x in done.stderr.splitlines() if "error:" in x]
    assert "Traceback" not in done.stderr and len(errors) == 1, done.stderr
    assert f"{sweep}/comparison" in errors[0] and "--no-write" in errors[0]
    assert _files(tmp_path) == before


def test_report_piped_into_head_still_writes_its_out_files(tmp_path):
    a, b = _sweep_on_disk(tmp_path / "a"), _sweep_on_disk(tmp_path / "b")
    exe = shutil.which("harness-report", path=str(Path(harness_command()[0]).parent))
    command = f"{shlex.quote(exe)} {a} {b} --out {tmp_path / 'd'} | head -1"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert {p.name for p in (tmp_path / "d").iterdir()} == {"diff.md", "diff.csv", "diff.json"}
    assert harness_report(str(a), "--no-write").returncode == 0  # and the sweeps still read
