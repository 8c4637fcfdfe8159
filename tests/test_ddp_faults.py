"""A DDP sweep outlives its failed jobs (#23): 2 gloo ranks on CPU, in one sweep process.

Lightning's child-process observer SIGKILLed the launching process, the sweep itself, within
5 s of a rank exiting non-zero: the sweep died (exit 137) during the job after the first
OOM, without its table, and left a rank blocked in its rendezvous behind. Kept cheap: tiny
data, one sweep for every kind of failure, logger=none, profiler=[speed], mode=train.
"""

from __future__ import annotations

import csv
import json
import subprocess

import pytest
from conftest import job_results, run_harness, sweep_dir

pytestmark = pytest.mark.slow

TINY = ("data.train_batches=6", "data.val_batches=2", "data.seq_len=8", "data.dim=16",
        "model.depth=1", "trainer.enable_progress_bar=false", "logger=none", "profiler=[speed]",
        "profiler.speed.warmup_steps=1", "mode=train")
DDP = ("trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu")
# Planted truth, by batch size: which global ranks raise torch.OutOfMemoryError in their
# training step (the other rank waits in the gradient all-reduce), or fail building the
# module (before the process group forms: rank 0 waits in its rendezvous).
OOM_RANKS = {8: [0, 1], 6: [1], 3: [0]}
BUILD_FAILS = {5: [1]}
EXPECTED = {8: "oom", 6: "oom", 3: "oom", 5: "failed", 2: "ok"}


def _mapping(ranks: dict[int, list[int]]) -> str:
    return "{" + ",".join(f"{size}:[{','.join(map(str, r))}]" for size, r in ranks.items()) + "}"


def test_a_ddp_sweep_outlives_its_failed_jobs_and_writes_its_table(tmp_path, monkeypatch):
    # Unset, as in a user's shell (conftest sets it for the suite): Lightning sets it for DDP
    # in each job, and each job must put it back.
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
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
    assert by_size[8]["reason"].startswith("out of memory: CUDA out of memory")
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
    assert ending == {"rank": 1, "status": "ok", "reason": None, "error_log": None}
    for result in jobs.values():  # Lightning set it for DDP; each job put it back
        assert "env:OMP_NUM_THREADS" in result["isolation"]["torch_settings_put_back"]
    # No rank outlived its job (rank 1 of job 3 was blocked in the all-reduce).
    leftover = subprocess.run(["pgrep", "-f", str(root)], capture_output=True, text=True)
    assert leftover.stdout == "", f"ranks outlived the sweep: {leftover.stdout}"


def _job(jobs: dict[int, dict], batch_size: int) -> str:
    return str(next(job for job, r in jobs.items() if r["knobs"]["batch_size"] == batch_size))
