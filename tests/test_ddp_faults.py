"""A DDP sweep outlives its failed jobs (#23): 2 gloo ranks on CPU, in one sweep process.

Lightning's child-process observer SIGKILLed the launching process, the sweep itself, within
5 s of a rank exiting non-zero: the sweep died (exit 137) during the job after the first
OOM, without its table, and left a rank blocked in its rendezvous behind. Kept cheap: tiny
data, one sweep for every kind of failure, logger=none, profiler=[speed], mode=train; how
rank 0 folds endings that need no process of their own is checked in-process.
"""

from __future__ import annotations

import csv
import json
import socket
import subprocess

import forked_harness
import psutil
import pytest
from conftest import job_results, run_harness, sweep_dir

TINY = ("data.train_batches=6", "data.val_batches=2", "data.seq_len=8", "data.dim=16",
        "model.depth=1", "trainer.enable_progress_bar=false", "logger=none", "profiler=[speed]",
        "profiler.speed.warmup_steps=1", "mode=train")
DDP = ("trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu")
# Planted truth, by batch size: which global rank raises torch.OutOfMemoryError in its
# training step (the other rank waits in the gradient all-reduce), or fails building the
# module (before the process group forms: rank 0 waits in its rendezvous).
OOM_RANKS = {6: [1], 3: [0]}
BUILD_FAILS = {5: [1]}
EXPECTED = {6: "oom", 3: "oom", 5: "failed", 2: "ok"}


def _mapping(ranks: dict[int, list[int]]) -> str:
    return "{" + ",".join(f"{size}:[{','.join(map(str, r))}]" for size, r in ranks.items()) + "}"


