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

import json
import logging
import os
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from typing_extensions import override

from harness.tracking import store_access
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
        from harness.terminal import show
        from harness.tracking import store_access
        from harness.tracking.run_logging import where_to_look

        os.environ.pop(PARENT_ENV, None)
        try:
            from mlflow import MlflowClient

            client = MlflowClient(self.tracking_uri)
            log_sweep_files(client, self.parent_run_id, self.sweep_dir, status)
            experiment = client.get_run(self.parent_run_id).info.experiment_id
            show(where_to_look(self.tracking_uri, experiment, self.parent_run_id,
                               what="sweep run"))
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
    """The parent run, named by what the sweep varies ('bs x precision (sweep)'), with its
    settings as params ('batch_size': '2,4'): the children's param columns read the same."""
    from mlflow import MlflowClient
    from mlflow.entities import Param

    from harness.config.overrides import as_typed
    from harness.config.sweep_keys import sweep_run_name, swept_values_of
    from harness.tracking import store_access
    from harness.tracking.sweep_summary import sweep_params

    uri = str(settings.tracking_uri)
    client = MlflowClient(uri)
    task = as_typed(config.hydra.overrides.task)  # a ${...} in an override stays as written
    swept = swept_values_of(config)
    named = next((o.split("=", 1)[1] for o in task if o.startswith("sweep=")), None)
    with store_access.creation_lock(uri):
        experiment_id = experiment_for(client, str(settings.experiment_name),
                                       settings.get("artifact_location"))
        run = client.create_run(
            experiment_id,
            run_name=sweep_run_name(swept, named)[:250],
            tags={"sweep_dir": str(sweep_dir.resolve()), "sweep_overrides": " ".join(task),
                  "harness.kind": "sweep"},
        )
    params = [Param(k, v) for k, v in sweep_params(task, swept).items()]
    for start in range(0, len(params), 100):
        client.log_batch(run.info.run_id, params=params[start:start + 100])
    write_sweep_info(sweep_dir, {
        "parent_run_id": run.info.run_id,
        "experiment_id": experiment_id,
        "tracking_uri": store_access.absolute_uri(uri),
        "swept_keys": list(swept),
    })
    return run.info.run_id


def log_sweep_files(client: Any, parent_run_id: str, sweep_dir: Path,
                    status: str = "FINISHED") -> None:
    """Comparison table and plot, the best and baseline figures, the table as the run's
    description, the sweep definition, job counts, then the end `status`."""
    from mlflow.entities import Metric, RunTag

    from harness.tracking.run_logging import read_table
    from harness.tracking.sweep_summary import NOTE_TAG, best_and_baseline, note

    for name in (*COMPARISON_FILES, *SWEEP_FILES):
        path = sweep_dir / name
        if path.is_file():
            client.log_artifact(parent_run_id, str(path))
    table = sweep_dir / "comparison.csv"
    frame = read_table(table) if table.is_file() else None
    if frame is not None:
        client.log_table(parent_run_id, frame, "tables/comparison.json")
    tags: dict[str, str] = {}
    summary = sweep_dir / "comparison.json"
    if summary.is_file():
        comparison = json.loads(summary.read_text())
        metrics, tags = best_and_baseline(comparison)
        tags["baseline"] = str(comparison.get("baseline"))
        now_ms = store_access.now_ms()
        client.log_batch(parent_run_id, metrics=[Metric(k, v, now_ms, 0)
                                                 for k, v in metrics.items()])
    markdown = sweep_dir / "comparison.md"
    if markdown.is_file():
        tags[NOTE_TAG] = note(markdown.read_text())
    statuses = job_statuses(sweep_dir)
    tags.update({f"jobs_{job_status}": str(sum(s == job_status for s in statuses))
                 for job_status in sorted(set(statuses))})
    tags["jobs"] = str(len(statuses))
    client.log_batch(parent_run_id, tags=[RunTag(k, v) for k, v in tags.items()])
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
