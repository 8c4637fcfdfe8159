"""What a finished run tells MLflow: params, tags and final metrics, from its files.

Pure functions over the resolved config and result.json, so the live run and
`harness-mlflow-upload` log the same things.
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


def params(config: Mapping[str, Any], result: Mapping[str, Any]) -> dict[str, str]:
    """The resolved config flattened, plus what the run decided from it (precision used)."""
    values = flatten({k: v for k, v in config.items() if k != "hydra"})
    knobs = result.get("knobs") or {}
    for key in ("lightning_precision", "compile"):
        if key in knobs:
            values[f"knobs.{key}"] = knobs[key]
    if result.get("precision_used") is not None:
        values["precision_used"] = result["precision_used"]
    return {key: str(value)[:MAX_PARAM_CHARS] for key, value in values.items()}


def final_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """The numeric headline figures of result.json (None means not measured: left out)."""
    figures = {}
    for key, value in (result.get("metrics") or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            figures[key] = float(value)
    if isinstance(result.get("duration_s"), (int, float)):
        figures["duration_s"] = float(result["duration_s"])
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


def tags(result: Mapping[str, Any], working_dir: Path) -> dict[str, str]:
    """Where and on what the run ran: git commit, host, device, versions, SLURM job."""
    device = result.get("device") or {}
    versions = result.get("versions") or {}
    values: dict[str, Any] = {
        "status": result.get("status"),
        "reason": result.get("reason"),
        "host": result.get("host"),
        "device_name": device.get("device_name"),
        "accelerator": device.get("accelerator"),
        "world_size": device.get("world_size"),
        "model": result.get("model"),
        "data": result.get("data"),
        **{f"{name}_version": version for name, version in versions.items()},
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
    return {k: str(v)[:MAX_TAG_CHARS] for k, v in values.items() if v is not None}
