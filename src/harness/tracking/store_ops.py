"""Every call harness makes to an MLflow store, over plain values (no MLflow types).

A job never imports MLflow (1.6-1.8 s, more than a short run's training): it hands these calls
to its tracker process (harness.tracking.tracker), which runs them here, on a real
MlflowClient. `harness-mlflow-upload` runs the same operations in its own process. Metrics are
(key, value, timestamp_ms, step), params and tags (key, value).

`step` (keyword, every call that returns nothing) names the part of the run a call belongs to
("params", "artifacts", ...): the tracker reports a failure by it later. Here a failure raises
at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.tracking import store_access
from harness.tracking.experiments import PARENT_TAG, experiment_for

MetricRow = tuple[str, float, int, int]
Pair = tuple[str, str]
MAX_METRICS_PER_BATCH = 1000  # MLflow's limits for one log_batch call
MAX_PARAMS_PER_BATCH = 100
SYSTEM_METRIC_PREFIX = "system/"
# system.csv columns that say when or where a sample was taken, not what was measured
SYSTEM_NOT_METRICS = ("timestamp_s", "t_s", "segment", "step")


def read_table(path: Path) -> Any:
    """A report CSV as a DataFrame, or None when it has no rows (a run that stopped early)."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:  # a report with no columns: written before any step
        return None
    return None if frame.empty else frame


def load_mlflow(http_timeout_s: int, http_max_retries: int) -> None:
    """Import MLflow and its sqlite store, its HTTP requests bounded and its log lines left to
    harness's logging."""
    store_access.route_mlflow_logs()
    store_access.configure_http(http_timeout_s, http_max_retries)
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401


class StoreOps:
    """Harness's calls on one MlflowClient: `client` given (already open), or made by `open`."""

    def __init__(self, client: Any = None, uri: str = "") -> None:
        self.client = client
        self.uri = uri

    def open(self, uri: str, http_timeout_s: int, http_max_retries: int) -> None:
        """Open the store (the first time: create and migrate it, under the creation lock, so
        that parallel jobs never create it twice)."""
        load_mlflow(http_timeout_s, http_max_retries)  # outside the lock
        from mlflow import MlflowClient

        with store_access.creation_lock(uri):
            self.client = MlflowClient(uri)
        self.uri = uri

    def experiment_id_for(self, name: str, artifact_location: str | None) -> str:
        """The experiment called `name`, created when missing."""
        with store_access.creation_lock(self.uri):
            return experiment_for(self.client, name, artifact_location)

    def create_run(self, experiment_id: str, run_name: str, tags: dict[str, str],
                   parent_run_id: str | None = None) -> str:
        """A new run's id; with `parent_run_id` the run is that run's child."""
        if parent_run_id:
            tags = {**tags, PARENT_TAG: parent_run_id}
        return self.client.create_run(experiment_id, run_name=run_name, tags=tags).info.run_id

    def start_run(self, experiment_name: str, artifact_location: str | None,
                  parent_run_id: str | None, run_name: str, tags: dict[str, str]
                  ) -> tuple[str, str]:
        """(experiment id, run id) of a new run, its experiment found or made under the creation
        lock. A child lives in its parent's experiment, or the UI cannot nest it."""
        with store_access.creation_lock(self.uri):
            if parent_run_id:
                experiment_id = self.client.get_run(parent_run_id).info.experiment_id
            else:
                experiment_id = experiment_for(self.client, experiment_name, artifact_location)
            return experiment_id, self.create_run(experiment_id, run_name, tags, parent_run_id)

    def run_info(self, run_id: str) -> tuple[str, str]:
        """(experiment id, status) of a run."""
        info = self.client.get_run(run_id).info
        return info.experiment_id, info.status

    def log_batch(self, run_id: str, metrics: Sequence[MetricRow] = (),
                  params: Sequence[Pair] = (), tags: Sequence[Pair] = (),
                  step: str | None = None) -> None:
        from mlflow.entities import Metric, Param, RunTag

        for start in range(0, len(params), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(run_id, params=[
                Param(k, v) for k, v in params[start:start + MAX_PARAMS_PER_BATCH]])
        for start in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            self.client.log_batch(run_id, metrics=[
                Metric(*m) for m in metrics[start:start + MAX_METRICS_PER_BATCH]])
        if tags:
            self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags])

    def log_new_params(self, run_id: str, params: Sequence[Pair], step: str | None = None) -> None:
        """The params the run does not hold yet: a param cannot change value once set, and
        Lightning has logged the module's hyperparameters already."""
        existing = self.client.get_run(run_id).data.params
        self.log_batch(run_id, params=[(k, v) for k, v in params if k not in existing])

    def log_artifact(self, run_id: str, path: str, artifact_path: str | None = None,
                     step: str | None = None) -> None:
        self.client.log_artifact(run_id, path, artifact_path)

    def log_artifacts(self, run_id: str, path: str, artifact_path: str | None = None,
                      step: str | None = None) -> None:
        self.client.log_artifacts(run_id, path, artifact_path)

    def log_table_csv(self, run_id: str, csv_path: str, artifact_file: str,
                      step: str | None = None) -> None:
        """A report CSV as an MLflow table (the UI compares the same table across runs); an
        empty one is left out."""
        frame = read_table(Path(csv_path))
        if frame is not None:
            self.client.log_table(run_id, frame, artifact_file)

    def log_system_series(self, run_id: str, csv_path: str, step: str | None = None) -> None:
        """System metrics over time from a system.csv, one MLflow metric per numeric column.

        The system preset writes one row per sample, stamped `timestamp_s` (Unix s), with a
        numeric column for each measured quantity."""
        import pandas as pd

        frame = read_table(Path(csv_path))
        if frame is None:
            return
        if "timestamp_s" in frame:  # when each sample was taken
            stamps = (frame["timestamp_s"] * 1000).astype("int64").tolist()
        else:
            stamps = [store_access.now_ms()] * len(frame)
        metrics = []
        for column in frame.select_dtypes("number").columns:
            if column in SYSTEM_NOT_METRICS:
                continue
            for index, (value, stamp) in enumerate(zip(frame[column], stamps, strict=True)):
                if pd.notna(value):
                    metrics.append((f"{SYSTEM_METRIC_PREFIX}{column}", float(value), stamp, index))
        self.log_batch(run_id, metrics=metrics)

    def set_terminated(self, run_id: str, status: str, step: str | None = None) -> None:
        self.client.set_terminated(run_id, status)