@pytest.mark.slow
def test_a_ddp_sweep_outlives_its_failed_jobs_and_writes_its_table(tmp_path):
    done = run_harness(tmp_path, "-m", *TINY, *DDP,
                       f"batch_size={','.join(map(str, EXPECTED))}",
                       "model._target_=failing_module.FailAtBatchSize", "+model.error=oom",
                       f"+model.fail_ranks={_mapping(OOM_RANKS)}",
                       f"+model.build_fail_ranks={_mapping(BUILD_FAILS)}",
                       "+model.batch_size=${batch_size}", fast=False, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    root = sweep_dir(tmp_path)
    jobs = job_results(root)
    by_size = {r["knobs"]["batch_size"]: r for r in jobs.values()}
    assert {size: r["status"] for size, r in by_size.items()} == EXPECTED
    # An OOM on one rank is the point's, said with the rank; rank 0's own error (the echo
    # "Connection closed by peer" of rank 1's end) does not hide it.
    assert by_size[6]["reason"].startswith("on rank 1: out of memory: CUDA out of memory")
    assert by_size[6]["error_log"] == "error_rank1.log"
    assert "OutOfMemoryError" in (root / _job(jobs, 6) / "error_rank1.log").read_text()
    assert by_size[3]["reason"].startswith("out of memory: CUDA out of memory")  # rank 0's own
    assert by_size[5]["reason"].startswith("on rank 1: model: could not build")
    # The last job ran after all of them, and the table holds every point.
    rows = {int(r["batch_size"]): r["status"]
            for r in csv.DictReader((root / "comparison.csv").open())}
    assert rows == EXPECTED
    ending = json.loads((root / _job(jobs, 2) / "rank_end_rank1.json").read_text())
    assert ending == {"rank": 1, "status": "ok", "reason": None, "error_log": None,
                      "node": socket.gethostname()}
    # No rank outlived its job (rank 1 of job 3 was blocked in the all-reduce).
    leftover = subprocess.run(["pgrep", "-f", str(root)], capture_output=True, text=True)
    assert leftover.stdout == "", f"ranks outlived the sweep: {leftover.stdout}"
    assert forked_harness.still_running() == []  # ranks forked as the sweep was (its command line)


def _job(jobs: dict[int, dict], batch_size: int) -> str:
    return str(next(job for job, r in jobs.items() if r["knobs"]["batch_size"] == batch_size))


def test_an_oom_on_every_rank_keeps_rank_zeros_own_reason():
    """Both ranks out of memory at once: rank 1's ending (oom, as the ranks of the sweep above
    write theirs) does not replace rank 0's own OOM."""
    from harness.launch.rank_processes import RankEnding, merge_rank_endings
    from harness.result.schema import RunResult

    result = RunResult(status="oom", reason="out of memory: CUDA out of memory (rank 0)")
    merge_rank_endings(result, [RankEnding(1, "oom", "out of memory: CUDA out of memory",
                                           "error_rank1.log")])
    assert (result.status, result.reason) == ("oom", "out of memory: CUDA out of memory (rank 0)")
    assert result.error_log is None


# tests/scaling_workload.py, a step of 0.1 s; rank 1 SIGKILLs itself in the forward of batch 3
LOST = ("model._target_=scaling_workload.PlantedScaling", "data._target_=scaling_workload.PlantedBatches",
        "+trainer.use_distributed_sampler=false", "trainer.accelerator=cpu",
        "profiler.speed.warmup_steps=2", "logger=none", "trainer.enable_progress_bar=false",
        "repeat=1", "+model.kill_at_step=3", "+data.batches=12")


@pytest.mark.slow
def test_a_rank_killed_mid_step_fails_its_point_at_once_naming_rank_and_node(tmp_path):
    """Issue 35: an OOM killer's SIGKILL of rank 2 of 3 mid-step (its peers then blocked in a
    collective) ends the point `failed` within seconds, in one line naming the rank and its node;
    no process of it is left, and the sweep's next point (2 ranks: no rank 2 to kill) runs. The
    scaling sweep's strategy node (its bounded collective timeout) passes the config checks on
    the way."""
    done = run_harness(tmp_path, "-m", "sweep=scaling", *LOST, "trainer.devices=3,2",
                       "+model.kill_rank=2", fast=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]  # a sweep with a measured point
    root = sweep_dir(tmp_path)
    jobs = job_results(root)
    lost, kept = (next(r for r in jobs.values() if f"trainer.devices={n}" in r["overrides"])
                  for n in (3, 2))
    said = f"rank 2 (node {socket.gethostname()}) was killed by SIGKILL mid-run"
    assert lost["status"] == "failed" and lost["reason"].startswith(said), lost["reason"]
    assert lost["duration_s"] < 60, lost["duration_s"]  # not gloo's 30-minute default timeout
    assert f"failed: {said}" in done.stderr  # the sweep's line for the job
    assert kept["status"] == "ok", kept["reason"]
    assert kept["scaling"]["world_size"] == 2
    left = [p.info for p in psutil.process_iter(["pid", "cmdline"])
            if any(str(root) in part for part in p.info["cmdline"] or ())]
    assert left == [], f"processes of the sweep outlived it: {left}"
    assert forked_harness.still_running() == []  # ranks forked as the sweep was (its command line)


def test_a_rank_started_elsewhere_that_never_said_how_it_ended_is_named_lost(tmp_path, monkeypatch):
    """Under srun (or on another node) rank 0 did not start its peers: it knows them by the file
    each writes as it starts and as its job ends; one that only said it runs was lost mid-run."""
    from harness.launch import rank_processes
    from harness.result.schema import RunResult

    monkeypatch.setattr(rank_processes, "WAIT_AFTER_FAILURE_S", 0.3)
    monkeypatch.setattr(rank_processes.socket, "gethostname", lambda: "node-b")
    rank_processes.start_ranks(tmp_path, 1, 3)  # rank 1, as it starts on node-b
    rank_processes.start_ranks(tmp_path, 2, 3)
    rank_processes.write_rank_ending(tmp_path, 2, RunResult(
        status="failed", reason="RuntimeError: Connection closed by peer [10.0.0.2]:1234"))
    rank_processes.start_ranks(tmp_path, 0, 3)  # rank 0
    endings = rank_processes.end_ranks(tmp_path, job_failed=True)
    assert [(e.rank, e.lost) for e in endings] == [(1, True), (2, False)]
    result = RunResult(status="failed", reason="RuntimeError: Connection closed by peer [10.0.0.2]:99")
    rank_processes.merge_rank_endings(result, endings)
    assert result.reason == ("rank 1 (node node-b) was lost mid-run without a word (killed by an"
                             " OOM killer or a preempted node, or hung?)")
