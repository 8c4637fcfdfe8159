"""Multi-process (DDP) runs and signal handling on this machine, without SLURM."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import FAST, harness_command
from step_beacon import beacon, run_env, wait_for_steps

pytestmark = pytest.mark.slow

DDP = ("trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu",
       "profiler.speed.warmup_steps=1")


def test_ddp_on_cpu_reports_once_with_per_rank_figures(harness):
    # A one-point sweep: the Hydra + DDP trap is worst in multirun mode, where
    # Lightning's own re-launch of rank 1 would start a sweep of its own.
    done = harness("-m", *FAST, *DDP, "mode=train", "data.val_batches=2", fast=False)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = done.run_dir()  # exactly one result.json: rank 1 wrote none
    assert run_dir.name == "0" and run_dir.parent.parent.parent.name == "multirun"
    assert not (done.cwd / "outputs").exists(), "rank 1 created a Hydra run directory"
    assert [p.name for p in run_dir.parent.iterdir() if p.is_dir()] == ["0"]
    assert (run_dir / "ddp_rank1.log").exists()  # rank 1 ran, in this job's directory

    result = done.result()
    assert result["status"] == "ok"
    assert result["device"]["world_size"] == 2
    assert result["distributed"]["strategy"] == "DDPStrategy"

    speed = done.report("speed")
    assert speed["world_size"] == 2
    train = speed["phases"]["train"]
    assert train["ranks_measured"] == 2
    ranks = train["per_rank"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        # each rank's own figures: 12 batches of 4 examples, 1 warm-up step left out
        assert r["measured_steps"] == 11
        assert r["examples"] == 11 * 4
        assert math.isclose(r["examples_per_second"], r["examples"] / r["measured_time_s"])
    total = sum(r["examples_per_second"] for r in ranks)
    assert math.isclose(train["examples_per_second"], total, rel_tol=1e-12)
    assert math.isclose(result["metrics"]["train_examples_per_second"], total, rel_tol=1e-12)

    reports = run_dir / "reports"
    assert sorted(p.name for p in reports.glob("speed_steps_rank*.csv")) == [
        "speed_steps_rank0.csv", "speed_steps_rank1.csv"]
    for rank in (0, 1):
        rows = list(csv.DictReader((reports / f"speed_steps_rank{rank}.csv").open()))
        assert {row["rank"] for row in rows} == {str(rank)}
        assert len([row for row in rows if row["phase"] == "train"]) == 12


def test_ddp_ranks_compose_the_users_own_config_dir(harness):
    """Rank 1 is started with the job's -cd: the user's model=tiny is an option there too."""
    from conftest import TESTS_DIR

    done = harness("--config-dir", str(TESTS_DIR / "user_conf"), "model=tiny", "data=tiny",
                   "batch_size=8", *DDP, "mode=train", "trainer.enable_progress_bar=false",
                   "logger=none", fast=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "ok" and result["device"]["world_size"] == 2
    assert done.report("speed")["phases"]["train"]["ranks_measured"] == 2


def test_ddp_writes_one_mlflow_run(harness):
    import mlflow

    done = harness(*DDP, "mode=train", "logger=mlflow")
    assert done.returncode == 0, done.stderr[-3000:]
    client = mlflow.MlflowClient(f"sqlite:///{done.cwd / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments)
    assert len(runs) == 1  # rank zero only
    assert runs[0].data.params["trainer.devices"] == "2"


def test_sigterm_writes_partial_reports_with_status_interrupted(tmp_path: Path):
    total = 100_000  # far more steps than the test waits for
    steps = tmp_path / "steps.txt"
    overrides = [*FAST, f"data.train_batches={total}", "mode=train",
                 "profiler.speed.warmup_steps=2", *beacon(steps)]
    err = tmp_path / "stderr.txt"
    with err.open("w") as stderr:
        proc = subprocess.Popen([*harness_command(), *overrides], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=stderr, env=run_env())
        try:
            wait_for_steps(steps, at_least=10, timeout=120, proc=proc)
            proc.send_signal(signal.SIGTERM)
            returncode = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert returncode != 0
    text = err.read_text()
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
