"""One MLflow parent run per multirun, with every job as its child.

Hydra calls `on_multirun_start` before launching any job: the parent run is
created then, and its id handed to the jobs through an environment variable
(read by conf/logger/mlflow.yaml; launchers such as submitit copy the
environment into each job) and a file in the sweep directory. At
`on_multirun_end` the sweep's comparison files are logged to the parent. A sweep that
stops before its end never reaches it: `harness.cli.main` calls `end_unfinished`, which
logs what there is and closes the parent KILLED (interrupted) or FAILED.

Importing this module is cheap: Hydra loads it at start-up of every run.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from typing_extensions import override

from harness.tracking.experiments import PARENT_ENV, experiment_for, write_sweep_info

log = logging.getLogger(__name__)
LOGGER_TARGET = "harness.tracking.mlflow_logger.HarnessMLFlowLogger"
COMPARISON_FILES = ("comparison.md", "comparison.csv", "comparison.json", "comparison.png")
SWEEP_FILES = ("multirun.yaml",)


def _mlflow_settings(config: DictConfig) -> DictConfig | None:
    node = config.get("logger")
    if isinstance(node, DictConfig) and node.get("_target_") == LOGGER_TARGET:
        return node
    return None


class ParentRunCallback(Callback):
    """Creates the sweep's parent run and logs the comparison table into it."""

    def __init__(self) -> None:
        self.parent_run_id: str | None = None
        self.tracking_uri: str | None = None
        self.sweep_dir: Path | None = None

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        settings = _mlflow_settings(config)
        if settings is None:
            return
        from harness.tracking import run_logging, store_access

        store_access.route_mlflow_logs()
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
            log.warning(
                "MLflow tracking at %s failed (%s); the sweep has no parent run and its jobs"
                " try on their own. Upload the sweep later with: %s", self.tracking_uri,
                store_access.short_reason(err),
                run_logging.upload_hint(self.sweep_dir, self.tracking_uri))
            return
        os.environ[PARENT_ENV] = self.parent_run_id
        global _open
        _open = self

    @override
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.end("FINISHED")

    def end(self, status: str) -> None:
        """Log the sweep's files into the parent run and give it its end `status`."""
        global _open
        _open = None
        if self.parent_run_id is None or self.sweep_dir is None or self.tracking_uri is None:
            return
        from harness.tracking import store_access

        os.environ.pop(PARENT_ENV, None)
        try:
            from mlflow import MlflowClient

            log_sweep_files(MlflowClient(self.tracking_uri), self.parent_run_id, self.sweep_dir,
                            status)
        except Exception as err:
            log.warning("MLflow: the sweep's comparison files were not logged to parent run %s"
                        " (%s); they are in %s", self.parent_run_id,
                        store_access.short_reason(err), self.sweep_dir)
        finally:
            self.parent_run_id = None


_open: ParentRunCallback | None = None  # the parent run of a sweep in progress


def end_unfinished(status: str) -> None:
    """Close the parent run of a sweep that stopped before Hydra's end of it (KILLED when
    interrupted, FAILED when refused): never left RUNNING."""
    if _open is not None:
        _open.end(status)


def _create_parent(config: DictConfig, settings: DictConfig, sweep_dir: Path) -> str:
    from mlflow import MlflowClient

    from harness.config.composed import as_typed
    from harness.config.sweep_keys import swept_keys_of
    from harness.tracking import store_access

    uri = str(settings.tracking_uri)
    client = MlflowClient(uri)
    overrides = " ".join(as_typed(config.hydra.overrides.task))
    with store_access.creation_lock(uri):
        experiment_id = experiment_for(client, str(settings.experiment_name),
                                       settings.get("artifact_location"))
        run = client.create_run(
            experiment_id,
            run_name=f"sweep {overrides}"[:250] if overrides else f"sweep {sweep_dir.name}",
            tags={"sweep_dir": str(sweep_dir.resolve()), "sweep_overrides": overrides,
                  "harness.kind": "sweep"},
        )
    write_sweep_info(sweep_dir, {
        "parent_run_id": run.info.run_id,
        "experiment_id": experiment_id,
        "tracking_uri": store_access.absolute_uri(uri),
        "swept_keys": swept_keys_of(config),
    })
    return run.info.run_id


def log_sweep_files(client: Any, parent_run_id: str, sweep_dir: Path,
                    status: str = "FINISHED") -> None:
    """Comparison table and plot, the sweep definition, job counts, then the end status."""
    from mlflow.entities import RunTag

    from harness.tracking.run_logging import read_table

    for name in (*COMPARISON_FILES, *SWEEP_FILES):
        path = sweep_dir / name
        if path.is_file():
            client.log_artifact(parent_run_id, str(path))
    table = sweep_dir / "comparison.csv"
    frame = read_table(table) if table.is_file() else None
    if frame is not None:
        client.log_table(parent_run_id, frame, "tables/comparison.json")
    statuses = job_statuses(sweep_dir)
    counts = {f"jobs_{status}": str(sum(s == status for s in statuses))
              for status in sorted(set(statuses))}
    client.log_batch(parent_run_id, tags=[
        RunTag("jobs", str(len(statuses))), *(RunTag(k, v) for k, v in counts.items())])
    client.set_terminated(parent_run_id, status)


def job_statuses(sweep_dir: Path) -> list[str]:
    """The status in each job's result.json under the sweep directory."""
    from harness.errors import HarnessError
    from harness.result.store import RESULT_FILE, load_result

    statuses = []
    for path in sorted(sweep_dir.glob(f"*/{RESULT_FILE}")):
        try:
            statuses.append(load_result(path).status)
        except HarnessError:
            statuses.append("unreadable")
    return statuses
