"""After the run: params, tags, final metrics and report files into the run's MLflow run.

`log_finished_run` is the one call the job makes (rank zero, after result.json
is written). It never raises: a store that fails leaves the run on disk and
logs one warning line naming what is missing and the command that uploads it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from harness.result.schema import RunResult, Tracking
from harness.result.store import RESULT_FILE, write_result
from harness.terminal import show
from harness.tracking import run_facts, store_access

log = logging.getLogger(__name__)

UPLOAD_COMMAND = "harness-mlflow-upload"
TRACE_MARKERS = ("trace",)  # a file whose name holds one of these is a profiler trace
TABLES_DIR = "tables"  # artifact folder of the reports as MLflow tables (UI comparison)
SYSTEM_REPORT = "system.csv"
SYSTEM_METRIC_PREFIX = "system/"
MIB = 1024 * 1024
# MLflow's end status of a run: partial measured a phase; anything else (failed, oom,
# invalid: not what the knobs say) is FAILED.
END_STATUS = {"ok": "FINISHED", "partial": "FINISHED", "interrupted": "KILLED"}


def upload_hint(run_dir: Path, tracking_uri: str) -> str:
    return f"{upload_command()} {run_dir} --tracking-uri {store_access.absolute_uri(tracking_uri)}"


def upload_command() -> str:
    """harness-mlflow-upload as the user can type it: bare when it is on PATH, else its path."""
    return command_as_typed(UPLOAD_COMMAND)


def command_as_typed(name: str) -> str:
    import shutil
    import sys

    if shutil.which(name):
        return name
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


def where_to_look(uri: str, experiment_id: str | None, run_id: str | None,
                  what: str = "run") -> str:
    """One line telling the user where the run is and how to open it, in the training view
    (MLflow 3 opens experiments in its GenAI view unless the link asks otherwise)."""
    from harness.tracking.experiments import LOCAL_UI, ui_link

    if store_access.is_http(uri):
        return f"mlflow: {what} {ui_link(uri, experiment_id, run_id)}"
    mlflow = command_as_typed("mlflow")
    path = store_access.sqlite_path(uri)
    if path is not None and not path.is_absolute() and path.parent == Path("."):
        serve = f"`{mlflow} ui` in {Path.cwd()}"
    else:
        serve = f"`{mlflow} ui --backend-store-uri {uri}`"
    return (f"mlflow: {what} {run_id} in {uri}; to open it: {serve}, then"
            f" {ui_link(LOCAL_UI, experiment_id, run_id)}")


def log_finished_run(cfg: Any, result: RunResult, run_dir: Path, logger: Any) -> None:
    """Log the finished run into the MLflow run `logger` opened (no-op for other loggers).

    Sets `result.tracking` and rewrites result.json with it before logging it as an
    artifact, so the file in MLflow says where it is tracked too.
    """
    from harness.tracking.mlflow_logger import HarnessMLFlowLogger

    if not isinstance(logger, HarnessMLFlowLogger) or logger.run_id is None and not logger.failure:
        return
    uri = logger.tracking_uri
    tracking = Tracking(
        tracking_uri=store_access.absolute_uri(uri),
        experiment_id=logger.experiment_id,
        run_id=logger.run_id,
        parent_run_id=logger.parent_run_id,
    )
    done: list[str] = []
    try:
        # Kept in result.json, so an upload later tags the run the same way.
        tracking.tags = run_facts.tags(result, Path.cwd())
        logger.flush()
        if logger.failure is None:
            from omegaconf import OmegaConf

            config = OmegaConf.to_container(cfg, resolve=True)
            tracking.logged = True
            result.tracking = tracking
            write_result(run_dir, result)
            log_run_dir(logger.client, logger.run_id, run_dir, config, result,
                        trace_cap_mb=logger.trace_size_cap_mb, with_artifacts=logger.log_artifacts,
                        done=done)
            logger.client.set_terminated(logger.run_id, END_STATUS.get(result.status, "FAILED"))
            show(where_to_look(uri, logger.experiment_id, logger.run_id))
            return
    except Exception as err:
        logger.fail(_missing(done), err)
    if "the whole run" not in logger.not_logged:  # e.g. the last metrics' flush failed
        logger.fail(_missing(done), logger.failure or "unknown")
    _report_failure(logger, result, run_dir, tracking)


def _missing(done: list[str]) -> str:
    steps = ["params", "tags", "final metrics", "system metrics", "artifacts", "end status"]
    return ", ".join(s for s in steps if s not in done)


def _report_failure(logger: Any, result: RunResult, run_dir: Path, tracking: Tracking) -> None:
    hint = upload_hint(run_dir, logger.tracking_uri)
    run = f" (run {logger.run_id} is incomplete)" if logger.run_id else ""
    # A deleted sqlite file answers "readonly database": say what really happened.
    failure = store_access.gone(logger.tracking_uri) or logger.failure
    log.warning(
        "MLflow tracking at %s failed (%s); not logged: %s%s. Reports are on disk in %s."
        " Upload them later with: %s", logger.tracking_uri, failure,
        "; ".join(logger.not_logged), run, run_dir, hint)
    tracking.logged, tracking.failure = False, failure
    tracking.not_logged, tracking.upload_command = list(logger.not_logged), hint
    result.tracking = tracking
    write_result(run_dir, result)


def log_run_dir(
    client: Any, run_id: str, run_dir: Path, config: dict[str, Any], result: RunResult,
    trace_cap_mb: float, with_artifacts: bool = True, done: list[str] | None = None,
) -> list[str]:
    """Log a run directory's params, tags, final metrics and files into `run_id`.

    Returns the files left out for their size. `done` collects the steps that
    went through, so a failure can say what is missing.
    """
    from mlflow.entities import Metric, Param, RunTag

    done = [] if done is None else done
    existing = client.get_run(run_id).data.params
    # A param cannot change value once set (Lightning logs the module's hparams).
    new_params = [Param(k, v) for k, v in run_facts.params(config, result).items()
                  if k not in existing]
    for start in range(0, len(new_params), 100):
        client.log_batch(run_id, params=new_params[start:start + 100])
    done.append("params")
    tags = (result.tracking.tags if result.tracking else None) or run_facts.tags(result, Path.cwd())
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
    done.append("tags")
    logged_ms = store_access.now_ms()
    metrics = [Metric(k, v, logged_ms, 0) for k, v in run_facts.final_metrics(result).items()]
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start:start + 1000])
    done.append("final metrics")
    _log_system_series(client, run_id, run_dir)
    done.append("system metrics")
    skipped: list[str] = []
    if with_artifacts:
        skipped = _log_files(client, run_id, run_dir, trace_cap_mb)
    done.append("artifacts")
    return skipped


def _log_system_series(client: Any, run_id: str, run_dir: Path) -> None:
    """System metrics over time from reports/system.csv, one MLflow metric per column.

    The system preset writes one row per sample, stamped `timestamp_s` (Unix s), with a
    numeric column for each measured quantity.
    """
    path = run_dir / "reports" / SYSTEM_REPORT
    if not path.is_file():
        return
    import pandas as pd
    from mlflow.entities import Metric

    frame = read_table(path)
    if frame is None:
        return
    start_ms = store_access.now_ms()
    if "timestamp_s" in frame:  # when each sample was taken
        stamps = (frame["timestamp_s"] * 1000).astype("int64").tolist()
    else:
        stamps = [start_ms] * len(frame)
    metrics = []
    for column in frame.select_dtypes("number").columns:
        if column in ("timestamp_s", "t_s", "segment", "step"):
            continue
        for step, (value, stamp) in enumerate(zip(frame[column], stamps, strict=True)):
            if pd.notna(value):
                metrics.append(Metric(f"{SYSTEM_METRIC_PREFIX}{column}", float(value), stamp, step))
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start:start + 1000])


def is_trace(path: Path) -> bool:
    return any(marker in path.name.lower() for marker in TRACE_MARKERS)


def read_table(path: Path) -> Any:
    """A report CSV as a DataFrame, or None when it has no rows (a run that stopped early)."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:  # a report with no columns: written before any step
        return None
    return None if frame.empty else frame


