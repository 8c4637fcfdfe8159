"""`harness-mlflow-upload`: log run directories that are already on disk into MLflow.

For runs whose tracking failed (server down, store locked) or that ran with
logger=none. PATH is one run directory (it holds result.json) or a sweep
directory (its job folders hold result.json): a sweep gets a parent run with
each job as a child, as a live multirun does.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.result.schema import RunResult
from harness.result.store import RESULT_FILE, load_result
from harness.terminal import show, use_console
from harness.tracking import run_logging, store_access

log = logging.getLogger(__name__)

DEFAULT_URI = "sqlite:///mlflow.db"
RATE_COLUMNS = ("training_rate", "validation_rate", "inference_rate")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=run_logging.UPLOAD_COMMAND,
        description="Log harness run directories (result.json, reports/) into MLflow.",
    )
    parser.add_argument("path", type=Path, help="a run directory or a sweep directory")
    parser.add_argument("--tracking-uri", help="where to log (default: the URI in result.json,"
                        f" else $MLFLOW_TRACKING_URI, else {DEFAULT_URI})")
    parser.add_argument("--experiment", default=None,
                        help="experiment name (default: harness)")
    parser.add_argument("--parent-run-id", default=None,
                        help="make the uploaded run(s) children of this run")
    parser.add_argument("--trace-size-cap-mb", type=float, default=100,
                        help="profiler traces bigger than this stay on disk (default: 100)")
    return parser


def _fail(message: str) -> int:
    log.error("%s", message)
    return 2


def _readable(run_dirs: list[Path]) -> tuple[dict[Path, RunResult], list[str]]:
    """The runs whose result.json loads, and one line for each that does not."""
    results, problems = {}, []
    for run_dir in run_dirs:
        try:
            results[run_dir] = load_result(run_dir)
        except HarnessError as err:
            problems.append(f"{err}; not uploaded")
    return results, problems


def main(argv: list[str] | None = None) -> int:
    use_console(prefix=run_logging.UPLOAD_COMMAND)
    store_access.route_mlflow_logs()
    args = _parser().parse_args(argv)
    path: Path = args.path.resolve()
    if (path / RESULT_FILE).is_file():
        run_dirs, sweep_dir = [path], None
    else:
        run_dirs = sorted(p.parent for p in path.glob(f"*/{RESULT_FILE}"))
        sweep_dir = path
    if not run_dirs:
        return _fail(f"no {RESULT_FILE} in {path} or its subfolders."
                     " Fix: pass a run directory (outputs/DATE/TIME) or a sweep directory")
    results, problems = _readable(run_dirs)
    for problem in problems:
        log.warning("%s", problem)
    if not results:
        return _fail(f"nothing to upload from {path}: no readable {RESULT_FILE}")
    first = next(iter(results.values()))
    recorded = first.tracking.tracking_uri if first.tracking else None
    uri = args.tracking_uri or recorded or _env_uri() or DEFAULT_URI
    try:
        summary = upload(uri, results, sweep_dir, args.experiment or "harness",
                         args.parent_run_id, args.trace_size_cap_mb)
    except ConnectionError as err:  # the probe's own one-line reason
        return _fail(f"{err}. Fix: start the server, or pass --tracking-uri")
    except Exception as err:
        return _fail(f"could not log to {uri}: {store_access.short_reason(err)}")
    for line in summary:
        show(line)
    mlflow = run_logging.command_as_typed("mlflow")
    show(f"view them with: {mlflow} ui --backend-store-uri {store_access.absolute_uri(uri)}"
         if not store_access.is_http(uri) else f"view them at {uri}")
    return 1 if problems else 0


def _env_uri() -> str | None:
    import os

    return os.environ.get("MLFLOW_TRACKING_URI")


def upload(uri: str, results: dict[Path, RunResult], sweep_dir: Path | None, experiment: str,
           parent_run_id: str | None, trace_cap_mb: float) -> list[str]:
    """Create one run per directory (children of a new sweep run for a sweep), through the
    store operations a job's tracker runs (harness.tracking.store_ops), here in this process."""
    from harness.tracking.parent_run import log_sweep_files
    from harness.tracking.store_ops import StoreOps

    reason = store_access.probe(uri, 5)
    if reason:
        raise ConnectionError(reason)
    client = StoreOps()
    client.open(uri, 10, 2)
    experiment_id = client.experiment_id_for(experiment, None)
    lines = []
    if sweep_dir is not None and parent_run_id is None:
        parent_run_id = client.create_run(experiment_id, f"sweep {sweep_dir.name} (uploaded)",
                                          {"sweep_dir": str(sweep_dir), "harness.kind": "sweep"})
        lines.append(f"{sweep_dir} -> parent run {parent_run_id}")
    for run_dir, result in results.items():
        run_id = upload_run_dir(client, experiment_id, run_dir, result, parent_run_id,
                                trace_cap_mb)
        lines.append(f"{run_dir} -> run {run_id}")
    if sweep_dir is not None and parent_run_id is not None:
        log_sweep_files(client, parent_run_id, sweep_dir)
    return lines


