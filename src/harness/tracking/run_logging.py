"""After the run: params, tags, final metrics and report files into the run's MLflow run.

`log_finished_run` is the one call the job makes (rank zero, after result.json
is written). It never raises: a store that fails leaves the run on disk and
logs one warning line naming what is missing and the command that uploads it.
The calls go to the job's tracker process (harness.tracking.tracker), which reports a
failure by the step it belonged to when the job checks; `harness-mlflow-upload` makes the
same calls on a store of its own (harness.tracking.store_ops), where a failure raises at once.
"""

from __future__ import annotations

import functools
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
    artifact, so the file in MLflow says where it is tracked too. A single run waits until
    the store has all of it; a sweep's job does not (the next job's run waits for it, see
    harness.tracking.tracker): a failure found later rewrites the job's result.json the same.
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
            logger.client.set_terminated(logger.run_id, END_STATUS.get(result.status, "FAILED"),
                                         step="end status")
            done.append("end status")
            if logger.in_sweep:
                logger.client.check_later(logger.run_id, functools.partial(
                    _not_all_logged, logger, result, run_dir, tracking, done))
            else:
                logger.client.check(logger.run_id)  # all of it is in the store, or it raises
            show(where_to_look(uri, logger.experiment_id, logger.run_id))
            return
    except Exception as err:
        _not_all_logged(logger, result, run_dir, tracking, done, err)
        return
    _not_all_logged(logger, result, run_dir, tracking, done, None)


def _not_all_logged(logger: Any, result: RunResult, run_dir: Path, tracking: Tracking,
                    done: list[str], err: Exception | None) -> None:
    """Say what the store lacks (one warning) and record it in result.json. `done`: the end's
    steps sent; `err`: why (None: tracking had stopped before the run's end)."""
    if err is not None:
        _undo_after(err, done, logger)
        logger.fail(_missing(done), err)
    if "the whole run" not in logger.not_logged:  # e.g. the last metrics' flush failed
        logger.fail(_missing(done), logger.failure or "unknown")
    _report_failure(logger, result, run_dir, tracking)


STEPS = ["params", "tags", "final metrics", "system metrics", "artifacts", "end status"]


def _undo_after(err: Exception, done: list[str], logger: Any) -> None:
    """The steps of `done` that a failure in the tracker undid. It names the step whose call
    failed and skipped every later call of the run: that step and the ones after it are not
    in the store. A step from before the run's end (the module's hyperparameters, per-step
    metrics) is said first, and none of the end's steps went in; so with a tracker that ended
    before it said anything."""
    from harness.tracking.tracker import TrackerError

    if not isinstance(err, TrackerError):
        return  # raised here, at the step it names by `done`
    if err.step in STEPS:
        del done[STEPS.index(err.step):]
        return
    if err.step:
        logger.fail(err.step, err)
    done.clear()


def _missing(done: list[str]) -> str:
    return ", ".join(s for s in STEPS if s not in done)


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
    """Log a run directory's params, tags, final metrics and files into `run_id` through
    `client` (the tracker, or harness.tracking.store_ops.StoreOps), each call named by its step.

    Returns the files left out for their size. `done` collects the steps that
    went through (with the tracker: that were sent), so a failure can say what is missing.
    """
    done = [] if done is None else done
    # A param cannot change value once set: the store keeps what Lightning logged already.
    client.log_new_params(run_id, list(run_facts.params(config, result).items()), step="params")
    done.append("params")
    tags = (result.tracking.tags if result.tracking else None) or run_facts.tags(result, Path.cwd())
    client.log_batch(run_id, tags=list(tags.items()), step="tags")
    done.append("tags")
    logged_ms = store_access.now_ms()
    client.log_batch(run_id, metrics=[(k, v, logged_ms, 0) for k, v in
                                      run_facts.final_metrics(result).items()],
                     step="final metrics")
    done.append("final metrics")
    system = run_dir / "reports" / SYSTEM_REPORT  # the system preset's samples, as series
    if system.is_file():
        client.log_system_series(run_id, str(system), step="system metrics")
    done.append("system metrics")
    skipped: list[str] = []
    if with_artifacts:
        skipped = _log_files(client, run_id, run_dir, trace_cap_mb)
    done.append("artifacts")
    return skipped


def is_trace(path: Path) -> bool:
    return any(marker in path.name.lower() for marker in TRACE_MARKERS)


def _log_files(client: Any, run_id: str, run_dir: Path, trace_cap_mb: float) -> list[str]:
    """Reports (json, csv, summaries, snapshots; traces under the cap), tables, config."""
    skipped = []
    reports = run_dir / "reports"
    for path in sorted(p for p in reports.rglob("*") if p.is_file()) if reports.is_dir() else []:
        relative = path.relative_to(run_dir)
        if is_trace(path) and path.stat().st_size > trace_cap_mb * MIB:
            skipped.append(f"{relative} ({path.stat().st_size / MIB:.0f} MiB)")
            continue
        client.log_artifact(run_id, str(path), str(relative.parent), step="artifacts")
        if path.suffix == ".csv":
            # The table view lets the UI compare the same report across runs.
            client.log_table_csv(run_id, str(path), f"{TABLES_DIR}/{path.stem}.json",
                                 step="artifacts")
    for extra in (".hydra", "error.log"):
        source = run_dir / extra
        if source.is_dir():
            client.log_artifacts(run_id, str(source), "config", step="artifacts")
        elif source.is_file():
            client.log_artifact(run_id, str(source), step="artifacts")
    if skipped:
        client.log_batch(run_id, tags=[("artifacts_left_on_disk", "; ".join(skipped))],
                         step="artifacts")
    client.log_artifact(run_id, str(run_dir / RESULT_FILE), step="artifacts")
    return skipped
