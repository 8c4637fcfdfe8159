"""What the run's logger and the sweep's parent run share: the experiment, and the file in
the sweep directory through which a sweep's jobs (wherever a launcher runs them) and the
command that ends the sweep early find its parent run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PARENT_FILE = "mlflow_parent_run.json"
PARENT_TAG = "mlflow.parentRunId"
# MLflow 3 files an experiment under a kind: "Machine learning" (model training) or GenAI.
# The 3.17 UI does not read it yet (its sidebar toggle decides the view, GenAI by default),
# but it is the tag the UI writes, and the one a later UI follows (mlflow/mlflow#24493).
KIND_TAG = "mlflow.experimentKind"
KIND = "custom_model_development"
# What opens the classic runs view in MLflow 3.17, whatever the toggle says: the UI's
# workflowType parameter, inside its #-route (before the # it is ignored).
TRAINING_VIEW = "workflowType=machine_learning"
LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default


def ui_link(base: str, experiment_id: str | None, run_id: str | None = None) -> str:
    """The page of a run (or of the experiment's runs) in MLflow's training view."""
    route = f"#/experiments/{experiment_id}/runs" + (f"/{run_id}" if run_id else "")
    return f"{base.rstrip('/')}/{route}?{TRAINING_VIEW}"


def experiment_for(client: Any, name: str, artifact_location: str | None) -> str:
    """The id of the experiment called `name`, created (as a model-training one) when missing."""
    experiment = client.get_experiment_by_name(name)
    if experiment is not None and experiment.lifecycle_stage != "deleted":
        return experiment.experiment_id
    return client.create_experiment(name, artifact_location=artifact_location,
                                    tags={KIND_TAG: KIND})


def write_sweep_info(sweep_dir: Path, info: dict[str, Any]) -> None:
    """parent_run_id, experiment_id, tracking_uri and swept_keys, for the sweep's jobs."""
    from harness.reports.files import write_json

    write_json(sweep_dir / PARENT_FILE, info)


def sweep_info(sweep_dir: Path) -> dict[str, Any]:
    """What the sweep's parent left for its jobs ({} if none)."""
    path = sweep_dir / PARENT_FILE
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
