"""`harness-mlflow-upload`: log run directories on disk into MLflow as new runs; a sweep
directory gets a parent run (docs/tracking.md)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.result.jobs import collect
from harness.result.schema import RunResult
from harness.result.store import RESULT_FILE
from harness.terminal import show, use_console
from harness.tracking import run_logging, store_access

log = logging.getLogger(__name__)

DEFAULT_URI = "sqlite:///mlflow.db"


def _fail(message: str) -> int:
    log.error("%s", message)
    return 2


def main(argv: list[str] | None = None) -> int:
    use_console(prefix=run_logging.UPLOAD_COMMAND)
    parser = argparse.ArgumentParser(prog=run_logging.UPLOAD_COMMAND, description="Log harness run"
                                     " directories (result.json, reports/) into MLflow.")
    parser.add_argument("path", type=Path, help="a run directory or a sweep directory")
    parser.add_argument("--tracking-uri", help="where to log (default: the URI in result.json,"
                        f" else $MLFLOW_TRACKING_URI, else {DEFAULT_URI})")
    parser.add_argument("--experiment", default="harness", help="experiment name (default: harness)")
    parser.add_argument("--parent-run-id", help="make the uploaded run(s) children of this run")
    parser.add_argument("--trace-size-cap-mb", type=float, default=100,
                        help="profiler traces bigger than this stay on disk (default: 100)")
    args = parser.parse_args(argv)
    path: Path = args.path.resolve()
    sweep_dir = None if (path / RESULT_FILE).is_file() else path
    try:
        jobs = collect(path).jobs
    except HarnessError as err:
        return _fail(str(err))
    results = {job.path: job.result for job in jobs if job.result is not None}
    problems = [job for job in jobs if job.status == "unreadable"]
    for job in problems:
        log.warning("%s: %s; not uploaded", job.path, job.reason)
    if not results:
        return _fail(f"nothing to upload from {path}: no readable {RESULT_FILE}")
    first = next(iter(results.values()))
    recorded = first.tracking.tracking_uri if first.tracking else None
    uri = args.tracking_uri or recorded or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI
    try:
        summary = upload(uri, results, sweep_dir, args.experiment, args.parent_run_id, args.trace_size_cap_mb)
    except store_access.Unreachable as err:
        return _fail(f"{err}. Fix: start the server, or pass --tracking-uri")
    except Exception as err:
        return _fail(f"could not log to {uri}: {store_access.short_reason(err)}")
    for line in summary:
        show(line)
    mlflow = run_logging.command_as_typed("mlflow")
    show(f"view them with: {mlflow} ui --backend-store-uri {store_access.absolute_uri(uri)}"
         if not store_access.is_http(uri) else f"view them at {uri}")
    return 1 if problems else 0


def upload(uri: str, results: dict[Path, RunResult], sweep_dir: Path | None, experiment: str,
           parent_run_id: str | None, trace_cap_mb: float) -> list[str]:
    """One run per directory (for a sweep, children of a new parent run), by StoreOps.record_run."""
    from harness.tracking.store_ops import StoreOps

    store_access.probe(uri, 5)
    store = StoreOps(uri)
    lines = []
    if sweep_dir is not None and parent_run_id is None:
        _, parent_run_id = store.start_run(experiment, None, None, f"sweep {sweep_dir.name} (uploaded)",
                                           {"sweep_dir": str(sweep_dir), "harness.kind": "sweep"})
        lines.append(f"{sweep_dir} -> parent run {parent_run_id}")
    for run_dir, result in results.items():
        _, run_id = store.start_run(experiment, None, parent_run_id,
                                    ",".join(result.overrides) or run_dir.name,
                                    {"harness.uploaded_from": str(run_dir)})
        store.record_run(run_id, run_dir, _config(run_dir), result, trace_cap_mb, rates_from_disk=True)
        lines.append(f"{run_dir} -> run {run_id}")
    if sweep_dir is not None and parent_run_id is not None:
        store.log_sweep(parent_run_id, sweep_dir)
    return lines


def _config(run_dir: Path) -> dict[str, Any]:
    """The job's config from .hydra/, resolved as the job saw it."""
    from omegaconf import OmegaConf

    config_file = run_dir / ".hydra" / "config.yaml"
    if not config_file.is_file():
        return {}
    cfg = OmegaConf.load(config_file)
    hydra_file = run_dir / ".hydra" / "hydra.yaml"
    hydra_node = OmegaConf.load(hydra_file).get("hydra") if hydra_file.is_file() else None
    # The job's ${hydra:...} interpolations read Hydra's own config, saved beside it.
    OmegaConf.register_new_resolver(
        "hydra", lambda key: OmegaConf.select(hydra_node, key) if hydra_node else None, replace=True)
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # an interpolation that only resolves inside the job: keep it as text
        return OmegaConf.to_container(cfg, resolve=False)


if __name__ == "__main__":
    sys.exit(main())
