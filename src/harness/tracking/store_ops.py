"""What harness writes into an MLflow store, in plain values: `record_run` (a finished run, from
the live run and `harness-mlflow-upload` alike) and `log_sweep` (a sweep's parent run)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import terminal
from harness.launch.outside_tool import git_commit
from harness.measured import MIB, is_finite_number
from harness.result.jobs import read_job
from harness.result.schema import RunResult
from harness.result.store import RESULT_FILE, job_dirs
from harness.tracking.store_access import (
    MAX_PARAM_CHARS,
    MAX_TAG_CHARS,
    Store,
    StoreError,
    now_ms,
    short_reason,
)

SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID")
MetricRow = tuple[str, float, int, int]
MAX_METRICS_PER_BATCH, MAX_PARAMS_PER_BATCH = 1000, 100  # MLflow's limits for one log_batch (tags: 100)
# partial measured a phase; anything else (failed, oom, invalid) ends FAILED
END_STATUS = {"ok": "FINISHED", "partial": "FINISHED", "interrupted": "KILLED"}
# A finished run's parts, in the order written: a failure names the first missing.
STEPS = ("params", "tags", "final metrics", "system metrics", "artifacts", "end status")
RATE_COLUMNS = ("training_rate", "validation_rate", "inference_rate")
SYSTEM_NOT_METRICS = ("timestamp_s", "t_s", "segment", "step")  # when a sample was taken
SWEEP_FILES = ("comparison.md", "comparison.csv", "comparison.json", "comparison.png",
               "multirun.yaml", "autotune.json", "scaling.json", "scaling.md", "scaling.png")


def read_table(path: Path) -> Any:
    """A report CSV as a DataFrame; None when missing or without rows (a run that stopped early)."""
    import pandas as pd

    try:
        frame = pd.read_csv(path) if path.is_file() else None
    except pd.errors.EmptyDataError:  # no columns: written before any step
        return None
    return None if frame is None or frame.empty else frame


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"trainer": {"devices": 1}} -> {"trainer.devices": 1}; lists stay whole."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def run_params(config: Mapping[str, Any], result: RunResult) -> dict[str, str]:
    """The resolved config flattened, plus the precision used and what the batches held."""
    values = flatten({k: v for k, v in config.items() if k != "hydra"})
    values.update({f"knobs.{key}": result.knobs[key] for key in ("lightning_precision", "compile")
                   if key in result.knobs})
    if result.precision_used is not None:
        values["precision_used"] = result.precision_used
    if result.observed is not None:  # batch_size is the knob; these, what the batches held
        values.update({f"observed.examples_per_batch.{phase}": examples
                       for phase, examples in result.observed.examples_per_batch.items()})
        values["observed.examples_source"] = result.observed.examples_source
    return {key: str(value)[:MAX_PARAM_CHARS] for key, value in values.items()}


def final_metrics(result: RunResult) -> dict[str, float]:
    """The numeric headline figures of result.json (None: not measured, left out)."""
    figures = {key: float(value) for key, value in result.figures().items() if is_finite_number(value)}
    if is_finite_number(result.duration_s):
        figures["duration_s"] = float(result.duration_s)
    return figures


def run_tags(result: RunResult, working_dir: Path) -> dict[str, str]:
    """Where and on what the run ran: git commit, host, device, versions, SLURM job."""
    device = result.device
    values: dict[str, Any] = {
        "status": result.status, "reason": result.reason, "host": result.host,
        **({"device_name": device.device_name, "accelerator": device.accelerator,
            "world_size": device.world_size} if device else {}),
        "model": result.model, "data": result.data,
        **{f"{name}_version": version for name, version in result.versions.items()},
        "working_dir": str(working_dir)}
    commit, dirty = git_commit(working_dir)
    if commit:  # mlflow.source.git.commit: what the UI's "Source" column reads
        values.update({"git_commit": commit, "git_dirty": dirty, "mlflow.source.git.commit": commit})
    values.update({name.lower(): os.environ[name] for name in SLURM_VARIABLES if os.environ.get(name)})
    for caution in ("contended", "noisy"):  # figures the sweep table will not read as precise
        phases = [f.split(":", 1)[1] for f in result.flags if f.startswith(f"{caution}:")]
        values[f"harness.{caution}"] = ",".join(phases) or None  # e.g. harness.contended=train
    return {k: str(v)[:MAX_TAG_CHARS] for k, v in values.items() if v is not None}


class StoreOps(Store):
    def log_batch(self, run_id: str, metrics: Sequence[MetricRow] = (),
                  params: Sequence[tuple[str, str]] = (), tags: Sequence[tuple[str, str]] = ()) -> None:
        from mlflow.entities import Metric, Param, RunTag

        for key, entity, rows, size in (("params", Param, params, MAX_PARAMS_PER_BATCH),
                                        ("metrics", Metric, metrics, MAX_METRICS_PER_BATCH),
                                        ("tags", RunTag, tags, MAX_PARAMS_PER_BATCH)):
            for start in range(0, len(rows), size):
                self.client.log_batch(run_id, **{key: [entity(*row) for row in rows[start:start + size]]})

    @contextlib.contextmanager
    def _ending(self, run_id: str, steps: list[str]) -> Iterator[None]:
        try:
            yield
        except BaseException as err:
            with contextlib.suppress(Exception):
                self.client.set_terminated(run_id, "FAILED")
            if isinstance(err, Exception):
                raise StoreError(short_reason(err), steps[-1]) from err
            raise

    def record_run(self, run_id: str, run_dir: Path, config: dict[str, Any], result: RunResult,
                   trace_cap_mb: float = 100, with_artifacts: bool = True,
                   rates_from_disk: bool = False) -> list[str]:
        """A finished run into `run_id`, in the order of STEPS; with `rates_from_disk`, first the
        per-step rates from speed_steps.csv. Returns the traces left on disk for their size."""
        run_dir, step = Path(run_dir), ["per-step rates"]
        tags = (result.tracking.tags if result.tracking else None) or run_tags(result, Path.cwd())
        with self._ending(run_id, step):
            if rates_from_disk:
                self.log_batch(run_id, metrics=_step_rates(run_dir, result))
            step.append("params")  # Lightning logged the module's; a param's value cannot change
            existing = self.client.get_run(run_id).data.params
            self.log_batch(run_id, params=[(k, v) for k, v in run_params(config, result).items()
                                           if k not in existing])
            step.append("tags")
            self.log_batch(run_id, tags=list(tags.items()))
            step.append("final metrics")
            logged_ms = now_ms()
            self.log_batch(run_id, metrics=[(k, v, logged_ms, 0) for k, v in final_metrics(result).items()])
            step.append("system metrics")
            self.log_batch(run_id, metrics=_system_series(run_dir / "reports" / "system.csv"))
            step.append("artifacts")
            skipped = self._log_files(run_id, run_dir, trace_cap_mb) if with_artifacts else []
            step.append("end status")
            self.client.set_terminated(run_id, END_STATUS.get(result.status, "FAILED"))
        return skipped

    def _log_table(self, run_id: str, csv_path: Path, artifact_file: str) -> None:
        frame = read_table(csv_path)
        if frame is not None:
            self.client.log_table(run_id, frame, artifact_file)

    def _log_files(self, run_id: str, run_dir: Path, trace_cap_mb: float) -> list[str]:
        skipped = []
        reports = run_dir / "reports"
        for path in sorted(p for p in reports.rglob("*") if p.is_file()) if reports.is_dir() else []:
            relative = path.relative_to(run_dir)
            size = path.stat().st_size
            if "trace" in path.name.lower() and size > trace_cap_mb * MIB:
                skipped.append(f"{relative} ({terminal.size(size)})")
                continue
            self.client.log_artifact(run_id, str(path), str(relative.parent))
            if path.suffix == ".csv":  # as a table too: the UI compares it across runs
                self._log_table(run_id, path, f"tables/{path.stem}.json")
        if (run_dir / ".hydra").is_dir():
            self.client.log_artifacts(run_id, str(run_dir / ".hydra"), "config")
        if (run_dir / "error.log").is_file():
            self.client.log_artifact(run_id, str(run_dir / "error.log"))
        if skipped:
            self.log_batch(run_id, tags=[("artifacts_left_on_disk", "; ".join(skipped))])
        self.client.log_artifact(run_id, str(run_dir / RESULT_FILE))
        return skipped

    def log_sweep(self, parent_run_id: str, sweep_dir: Path, status: str = "FINISHED") -> None:
        """A sweep's parent run: its files, figures, description, job counts and end status."""
        from harness.tracking.sweep_summary import NOTE_TAG, best_and_baseline, note

        sweep_dir, tags = Path(sweep_dir), {}
        with self._ending(parent_run_id, ["sweep files"]):
            for name in SWEEP_FILES:
                if (sweep_dir / name).is_file():
                    self.client.log_artifact(parent_run_id, str(sweep_dir / name))
            self._log_table(parent_run_id, sweep_dir / "comparison.csv", "tables/comparison.json")
            if (sweep_dir / "comparison.json").is_file():
                comparison = json.loads((sweep_dir / "comparison.json").read_text())
                metrics, tags = best_and_baseline(comparison, sweep_dir)
                tags["baseline"] = str(comparison.get("baseline"))
                logged_ms = now_ms()
                self.log_batch(parent_run_id, metrics=[(k, v, logged_ms, 0) for k, v in metrics.items()])
            if (sweep_dir / "comparison.md").is_file():
                tags[NOTE_TAG] = note((sweep_dir / "comparison.md").read_text())
            statuses = [read_job(job_dir)[0].status for job_dir in job_dirs(sweep_dir)]
            tags.update({f"jobs_{s}": str(statuses.count(s)) for s in sorted(set(statuses))})
            tags["jobs"] = str(len(statuses))
            self.log_batch(parent_run_id, tags=list(tags.items()))
            self.client.set_terminated(parent_run_id, status)


