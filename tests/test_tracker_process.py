"""MLflow runs in a tracker process beside the job (harness.tracking.tracker): what the job sends
is in the store however the job ends (Ctrl-C to the whole process group, the job killed
outright). That the job's own process never loads MLflow: tests/test_tracking.py's default
store test, on the run whose store it reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from conftest import run_harness, start_harness
from forked_harness import ForkedRun, _fork_trackers_too
from step_beacon import beacon, wait_for_steps

LONG_RUN = ("logger=mlflow", "mode=train", "data.train_batches=100000",
            "profiler.speed.warmup_steps=2")


def test_a_closed_tracker_leaves_no_pipe_open(tmp_path, monkeypatch):
    """close() waits for the tracker's end and closes both its pipes: one left open is a
    ResourceWarning as the job's interpreter exits."""
    from harness.tracking import tracker

    monkeypatch.setattr(tracker, "subprocess", tracker.subprocess)  # put back after the test
    _fork_trackers_too()
    opened = tracker.Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", (10, 2))
    opened.close()
    assert opened.process.poll() == 0
    assert opened.process.stdin.closed and opened.process.stdout.closed


def _start(cwd: Path, steps: Path) -> ForkedRun:
    # A session of its own: the test signals the job's whole process group, as a terminal does.
    return start_harness(cwd, *LONG_RUN, *beacon(steps), fast=True, new_session=True)


def _only_run(tmp_path: Path, ended_within_s: float = 60):
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    deadline = time.monotonic() + ended_within_s
    while True:
        (run,) = client.search_runs([client.get_experiment_by_name("harness").experiment_id])
        if run.info.status != "RUNNING" or time.monotonic() > deadline:
            return client, run
        time.sleep(0.5)


def _tracker_pids(job: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(job), "-f", "harness.tracking.tracker_process"],
                           capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def test_a_signal_to_the_process_group_leaves_the_whole_run_in_the_store(tmp_path):
    """Ctrl-C in a terminal, or SLURM's SIGTERM: the whole process group gets it, the tracker
    too, which stays for the job's last calls. The tracker gets a Ctrl-C first (its own: the
    job goes on), then the group SIGTERM; how the job ends on a Ctrl-C is the same ending
    (harness.launch.signals; tests/test_corpus_runs.py's SIGINT test)."""
    steps = tmp_path / "steps.txt"
    proc = _start(tmp_path, steps)
    wait_for_steps(steps, at_least=6, timeout=180, proc=proc)
    (tracker,) = _tracker_pids(proc.pid)
    os.kill(tracker, signal.SIGINT)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    result = json.loads(next(tmp_path.glob("outputs/*/*/result.json")).read_text())
    assert result["status"] == "interrupted"
    assert result["tracking"]["logged"] is True, result["tracking"]
    client, run = _only_run(tmp_path, ended_within_s=0)  # complete when harness returned
    assert run.info.status == "KILLED"
    assert run.data.params["data.train_batches"] == "100000"
    assert run.data.metrics["train_measured_steps"] == result["metrics"]["train_measured_steps"]
    assert "result.json" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_a_killed_job_leaves_its_run_killed_not_running(tmp_path):
    steps = tmp_path / "steps.txt"
    proc = _start(tmp_path, steps)
    wait_for_steps(steps, at_least=6, timeout=180, proc=proc)
    proc.kill()  # SIGKILL: the job writes nothing more; its tracker sees the pipe close
    proc.communicate(timeout=60)
    _, run = _only_run(tmp_path)
    assert run.info.status == "KILLED"


def test_a_config_error_leaves_no_store_behind(tmp_path):
    """The tracker starts before the config checks, but a new store is made only for a run."""
    done = run_harness(tmp_path, "logger=mlflow", "+bacth_size=4")
    assert done.returncode == 2, done.stderr[-2000:]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_a_sweeps_jobs_share_one_tracker(tmp_path):
    """Hydra's basic launcher runs the jobs in one process: one tracker for the parent run and
    both children (one MLflow import, one open store)."""
    count = tmp_path / "trackers"
    done = run_harness(tmp_path, "hydra.mode=MULTIRUN", "logger=mlflow", "mode=train", "seed=0,1",
                       "+hydra.callbacks.count._target_=tracker_count.CountTrackers",
                       f"+hydra.callbacks.count.path={count}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert count.read_text() == "1"  # written as the sweep's process exits
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("harness").experiment_id])
    parent = [r for r in runs if r.data.tags.get("harness.kind") == "sweep"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parent) == 1 and len(children) == 2, [r.info.run_name for r in runs]
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert "comparison.md" in {a.path for a in client.list_artifacts(parent[0].info.run_id)}
    for job in sorted(tmp_path.glob("multirun/*/*/*/result.json")):
        tracking = json.loads(job.read_text())["tracking"]
        assert tracking["logged"] is True and tracking["parent_run_id"] == parent[0].info.run_id


def test_a_sweep_jobs_late_tracking_failure_still_reaches_its_result_json(tmp_path):
    """A sweep's job does not wait for its MLflow writes (the next job's run waits for them):
    when they fail, the job's result.json still ends up saying so, and what to upload. Job 0
    removes the store when its training ends (job 1 removes a file of no account)."""
    db, spare = tmp_path / "mlflow.db", tmp_path / "spare.txt"
    spare.write_text("x")
    done = run_harness(tmp_path, "hydra.mode=MULTIRUN", "logger=mlflow", "mode=train",
                       "+profiler.breaker._target_=store_breaker.RemoveStore",
                       f"+profiler.breaker.path={db},{spare}")
    assert done.returncode == 0, done.stderr[-3000:]
    job0, job1 = (json.loads(p.read_text()) for p in
                  sorted(tmp_path.glob("multirun/*/*/[01]/result.json")))
    assert job0["status"] == job1["status"] == "ok"
    for job in (job0, job1):
        assert job["tracking"]["logged"] is False, job["tracking"]
        assert "harness-mlflow-upload" in job["tracking"]["upload_command"]
    assert "end status" in "; ".join(job0["tracking"]["not_logged"])  # its end never went in
    assert "the whole run" in job1["tracking"]["not_logged"]  # no store to start a run in
    sweep = next(tmp_path.glob("multirun/*/*"))
    warned = [x for x in done.stderr.splitlines() if f"Reports are on disk in {sweep}/0." in x]
    assert len(warned) == 1 and "MLflow tracking" in warned[0], done.stderr[-3000:]
