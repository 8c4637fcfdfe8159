"""What a finished run tells MLflow: params, tags and final metrics, from its files.

Pure functions over the resolved config and result.json, so the live run and
`harness-mlflow-upload` log the same things.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.measured import is_finite_number
from harness.result.schema import RunResult

MAX_PARAM_CHARS = 6000  # MLflow 3's limit on a param value
MAX_TAG_CHARS = 8000  # MLflow 3's limit on a tag value
SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID")


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"trainer": {"devices": 1}} -> {"trainer.devices": 1}; lists stay whole."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def params(config: Mapping[str, Any], result: RunResult) -> dict[str, str]:
    """The resolved config flattened, plus what the run decided from it (precision used) and
    what its batches held."""
    values = flatten({k: v for k, v in config.items() if k != "hydra"})
    for key in ("lightning_precision", "compile"):
        if key in result.knobs:
            values[f"knobs.{key}"] = result.knobs[key]
    if result.precision_used is not None:
        values["precision_used"] = result.precision_used
    if result.observed is not None:  # batch_size is the knob; these, what the batches held
        for phase, examples in result.observed.examples_per_batch.items():
            values[f"observed.examples_per_batch.{phase}"] = examples
        values["observed.examples_source"] = result.observed.examples_source
    return {key: str(value)[:MAX_PARAM_CHARS] for key, value in values.items()}


def final_metrics(result: RunResult) -> dict[str, float]:
    """The numeric headline figures of result.json, read where each lives (RunResult.figures;
    None means not measured: left out)."""
    figures = {key: float(value) for key, value in result.figures().items()
               if is_finite_number(value)}
    if is_finite_number(result.duration_s):
        figures["duration_s"] = float(result.duration_s)
    return figures


def git_commit(directory: Path) -> tuple[str | None, bool | None]:
    """(commit, has uncommitted changes) of the git checkout holding `directory`, if any."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True,
            timeout=10,
        )
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=directory,
            capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None


def tags(result: RunResult, working_dir: Path) -> dict[str, str]:
    """Where and on what the run ran: git commit, host, device, versions, SLURM job."""
    device = result.device
    values: dict[str, Any] = {
        "status": result.status,
        "reason": result.reason,
        "host": result.host,
        "device_name": device.device_name if device else None,
        "accelerator": device.accelerator if device else None,
        "world_size": device.world_size if device else None,
        "model": result.model,
        "data": result.data,
        **{f"{name}_version": version for name, version in result.versions.items()},
        "working_dir": str(working_dir),
    }
    commit, dirty = git_commit(working_dir)
    if commit:
        values["git_commit"] = commit
        values["git_dirty"] = dirty
        # The UI's "Source" column reads this one.
        values["mlflow.source.git.commit"] = commit
    for variable in SLURM_VARIABLES:
        if os.environ.get(variable):
            values[variable.lower()] = os.environ[variable]
    for caution in ("contended", "noisy"):  # figures the sweep table will not read as precise
        phases = [f.split(":", 1)[1] for f in result.flags if f.startswith(f"{caution}:")]
        if phases:
            values[f"harness.{caution}"] = ",".join(phases)  # e.g. harness.contended=train
    return {k: str(v)[:MAX_TAG_CHARS] for k, v in values.items() if v is not None}
