"""Sweeps on a real single-node SLURM cluster (scripts/local_slurm), through submitit.

The cluster is started once per test session and shared; every test uses its
own directory, hence its own submitit folder. Every wait is bounded.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST, harness_report, job_results, run_harness, start_harness, sweep_dir
from forked_harness import ForkedRun
from step_beacon import beacon, run_env, wait_for_steps

# One worker runs them all (pytest-xdist): the cluster and its state directory are shared.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts" / "local_slurm"
STATE_DIR = Path(os.environ.get("HARNESS_SLURM_STATE_DIR", "/tmp/harness-slurm"))
# The built-in workload, small; batch_size is left to each test.
SMALL = tuple(o for o in FAST if not o.startswith("batch_size="))


@pytest.fixture(scope="session")
def slurm_env() -> Any:
    """Environment for processes that talk to the local cluster; starts it if needed."""
    if os.geteuid() != 0:
        pytest.skip("local SLURM needs root: scripts/local_slurm/start.sh runs slurmd as root")
    if shutil.which("sbatch") is None and shutil.which("apt-get") is None:
        pytest.skip("SLURM is not installed and apt-get is unavailable to install it")
    # start.sh gives the node `nproc` CPUs, which OMP_NUM_THREADS (conftest: 1) would lower
    machine = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    start = subprocess.run(["bash", str(SCRIPTS / "start.sh"), str(STATE_DIR)],
                           capture_output=True, text=True, timeout=900, env=machine)
    if start.returncode != 0:
        pytest.fail(f"scripts/local_slurm/start.sh failed:\n{start.stderr[-3000:]}")
    env = {**run_env(), "SLURM_CONF": str(STATE_DIR / "slurm.conf"),
           # sacct shim: submitit notices cancelled/failed jobs without accounting
           "PATH": f"{STATE_DIR / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    yield env
    if "cluster up" in start.stderr:  # stop only a cluster this session started
        subprocess.run(["bash", str(SCRIPTS / "stop.sh"), str(STATE_DIR)],
                       capture_output=True, timeout=120)


def squeue(env: dict[str, str], *args: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-r", *args], env=env, capture_output=True,
                         text=True, timeout=30)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def start_sweep(cwd: Path, env: dict[str, str], *overrides: str) -> ForkedRun:
    return start_harness(cwd, "-m", *SMALL, *overrides, env=env)


def assert_table(root: Path, batch_sizes: set[int]) -> None:
    with (root / "comparison.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {int(r["batch_size"]) for r in rows} == batch_sizes and len(rows) == len(batch_sizes)


# ---------------------------------------------------------------- the command
@pytest.fixture(scope="module")
def submitit_sweep(slurm_env, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("submitit_slurm")
    done = run_harness(cwd, "-m", "hydra/launcher=submitit_slurm", *SMALL, "mode=train",
                       "batch_size=1,2",
                       fast=False, env=slurm_env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_submitit_slurm_sweep_runs_one_slurm_job_per_point(submitit_sweep, slurm_env):
    root = sweep_dir(submitit_sweep.cwd)
    jobs = job_results(root)
    assert sorted(jobs) == [0, 1]
    node = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    for num, result in jobs.items():
        assert result["status"] == "ok", result["reason"]
        assert result["knobs"]["batch_size"] == num + 1
        slurm = result["slurm"]
        assert isinstance(slurm["job_id"], int)
        assert slurm["array_task_id"] in (0, 1)
        assert slurm["partition"] == "debug"
        assert slurm["node_list"] == node
        # the id SLURM itself knows (the job leaves RUNNING just after its result is written),
        # and submitit's folder named after it
        array_task = slurm["submitit_job_id"]
        assert array_task == f"{slurm['array_job_id']}_{slurm['array_task_id']}"
        state = ["-t", "all", "-j", array_task, "-o", "%i %T"]
        wait_until(lambda: squeue(slurm_env, *state) == [f"{array_task} COMPLETED"],  # noqa: B023
                   60, f"SLURM to list job {array_task} as COMPLETED")
        assert (root / ".submitit" / slurm["submitit_job_id"]).is_dir()
        report = json.loads((root / str(num) / "reports" / "slurm.json").read_text())
        assert report["job_id"] == slurm["job_id"]
        assert "reports/slurm.json" in result["reports"]
        assert result["metrics"]["train_examples_per_second"] > 0
    assert len({r["slurm"]["array_job_id"] for r in jobs.values()}) == 1  # one job array
    assert {r["slurm"]["array_task_id"] for r in jobs.values()} == {0, 1}


def test_submitit_slurm_sweep_writes_the_comparison_table(submitit_sweep):
    root = sweep_dir(submitit_sweep.cwd)
    assert_table(root, {1, 2})


# ---------------------------------------------------------------- submitter killed mid-sweep
@pytest.fixture(scope="module")
def killed_sweep(slurm_env, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("killed")
    name = f"harness-killed-{os.getpid()}"
    proc = start_sweep(cwd, slurm_env, "hydra/launcher=slurm", "mode=train", "batch_size=1,2",
                       f"hydra.launcher.name={name}", "hydra.launcher.array_parallelism=2")
    try:
        wait_until(lambda: len(squeue(slurm_env, "-n", name)) == 2, 60, "both jobs queued")
        wait_until(lambda: any(" R" in j for j in squeue(slurm_env, "-n", name, "-o", "%i %t")),
                   60, "a job to run")
    finally:
        proc.send_signal(signal.SIGKILL)  # the submitting process dies mid-sweep
        proc.communicate(timeout=30)
    wait_until(lambda: not squeue(slurm_env, "-n", name, "-t", "PD,R,CG"), 240,
               "the jobs to finish without their submitter")
    return sweep_dir(cwd)


def test_jobs_outlive_a_killed_submitter(killed_sweep):
    jobs = job_results(killed_sweep)
    assert sorted(jobs) == [0, 1]
    assert all(r["status"] == "ok" for r in jobs.values()), jobs
    assert not (killed_sweep / "comparison.csv").exists()  # the submitter never wrote it


def test_harness_report_rebuilds_the_table_of_a_killed_sweep(killed_sweep):
    done = harness_report(str(killed_sweep))
    assert done.returncode == 0, done.stderr[-3000:]
    assert_table(killed_sweep, {1, 2})


# ---------------------------------------------------------------- preemption
def test_preemption_signal_flushes_partial_reports(slurm_env, tmp_path):
    steps = tmp_path / "steps.txt"
    name = f"harness-preempt-{os.getpid()}"
    proc = start_sweep(tmp_path, slurm_env, "hydra/launcher=slurm", "mode=train",
                       "batch_size=4", "data.train_batches=100000",
                       "profiler.speed.warmup_steps=2", *beacon(steps),
                       f"hydra.launcher.name={name}")
    try:
        wait_for_steps(steps, at_least=10, timeout=120, proc=proc)
        (job,) = squeue(slurm_env, "-n", name, "-o", "%i")
        # what SLURM sends signal_delay_s before the time limit (submitit's --signal=USR2@N)
        subprocess.run(["scancel", "--signal=USR2", job], env=slurm_env, check=True, timeout=30)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            subprocess.run(["scancel", "-n", name], env=slurm_env, timeout=30)
    log = out + err
    assert "Traceback" not in log
    # the job ended normally after flushing, so the submitter heard of it at once: its
    # progress line says how (harness.sweep.progress)
    assert re.search(r"harness: error: job 1/1 .*: interrupted: interrupted by SIGUSR2", log), log

    (result,) = job_results(sweep_dir(tmp_path)).values()
    assert result["status"] == "interrupted"
    assert result["reason"].startswith("interrupted by SIGUSR2")
    assert str(result["slurm"]["job_id"]) in job or job.startswith(
        str(result["slurm"]["array_job_id"]))
    run_dir = sweep_dir(tmp_path) / "0"
    speed = json.loads((run_dir / "reports" / "speed.json").read_text())
    measured = speed["phases"]["train"]["measured_steps"]
    assert measured >= 8  # the 10 steps seen, less 2 warm-up steps
    assert result["metrics"]["train_measured_steps"] == measured
    assert (run_dir / "reports" / "slurm.json").exists()


# ---------------------------------------------------------------- bad resource requests
def test_rejected_requests_fail_alone_with_one_line_each(slurm_env, tmp_path):
    # One sweep, one good job and four bad ones. Resources are set per job by
    # interpolating a swept key (Hydra does not sweep hydra.* keys directly).
    cases = ("{p:debug,c:1,g:null,t:1}", "{p:nosuch,c:1,g:null,t:1}", "{p:debug,c:3,g:null,t:1}",
             "{p:debug,c:1,g:1,t:1}", "{p:debug,c:1,g:null,t:2}")
    done = run_harness(
        tmp_path, "-m", "hydra/launcher=slurm", *SMALL, "mode=train",
        "hydra.launcher.partition=${oc.select:r.p,debug}",
        "hydra.launcher.cpus_per_task=${oc.select:r.c,1}",
        "hydra.launcher.gpus_per_node=${oc.select:r.g,null}",
        "hydra.launcher.tasks_per_node=${oc.select:r.t,1}",
        "+r=" + ",".join(cases), fast=False, env=slurm_env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("harness: error:")]
    assert len(errors) == 4, errors
    expected = {1: "invalid partition", 2: "More processors requested than permitted",
                3: "Invalid generic resource", 4: "tasks_per_node=2 but trainer.devices=1"}
    jobs = job_results(sweep_dir(tmp_path))
    assert sorted(jobs) == [0, 1, 2, 3, 4]
    assert jobs[0]["status"] == "ok"  # the good job still ran
    assert isinstance(jobs[0]["slurm"]["job_id"], int)
    for num, needle in expected.items():
        assert jobs[num]["status"] == "failed"
        assert needle in jobs[num]["reason"] and "Fix:" in jobs[num]["reason"]
        (line,) = [e for e in errors if f"job {num + 1}/5 " in e]
        assert needle in line


# ---------------------------------------------------------------- DDP under SLURM
def test_ddp_under_slurm_uses_one_task_per_rank(slurm_env, tmp_path):
    done = run_harness(tmp_path, "-m", "hydra/launcher=slurm", *SMALL, "batch_size=4",
                       "mode=train", "trainer.strategy=ddp", "trainer.devices=2",
                       "trainer.accelerator=cpu", "hydra.launcher.cpus_per_task=1",
                       fast=False, env=slurm_env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()  # one result.json: rank 1 wrote none
    assert result["status"] == "ok", result["reason"]
    assert result["distributed"]["cluster_environment"] == "SLURMEnvironment"
    assert result["device"]["world_size"] == 2
    assert result["slurm"]["ntasks_per_node"] == "2"
    train = done.report("speed")["phases"]["train"]
    assert [r["rank"] for r in train["per_rank"]] == [0, 1]
    # every rank's examples over the slowest rank's window (issue 35)
    assert train["examples_per_second"] == pytest.approx(
        sum(r["examples"] for r in train["per_rank"])
        / max(r["measured_time_s"] for r in train["per_rank"]))
