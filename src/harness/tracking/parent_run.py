"""One MLflow parent run per multirun, its id left in the sweep dir (PARENT_FILE) for the jobs;
`end_parent_run` logs the sweep's files and closes it (docs/tracking.md). Cheap to import: Hydra
loads it at every start-up."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from typing_extensions import override

from harness.tracking.store_access import HTTP_DEFAULTS, absolute_uri, probe, short_reason
from harness.tracking.tracker import PARENT_FILE, http_settings, mlflow_settings, sweep_info, tracker_for

log = logging.getLogger(__name__)


class ParentRunCallback(Callback):
    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        settings = mlflow_settings(config)
        if settings is None:
            return
        from harness.tracking.run_logging import upload_hint

        sweep_dir = Path(str(config.hydra.sweep.dir))
        tracking_uri = str(settings.tracking_uri)
        try:
            probe(tracking_uri, float(settings.probe_timeout_s))
            _create_parent(config, settings, sweep_dir, tracking_uri)
        except Exception as err:
            log.warning("MLflow tracking at %s failed (%s); the sweep has no parent run and its jobs try"
                        " on their own. Upload the sweep later with: %s", tracking_uri, short_reason(err),
                        upload_hint(sweep_dir, tracking_uri))

    @override
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        settings = mlflow_settings(config)
        if settings is not None:
            end_parent_run(Path(str(config.hydra.sweep.dir)), "FINISHED",
                           shown_uri=str(settings.tracking_uri), http=http_settings(settings))


def end_parent_run(sweep_dir: Path, status: str, shown_uri: str | None = None,
                   http: tuple[int, int] = HTTP_DEFAULTS) -> None:
    """Log the sweep's files into the parent run of `sweep_dir`, if still open, and end it with
    `status`; the line saying where to look names the store as `shown_uri`."""
    info = sweep_info(sweep_dir)
    parent_run_id, tracking_uri = info.get("parent_run_id"), info.get("tracking_uri")
    if not parent_run_id or not tracking_uri:
        return
    from harness.terminal import show
    from harness.tracking.run_logging import where_to_look

    try:
        client = tracker_for(tracking_uri, http)
        client.confirm()  # the last jobs' runs, logged without waiting: their failures first
        experiment_id, run_status = client.run_info(parent_run_id)
        if run_status != "RUNNING":
            return  # closed already (the end was interrupted after it)
        client.log_sweep(parent_run_id, sweep_dir, status)
        client.check(parent_run_id)
        show(where_to_look(shown_uri or tracking_uri, experiment_id, parent_run_id, what="sweep run"))
    except Exception as err:
        log.warning("MLflow: the sweep's comparison files were not logged to parent run %s"
                    " (%s); they are in %s", parent_run_id, short_reason(err), sweep_dir)


def _create_parent(config: DictConfig, settings: DictConfig, sweep_dir: Path, uri: str) -> None:
    """The parent run, named by what the sweep varies, its settings as params ('2,4')."""
    from harness.config.overrides import as_typed, parse_overrides
    from harness.config.sweep_keys import sweep_run_name, swept_values_of
    from harness.reports.files import write_json
    from harness.tracking.sweep_summary import sweep_params

    client = tracker_for(uri, http_settings(settings))  # the jobs run here log through it too
    task = as_typed(config.hydra.overrides.task)  # a ${...} in an override stays as written
    swept = swept_values_of(config)
    experiment_id, run_id = client.start_run(
        str(settings.experiment_name), settings.get("artifact_location"), None,
        sweep_run_name(swept, parse_overrides(task).get("sweep")),
        {"sweep_dir": str(sweep_dir.resolve()), "sweep_overrides": " ".join(task), "harness.kind": "sweep"})
    client.log_batch(run_id, params=list(sweep_params(task, swept).items()), step="params")
    write_json(sweep_dir / PARENT_FILE, {"parent_run_id": run_id, "experiment_id": experiment_id,
                                         "tracking_uri": absolute_uri(uri), "swept_keys": list(swept)})
