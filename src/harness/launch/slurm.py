"""What SLURM tells a job about itself (its SLURM_* variables), for result.json and
reports/slurm.json; and the one check that SLURM's tasks match the Trainer."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

SLURM_REPORT = "slurm.json"
_FIELDS = {  # result.json's key: SLURM's variable
    "job_id": "SLURM_JOB_ID", "array_job_id": "SLURM_ARRAY_JOB_ID", "array_task_id": "SLURM_ARRAY_TASK_ID",
    "job_name": "SLURM_JOB_NAME", "partition": "SLURM_JOB_PARTITION", "node_list": "SLURM_JOB_NODELIST",
    "num_nodes": "SLURM_JOB_NUM_NODES", "ntasks": "SLURM_NTASKS", "ntasks_per_node": "SLURM_NTASKS_PER_NODE",
    "cpus_per_task": "SLURM_CPUS_PER_TASK", "gpus_on_node": "SLURM_GPUS_ON_NODE",
    "account": "SLURM_JOB_ACCOUNT", "qos": "SLURM_JOB_QOS", "submit_dir": "SLURM_SUBMIT_DIR"}
_INTEGERS = {"job_id", "array_job_id", "array_task_id", "num_nodes", "ntasks", "cpus_per_task",
             "gpus_on_node"}


def slurm_metadata(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """SLURM's facts about the current job, or None outside one; `submitit_job_id` is the id
    submitit and `squeue` show (`<array_job_id>_<array_task_id>` in an array)."""
    env = os.environ if environ is None else environ
    if "SLURM_JOB_ID" not in env:
        return None
    meta: dict[str, Any] = {key: int(value) if key in _INTEGERS and value.isdigit() else value
                            for key, var in _FIELDS.items() if (value := env.get(var))}
    if "array_job_id" in meta and "array_task_id" in meta:
        meta["submitit_job_id"] = f"{meta['array_job_id']}_{meta['array_task_id']}"
    else:
        meta["submitit_job_id"] = str(meta["job_id"])
    return meta


def launcher_mismatch(tasks: Any, nodes: Any, devices: Any, num_nodes: Any) -> str | None:
    """Under SLURM each task is one rank: tasks per node must equal trainer.devices, and nodes
    trainer.num_nodes (before submitting, and at a job's start). The first that differs, or None."""
    def whole(value: Any) -> int | None:
        text = str(value)
        return int(text) if text.isdigit() else None

    tasks, nodes, devices, num_nodes = whole(tasks), whole(nodes), whole(devices), whole(num_nodes)
    if None not in (tasks, devices) and tasks != devices:
        return (f"hydra.launcher.tasks_per_node={tasks} but trainer.devices={devices}"
                f" (one SLURM task per device). Fix: hydra.launcher.tasks_per_node={devices}")
    if None not in (nodes, num_nodes) and nodes != num_nodes:
        return (f"hydra.launcher.nodes={nodes} but trainer.num_nodes={num_nodes}."
                f" Fix: hydra.launcher.nodes={num_nodes}")
    return None
