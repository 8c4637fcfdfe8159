"""Multi-process (DDP) runs and signal handling on this machine, without SLURM."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
from pathlib import Path

import pytest
from conftest import FAST, TESTS_DIR, start_harness
from step_beacon import beacon, wait_for_steps

pytestmark = pytest.mark.slow

DDP = ("trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu",
       "profiler.speed.warmup_steps=1")


def test_ddp_on_cpu_reports_once_with_per_rank_figures(harness):
    # A one-point sweep: the Hydra + DDP trap is worst in multirun mode, where
    # Lightning's own re-launch of rank 1 would start a sweep of its own. The user's own
    # config dir: rank 1 is started with the job's -cd, so model=tiny is an option there too.
    done = harness("-m", "--config-dir", str(TESTS_DIR / "user_conf"), "model=tiny",
                   "data=tiny", "batch_size=4", *DDP, "mode=train", "logger=mlflow",
                   "trainer.enable_progress_bar=false", fast=False)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = done.run_dir()  # exactly one result.json: rank 1 wrote none
    assert run_dir.name == "0" and run_dir.parent.parent.parent.name == "multirun"
    assert not (done.cwd / "outputs").exists(), "rank 1 created a Hydra run directory"
    assert [p.name for p in run_dir.parent.iterdir() if p.is_dir()] == ["0"]
    assert (run_dir / "ddp_rank1.log").exists()  # rank 1 ran, in this job's directory

    result = done.result()
    assert result["status"] == "ok"
    assert result["model"] == "user_workload.TinyClassifier"
    assert result["device"]["world_size"] == 2
    assert result["distributed"]["strategy"] == "DDPStrategy"

    speed = done.report("speed")
    assert speed["world_size"] == 2
    train = speed["phases"]["train"]
    assert train["ranks_measured"] == 2
    ranks = train["per_rank"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        # each rank's own figures: 96 examples split over 2 ranks, 12 batches of 4 each,
        # 1 warm-up step left out
        assert r["measured_steps"] == 11
        assert r["examples"] == 11 * 4
        assert math.isclose(r["examples_per_second"], r["examples"] / r["measured_time_s"])
    # every rank's examples over the slowest rank's window (issue 35), not a sum of rates
    total = sum(r["examples"] for r in ranks) / max(r["measured_time_s"] for r in ranks)
    assert math.isclose(train["examples_per_second"], total, rel_tol=1e-12)
    assert math.isclose(result["metrics"]["train_examples_per_second"], total, rel_tol=1e-12)

    # The diagnose preset (a default one) reads each rank's step parts from the timer of ranks.
    diagnosis = result["diagnosis"]
    assert [r["rank"] for r in diagnosis["communication_by_rank"]] == [0, 1]
    for rank in diagnosis["communication_by_rank"]:
        assert rank["comm_s"] > 0 and rank["compute_s"] > 0 and rank["straggler_wait_s"] >= 0

    reports = run_dir / "reports"
    assert sorted(p.name for p in reports.glob("speed_steps_rank*.csv")) == [
        "speed_steps_rank0.csv", "speed_steps_rank1.csv"]
    for rank in (0, 1):
        rows = list(csv.DictReader((reports / f"speed_steps_rank{rank}.csv").open()))
        assert {row["rank"] for row in rows} == {str(rank)}
        assert len([row for row in rows if row["phase"] == "train"]) == 12

    # One MLflow run for the job (rank zero's), under the sweep's parent run.
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{done.cwd / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    (job,) = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(runs) == 2 and job.data.params["trainer.devices"] == "2"
    assert job.info.run_id == result["tracking"]["run_id"]


def test_sigterm_writes_partial_reports_with_status_interrupted(tmp_path: Path):
    total = 100_000  # far more steps than the test waits for
    steps = tmp_path / "steps.txt"
    overrides = [*FAST, f"data.train_batches={total}", "mode=train",
                 "profiler.speed.warmup_steps=2", *beacon(steps)]
    proc = start_harness(tmp_path, *overrides)
    try:
        wait_for_steps(steps, at_least=10, timeout=120, proc=proc)
        proc.send_signal(signal.SIGTERM)
        _, text = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "harness: interrupted by SIGTERM" in text
    assert "Traceback" not in text

    run_dir = next(tmp_path.rglob("result.json")).parent
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "interrupted"
    assert result["reason"].startswith("interrupted by SIGTERM")
    speed = json.loads((run_dir / "reports" / "speed.json").read_text())
    measured = speed["phases"]["train"]["measured_steps"]
    assert measured >= 8  # at least the 10 steps seen, less the 2 warm-up steps
    assert result["metrics"]["train_measured_steps"] == measured
    assert speed["phases"]["train"]["examples_per_second"] > 0
    rows = list(csv.DictReader((run_dir / "reports" / "speed_steps.csv").open()))
    assert len(rows) == measured + 2
    assert os.path.exists(run_dir / "reports" / "speed.csv")
