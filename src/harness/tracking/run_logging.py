"""The job's end in MLflow (`log_finished_run`, never raising) and what the user is told: where
the run is, or what the store lacks and the command that uploads it (docs/tracking.md)."""

from __future__ import annotations

import functools
import logging
import shutil
from pathlib import Path
from typing import Any

from harness.launch.outside_tool import find_executable
from harness.result.schema import RunResult, Tracking
from harness.result.store import write_result
from harness.terminal import show
from harness.tracking.store_access import absolute_uri, is_http, sqlite_path
from harness.tracking.store_ops import STEPS, run_tags

log = logging.getLogger(__name__)

UPLOAD_COMMAND = "harness-mlflow-upload"
LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default
# Opens MLflow 3.17's classic runs view whatever the UI's toggle says (inside the #-route only).
TRAINING_VIEW = "workflowType=machine_learning"


def command_as_typed(name: str) -> str:
    """A command as the user can type it: bare when it is on PATH, else its path."""
    return name if shutil.which(name) else find_executable(name) or name


def upload_hint(run_dir: Path, tracking_uri: str) -> str:
    return f"{command_as_typed(UPLOAD_COMMAND)} {run_dir} --tracking-uri {absolute_uri(tracking_uri)}"


def ui_link(base: str, experiment_id: str | None, run_id: str | None = None) -> str:
    """The page of a run (or of the experiment's runs) in MLflow's training view."""
    route = f"#/experiments/{experiment_id}/runs" + (f"/{run_id}" if run_id else "")
    return f"{base.rstrip('/')}/{route}?{TRAINING_VIEW}"


def where_to_look(uri: str, experiment_id: str | None, run_id: str | None, what: str = "run") -> str:
    """One line telling the user where the run is and the link that opens it."""
    if is_http(uri):
        return f"mlflow: {what} {ui_link(uri, experiment_id, run_id)}"
    mlflow = command_as_typed("mlflow")
    path = sqlite_path(uri)
    if path is not None and not path.is_absolute() and path.parent == Path("."):
        serve = f"`{mlflow} ui` in {Path.cwd()}"
    else:
        serve = f"`{mlflow} ui --backend-store-uri {uri}`"
    return (f"mlflow: {what} {run_id} in {uri}; to open it: {serve}, then"
            f" {ui_link(LOCAL_UI, experiment_id, run_id)}")


def log_finished_run(cfg: Any, result: RunResult, run_dir: Path, logger: Any) -> None:
    """Log the finished run into the MLflow run `logger` opened (no-op for other loggers); a
    sweep's job does not wait for the store (docs/tracking.md, "The tracker process")."""
    from harness.tracking.mlflow_logger import HarnessMLFlowLogger

    if not isinstance(logger, HarnessMLFlowLogger) or logger.run_id is None and not logger.failure:
        return
    tracking = Tracking(tracking_uri=absolute_uri(logger.tracking_uri), experiment_id=logger.experiment_id,
                        run_id=logger.run_id, parent_run_id=logger.parent_run_id)
    failure = None
    try:
        tracking.tags = run_tags(result, Path.cwd())  # an upload later tags the run the same
        logger.flush()
        if logger.failure is None:
            from omegaconf import OmegaConf

            config = OmegaConf.to_container(cfg, resolve=True)
            tracking.logged = True
            result.tracking = tracking
            write_result(run_dir, result)  # first: the result.json in MLflow names its run too
            # plain values only: a str subclass such as torch.__version__ would make the
            # tracker import torch to read the message, and hold up the next job's start_run
            plain = type(result).model_validate_json(result.model_dump_json())
            logger.client.record_run(logger.run_id, run_dir, config, plain,
                                     logger.trace_size_cap_mb, logger.log_artifacts)
            if logger.in_sweep:
                logger.client.check_later(logger.run_id, functools.partial(
                    _not_all_logged, logger, result, run_dir, tracking))
            else:
                logger.client.check(logger.run_id)  # all of it is in the store, or it raises
            show(where_to_look(logger.tracking_uri, logger.experiment_id, logger.run_id))
            return
    except Exception as err:
        failure = err
    _not_all_logged(logger, result, run_dir, tracking, failure)


def _not_all_logged(logger: Any, result: RunResult, run_dir: Path, tracking: Tracking,
                    err: Exception | None) -> None:
    """Say what the store lacks (one warning) and record it in result.json; `err` is None when
    tracking stopped before the run's end. From a failed step of the end on, all is missing."""
    step = getattr(err, "step", None)
    if err is not None and step and step not in STEPS:
        logger.fail(step, err)
    if err is not None or "the whole run" not in logger.not_logged:
        missing = STEPS[STEPS.index(step):] if step in STEPS else STEPS
        logger.fail(", ".join(missing), err if err is not None else logger.failure or "unknown")
    hint = upload_hint(run_dir, logger.tracking_uri)
    run = f" (run {logger.run_id} is incomplete)" if logger.run_id else ""
    # A deleted sqlite file answers "readonly database": say what really happened.
    path = sqlite_path(logger.tracking_uri)
    failure = (f"the store is gone: {path.resolve()} no longer exists"
               if path is not None and not path.exists() else logger.failure)
    log.warning("MLflow tracking at %s failed (%s); not logged: %s%s. Reports are on disk in %s. Upload"
                " them later with: %s", logger.tracking_uri, failure, "; ".join(logger.not_logged), run,
                run_dir, hint)
    tracking.logged, tracking.failure = False, failure
    tracking.not_logged, tracking.upload_command = list(logger.not_logged), hint
    result.tracking = tracking
    write_result(run_dir, result)