def _system_series(csv_path: Path) -> list[MetricRow]:
    """`system/<column>` per numeric column of system.csv, a step per sample at its `timestamp_s`."""
    import pandas as pd

    frame = read_table(csv_path)
    if frame is None:
        return []
    stamps = ((frame["timestamp_s"] * 1000).astype("int64").tolist() if "timestamp_s" in frame
              else [now_ms()] * len(frame))
    return [(f"system/{column}", float(value), stamp, index)
            for column in frame.select_dtypes("number").columns if column not in SYSTEM_NOT_METRICS
            for index, (value, stamp) in enumerate(zip(frame[column], stamps, strict=True))
            if pd.notna(value)]


def _step_rates(run_dir: Path, result: RunResult) -> list[MetricRow]:
    """The per-step rates (it/s) and beside each its examples/s, as the live run logs them."""
    import pandas as pd

    frame = read_table(run_dir / "reports" / "speed_steps.csv")
    if frame is None:
        return []
    try:
        start_ms = int(dt.datetime.fromisoformat(str(result.started_at)).timestamp() * 1000)
    except (TypeError, ValueError):
        start_ms = now_ms()
    world = result.device.world_size if result.device and result.device.world_size else 1
    metrics = []
    for phase, rows in frame.groupby("phase", sort=False):
        column = next((c for c in RATE_COLUMNS if c in rows and rows[c].notna().any()), None)
        if column is None:
            continue
        elapsed_ms = (rows["step_s"].cumsum() * 1000).astype("int64")
        for (_, row), offset in zip(rows.iterrows(), elapsed_ms, strict=True):
            rate = row[column]
            if pd.isna(rate):
                continue
            # The live run steps training_rate by global_step, which counts from 1.
            step, stamp = int(row["step"]) + (1 if phase == "train" else 0), start_ms + int(offset)
            metrics.append((column, float(rate), stamp, step))
            if "examples" in row and pd.notna(row["examples"]):
                metrics.append((column.replace("_rate", "_examples_rate"),
                                float(rate) * float(row["examples"]) * world, stamp, step))
    return metrics