def upload_run_dir(client: Any, experiment_id: str, run_dir: Path, result: RunResult,
                   parent_run_id: str | None, trace_cap_mb: float) -> str:
    """One run directory as a new MLflow run (`client`: a StoreOps); returns its id. A run
    whose upload breaks off is ended FAILED, never left RUNNING."""
    run_id = client.create_run(experiment_id, (",".join(result.overrides) or run_dir.name)[:250],
                               {"harness.uploaded_from": str(run_dir)}, parent_run_id)
    try:
        _log_step_rates(client, run_id, run_dir, result)
        run_logging.log_run_dir(client, run_id, run_dir, _config(run_dir), result, trace_cap_mb)
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    client.set_terminated(run_id, run_logging.END_STATUS.get(result.status, "FAILED"))
    return run_id


def _config(run_dir: Path) -> dict[str, Any]:
    """The job's composed config from .hydra/, resolved as the job saw it."""
    from omegaconf import OmegaConf

    config_file = run_dir / ".hydra" / "config.yaml"
    if not config_file.is_file():
        return {}
    cfg = OmegaConf.load(config_file)
    hydra_file = run_dir / ".hydra" / "hydra.yaml"
    hydra_node = OmegaConf.load(hydra_file).get("hydra") if hydra_file.is_file() else None
    # The job's ${hydra:...} interpolations read Hydra's own config, saved beside it.
    OmegaConf.register_new_resolver(
        "hydra", lambda key: OmegaConf.select(hydra_node, key) if hydra_node else None,
        replace=True,
    )
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # an interpolation that only resolves inside the job: keep it as text
        return OmegaConf.to_container(cfg, resolve=False)


def _log_step_rates(client: Any, run_id: str, run_dir: Path, result: RunResult) -> None:
    """training_rate / validation_rate / inference_rate per step (it/s), and beside each its
    examples/s (training_examples_rate...: examples x world size / step time, as the live
    run logs it), from speed_steps.csv."""
    steps_file = run_dir / "reports" / "speed_steps.csv"
    if not steps_file.is_file():
        return
    import datetime as dt

    import pandas as pd

    from harness.tracking.store_ops import read_table

    frame = read_table(steps_file)
    if frame is None:
        return
    try:
        start_ms = int(dt.datetime.fromisoformat(str(result.started_at)).timestamp() * 1000)
    except (TypeError, ValueError):
        start_ms = store_access.now_ms()
    world = result.device.world_size if result.device and result.device.world_size else 1
    metrics = []
    for phase, rows in frame.groupby("phase", sort=False):
        column = next((c for c in RATE_COLUMNS if c in rows and rows[c].notna().any()), None)
        if column is None:
            continue
        elapsed_ms = (rows["step_s"].cumsum() * 1000).astype("int64")
        for (_, row), offset in zip(rows.iterrows(), elapsed_ms, strict=True):
            if pd.notna(row[column]):
                # The live run steps training_rate by global_step, which counts from 1.
                step = int(row["step"]) + (1 if phase == "train" else 0)
                metrics.append((column, float(row[column]), start_ms + int(offset), step))
                if "examples" in row and pd.notna(row["examples"]):
                    examples = float(row[column]) * float(row["examples"]) * world
                    metrics.append((column.replace("_rate", "_examples_rate"), examples,
                                    start_ms + int(offset), step))
    client.log_batch(run_id, metrics=metrics)


if __name__ == "__main__":
    sys.exit(main())
