"""One MLflow parent run per multirun, with every job as its child.

Hydra calls `on_multirun_start` before launching any job: the parent run is
created then, and its id handed to the jobs through an environment variable
(read by conf/logger/mlflow.yaml; launchers such as submitit copy the
environment into each job) and a file in the sweep directory. At
`on_multirun_end` the sweep's comparison files are logged to the parent.

Importing this module is cheap: Hydra loads it at start-up of every run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

PARENT_ENV = "HARNESS_MLFLOW_PARENT_RUN_ID"
PARENT_FILE = "mlflow_parent_run.json"
LOGGER_TARGET = "harness.tracking.mlflow_logger.HarnessMLFlowLogger"
COMPARISON_FILES = ("comparison.md", "comparison.csv", "comparison.json", "comparison.png")
SWEEP_FILES = ("multirun.yaml",)


def _mlflow_settings(config: DictConfig) -> DictConfig | None:
    node = config.get("logger")
    if isinstance(node, DictConfig) and node.get("_target_") == LOGGER_TARGET:
        return node
    return None


class MlflowSweepCallback(Callback):
    """Creates the sweep's parent run and logs the comparison table into it."""

    def __init__(self) -> None:
        self.parent_run_id: str | None = None
        self.tracking_uri: str | None = None
        self.sweep_dir: Path | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        settings = _mlflow_settings(config)
        if settings is None:
            return
        from harness.tracking import run_logging, store_access

        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        self.tracking_uri = str(settings.tracking_uri)
        try:
            store_access.configure_http(int(settings.http_timeout_s),
                                        int(settings.http_max_retries))
            reason = store_access.probe(self.tracking_uri, float(settings.probe_timeout_s))
            if reason:
                raise ConnectionError(reason)
            self.parent_run_id = _create_parent(config, settings, self.sweep_dir)
        except Exception as err:
            run_logging.warn(
                f"MLflow tracking at {self.tracking_uri} failed"
                f" ({store_access.short_reason(err)}); the sweep has no parent run and its jobs"
                " try on their own. Upload the sweep later with:"
                f" {run_logging.upload_hint(self.sweep_dir, self.tracking_uri)}"
            )
            return
        os.environ[PARENT_ENV] = self.parent_run_id

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.parent_run_id is None or self.sweep_dir is None or self.tracking_uri is None:
            return
        from harness.tracking import run_logging, store_access

        os.environ.pop(PARENT_ENV, None)
        try:
            from mlflow import MlflowClient

            log_sweep_files(MlflowClient(self.tracking_uri), self.parent_run_id, self.sweep_dir)
        except Exception as err:
            run_logging.warn(
                f"MLflow: the sweep's comparison files were not logged to parent run"
                f" {self.parent_run_id} ({store_access.short_reason(err)}); they are in"
                f" {self.sweep_dir}"
            )
        finally:
            self.parent_run_id = None


def _create_parent(config: DictConfig, settings: DictConfig, sweep_dir: Path) -> str:
    from mlflow import MlflowClient

    from harness.tracking import store_access

    uri = str(settings.tracking_uri)
    client = MlflowClient(uri)
    overrides = " ".join(config.hydra.overrides.task)
    with store_access.creation_lock(uri):
        experiment_id = experiment_for(client, str(settings.experiment_name),
                                       settings.get("artifact_location"))
        run = client.create_run(
            experiment_id,
            run_name=f"sweep {overrides}"[:250] if overrides else f"sweep {sweep_dir.name}",
            tags={"sweep_dir": str(sweep_dir.resolve()), "sweep_overrides": overrides,
                  "harness.kind": "sweep"},
        )
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / PARENT_FILE).write_text(json.dumps({
        "parent_run_id": run.info.run_id,
        "experiment_id": experiment_id,
        "tracking_uri": store_access.absolute_uri(uri),
        "swept_keys": swept_keys(list(config.hydra.overrides.task)),
    }, indent=2) + "\n")
    return run.info.run_id


def experiment_for(client: Any, name: str, artifact_location: str | None) -> str:
    """The id of the experiment called `name`, created when missing."""
    experiment = client.get_experiment_by_name(name)
    if experiment is not None and experiment.lifecycle_stage != "deleted":
        return experiment.experiment_id
    return client.create_experiment(name, artifact_location=artifact_location)


def log_sweep_files(client: Any, parent_run_id: str, sweep_dir: Path) -> None:
    """Comparison table and plot, the sweep definition, job counts, then the end status."""
    from mlflow.entities import RunTag

    for name in (*COMPARISON_FILES, *SWEEP_FILES):
        path = sweep_dir / name
        if path.is_file():
            client.log_artifact(parent_run_id, str(path))
    table = sweep_dir / "comparison.csv"
    if table.is_file():
        import pandas as pd

        frame = pd.read_csv(table)
        if not frame.empty:
            client.log_table(parent_run_id, frame, "tables/comparison.json")
    statuses = job_statuses(sweep_dir)
    counts = {f"jobs_{status}": str(sum(s == status for s in statuses))
              for status in sorted(set(statuses))}
    client.log_batch(parent_run_id, tags=[
        RunTag("jobs", str(len(statuses))), *(RunTag(k, v) for k, v in counts.items())])
    client.set_terminated(parent_run_id, "FINISHED")


def job_statuses(sweep_dir: Path) -> list[str]:
    """The status in each job's result.json under the sweep directory."""
    statuses = []
    for path in sorted(sweep_dir.glob("*/result.json")):
        try:
            statuses.append(str(json.loads(path.read_text()).get("status")))
        except (OSError, ValueError):
            statuses.append("unreadable")
    return statuses


def swept_keys(overrides: list[str]) -> list[str]:
    """The keys a multirun varies (batch_size=1,2,4 or range(...)), in command-line order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [o.get_key_element() for o in parsed if o.is_sweep_override()]


def sweep_info(sweep_dir: Path) -> dict[str, Any]:
    """What the sweep's parent left for its jobs: parent_run_id, swept_keys ({} if none)."""
    path = sweep_dir / PARENT_FILE
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
