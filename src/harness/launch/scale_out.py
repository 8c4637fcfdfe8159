"""The job-side hooks for clusters and multi-process runs, kept out of run/job.py."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.launch.signals import InterruptionSignals, stop_on_signals
from harness.launch.slurm_env import slurm_metadata
from harness.reports.files import write_json
from harness.run.result import RunRecord

SLURM_REPORT = "slurm.json"
# What Lightning's DDP launcher writes into rank 0's environment when it starts the other ranks.
_DDP_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")


@contextlib.contextmanager
def job_scope() -> Iterator[InterruptionSignals]:
    """One job: SIGTERM and the preemption signal stop it cleanly, and a DDP job leaves no
    process group or rank variables behind for the next job of a sweep run in this process
    (Lightning would otherwise take the next job for an already-started rank)."""
    saved = {name: os.environ.get(name) for name in _DDP_ENV}
    try:
        with stop_on_signals() as signals:
            yield signals
    finally:
        _end_process_group()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _end_process_group() -> None:
    if "torch" not in sys.modules:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def record_cluster(record: RunRecord) -> None:
    """Put SLURM's job id, array index, node list and partition into result.json."""
    meta = slurm_metadata()
    if meta is not None:
        record.details["slurm"] = meta


def handle_interruption(record: RunRecord, reason: str | None) -> bool:
    """After a run stopped: True if it was stopped by a signal and the job should end normally.

    A signalled run is `interrupted` and says by which signal. In a submitit job (one process
    per job) that is how the job ends: it returns, so submitit stores a result at once and
    the submitter moves on. Elsewhere the process exits with status 1 and no traceback; a
    local sweep asked to stop must stop. False (not signalled): the caller re-raises.
    """
    if reason is None:
        return False
    record.status, record.reason = "interrupted", reason
    from harness.launch.ranks import global_rank

    if global_rank() == 0:
        print(f"harness: {reason} (in {record.output_dir})", file=sys.stderr, flush=True)
    if "SUBMITIT_EXECUTOR" in os.environ:
        return True
    raise SystemExit(1)


def check_tasks_match_devices(trainer: Any, slurm: dict[str, Any] | None) -> None:
    """Under SLURM each task is one rank: tasks per node must equal the trainer's devices."""
    if not slurm:
        return
    tasks = slurm.get("ntasks_per_node")
    if tasks is not None and str(tasks).isdigit() and int(tasks) != trainer.num_devices:
        raise HarnessError(
            f"SLURM started {tasks} task(s) per node (hydra.launcher.tasks_per_node) but"
            f" trainer.devices={trainer.num_devices}: each task is one rank. Fix: make them equal,"
            f" e.g. hydra.launcher.tasks_per_node={trainer.num_devices}"
        )
    nodes = slurm.get("num_nodes")
    if nodes is not None and int(nodes) != trainer.num_nodes:
        raise HarnessError(
            f"SLURM gave the job {nodes} node(s) (hydra.launcher.nodes) but"
            f" trainer.num_nodes={trainer.num_nodes}. Fix: make them equal,"
            f" e.g. hydra.launcher.nodes={trainer.num_nodes}"
        )


def prepare_ranks(trainer: Any, record: RunRecord) -> None:
    """Before fit: check SLURM's tasks against the trainer; DDP ranks start in this job's dir."""
    from harness.launch.ddp import use_job_command_for_ranks

    check_tasks_match_devices(trainer, record.details.get("slurm"))
    environment = getattr(trainer.strategy, "cluster_environment", None)
    record.details["distributed"] = {
        "strategy": type(trainer.strategy).__name__,
        "world_size": trainer.world_size,
        "num_nodes": trainer.num_nodes,
        "devices_per_node": trainer.num_devices,
        "cluster_environment": type(environment).__name__ if environment is not None else None,
    }
    if trainer.world_size > 1:
        use_job_command_for_ranks()


def write_cluster_report(reports_dir: Path, record: RunRecord) -> None:
    """reports/slurm.json: the SLURM facts of the job, next to the reports they explain."""
    meta = record.details.get("slurm")
    if meta:
        write_json(reports_dir / SLURM_REPORT, {
            "report": "slurm",
            "what": "the SLURM job this run ran in (from the SLURM_* environment variables)",
            **meta,
        })