def _log_files(client: Any, run_id: str, run_dir: Path, trace_cap_mb: float) -> list[str]:
    """Reports (json, csv, summaries, snapshots; traces under the cap), tables, config."""
    skipped = []
    reports = run_dir / "reports"
    for path in sorted(p for p in reports.rglob("*") if p.is_file()) if reports.is_dir() else []:
        relative = path.relative_to(run_dir)
        if is_trace(path) and path.stat().st_size > trace_cap_mb * MIB:
            skipped.append(f"{relative} ({path.stat().st_size / MIB:.0f} MiB)")
            continue
        client.log_artifact(run_id, str(path), str(relative.parent))
        if path.suffix == ".csv":
            # The table view lets the UI compare the same report across runs.
            frame = read_table(path)
            if frame is not None:
                client.log_table(run_id, frame, f"{TABLES_DIR}/{path.stem}.json")
    for extra in (".hydra", "error.log"):
        source = run_dir / extra
        if source.is_dir():
            client.log_artifacts(run_id, str(source), "config")
        elif source.is_file():
            client.log_artifact(run_id, str(source))
    if skipped:
        from mlflow.entities import RunTag

        client.log_batch(run_id, tags=[RunTag("artifacts_left_on_disk", "; ".join(skipped))])
    client.log_artifact(run_id, str(run_dir / RESULT_FILE))
    return skipped
