"""One MLflow parent run per multirun, with every job as its child.

Hydra calls `on_multirun_start` before launching any job: the parent run is created
then, and its id written into the sweep directory (`mlflow_parent_run.json`,
harness.tracking.experiments): the jobs read it there, in this process or wherever a
launcher runs them (the MLflow logger, harness.tracking.mlflow_logger). At
`on_multirun_end` the sweep's comparison files are logged to the parent and it is
closed. A sweep that stops before its end never reaches it: `harness.cli` calls
`end_parent_run` on the sweep directory, which logs what there is and closes the parent
KILLED (interrupted) or FAILED. A parent already closed is left as it is.

The calls go through this process's tracker (harness.tracking.tracker): the jobs that Hydra's
basic launcher runs in this process log through the same one.

Importing this module is cheap: Hydra loads it at start-up of every run.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from typing_extensions import override

from harness.tracking import store_access
from harness.tracking.experiments import sweep_info, write_sweep_info
from harness.tracking.tracker import (
    HTTP_DEFAULTS,
    LOGGER_TARGET,
    http_settings,
    mlflow_settings,
    tracker_for,
)

log = logging.getLogger(__name__)
__all__ = ["LOGGER_TARGET", "ParentRunCallback", "end_parent_run", "log_sweep_files"]
COMPARISON_FILES = ("comparison.md", "comparison.csv", "comparison.json", "comparison.png")
SWEEP_FILES = ("multirun.yaml",)


class ParentRunCallback(Callback):
    """Creates the sweep's parent run and logs the comparison table into it."""

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        settings = mlflow_settings(config)
        if settings is None:
            return
        from harness.tracking import run_logging, store_access

        sweep_dir = Path(str(config.hydra.sweep.dir))
        tracking_uri = str(settings.tracking_uri)
        try:
            reason = store_access.probe(tracking_uri, float(settings.probe_timeout_s))
            if reason:
                raise ConnectionError(reason)
            _create_parent(config, settings, sweep_dir)
        except Exception as err:
            log.warning(
                "MLflow tracking at %s failed (%s); the sweep has no parent run and its jobs"
                " try on their own. Upload the sweep later with: %s", tracking_uri,
                store_access.short_reason(err),
                run_logging.upload_hint(sweep_dir, tracking_uri))

    @override
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        settings = mlflow_settings(config)
        if settings is not None:
            end_parent_run(Path(str(config.hydra.sweep.dir)), "FINISHED",
                           shown_uri=str(settings.tracking_uri), http=http_settings(settings))


def end_parent_run(sweep_dir: Path, status: str, shown_uri: str | None = None,
                   http: tuple[int, int] = HTTP_DEFAULTS) -> None:
    """Log the sweep's files into the parent run of `sweep_dir` and give it its end `status`
    (FINISHED; KILLED when the sweep was interrupted, FAILED when it stopped otherwise). No
    parent (logger=none, tracking failed), or one already closed: nothing to do. The line
    that says where to look names the store as `shown_uri` (as configured). The calls go
    through the tracker that created the parent; `http` bounds a new one's requests."""
    info = sweep_info(sweep_dir)
    parent_run_id, tracking_uri = info.get("parent_run_id"), info.get("tracking_uri")
    if not parent_run_id or not tracking_uri:
        return
    from harness.terminal import show
    from harness.tracking.run_logging import where_to_look

    try:
        client = tracker_for(tracking_uri, *http)
        client.confirm()  # the last jobs' runs, logged without waiting: their failures first
        experiment_id, run_status = client.run_info(parent_run_id)
        if run_status != "RUNNING":
            return  # closed already (the end was interrupted after it)
        log_sweep_files(client, parent_run_id, sweep_dir, status)
        client.check(parent_run_id)
        show(where_to_look(shown_uri or tracking_uri, experiment_id, parent_run_id,
                           what="sweep run"))
    except Exception as err:
        log.warning("MLflow: the sweep's comparison files were not logged to parent run %s"
                    " (%s); they are in %s", parent_run_id, store_access.short_reason(err),
                    sweep_dir)


def _create_parent(config: DictConfig, settings: DictConfig, sweep_dir: Path) -> None:
    """The parent run, named by what the sweep varies ('bs x precision (sweep)'), with its
    settings as params ('batch_size': '2,4'): the children's param columns read the same."""
    from harness.config.overrides import as_typed, parse_overrides
    from harness.config.sweep_keys import sweep_run_name, swept_values_of
    from harness.tracking import store_access
    from harness.tracking.sweep_summary import sweep_params

    uri = str(settings.tracking_uri)
    # The sweep's tracker: the jobs that run in this process log through it too.
    client = tracker_for(uri, *http_settings(settings))
    task = as_typed(config.hydra.overrides.task)  # a ${...} in an override stays as written
    swept = swept_values_of(config)
    named = parse_overrides(task).get("sweep")
    experiment_id, run_id = client.start_run(
        str(settings.experiment_name), settings.get("artifact_location"), None,
        sweep_run_name(swept, named)[:250],
        {"sweep_dir": str(sweep_dir.resolve()), "sweep_overrides": " ".join(task),
         "harness.kind": "sweep"})
    client.log_batch(run_id, params=list(sweep_params(task, swept).items()), step="params")
    write_sweep_info(sweep_dir, {
        "parent_run_id": run_id,
        "experiment_id": experiment_id,
        "tracking_uri": store_access.absolute_uri(uri),
        "swept_keys": list(swept),
    })


def log_sweep_files(client: Any, parent_run_id: str, sweep_dir: Path,
                    status: str = "FINISHED") -> None:
    """Comparison table and plot, the best and baseline figures, the table as the run's
    description, the sweep definition, job counts, then the end `status`."""
    from harness.tracking.sweep_summary import NOTE_TAG, best_and_baseline, note

    for name in (*COMPARISON_FILES, *SWEEP_FILES):
        path = sweep_dir / name
        if path.is_file():
            client.log_artifact(parent_run_id, str(path))
    table = sweep_dir / "comparison.csv"
    if table.is_file():
        client.log_table_csv(parent_run_id, str(table), "tables/comparison.json")
    tags: dict[str, str] = {}
    summary = sweep_dir / "comparison.json"
    if summary.is_file():
        comparison = json.loads(summary.read_text())
        metrics, tags = best_and_baseline(comparison)
        tags["baseline"] = str(comparison.get("baseline"))
        now_ms = store_access.now_ms()
        client.log_batch(parent_run_id, metrics=[(k, v, now_ms, 0) for k, v in metrics.items()])
    markdown = sweep_dir / "comparison.md"
    if markdown.is_file():
        tags[NOTE_TAG] = note(markdown.read_text())
    statuses = job_statuses(sweep_dir)
    tags.update({f"jobs_{job_status}": str(sum(s == job_status for s in statuses))
                 for job_status in sorted(set(statuses))})
    tags["jobs"] = str(len(statuses))
    client.log_batch(parent_run_id, tags=list(tags.items()))
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
