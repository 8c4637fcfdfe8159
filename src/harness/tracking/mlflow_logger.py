"""A Lightning logger that records a run into MLflow without ever slowing or ending it.

Built on Lightning's public `Logger` API and MLflow's `MlflowClient`, for three reasons:
- the run is created when the logger is built, under a file lock for a local sqlite
  store, so parallel jobs never race to create the database;
- per-step metrics are buffered and sent in one batch, at most every `flush_every_s`,
  and only after a validation, an epoch or predict (RunShared.between_steps): a
  store write (about 5 ms on sqlite, seconds on a slow server) inside a step would
  count as that step's time;
- a failing store (server down, database locked) turns tracking off for the rest of
  the run instead of ending it; the run ends with one warning.
"""

from __future__ import annotations

import importlib.util
import re
import time
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import Logger
from lightning.pytorch.loggers.logger import DummyExperiment
from lightning.pytorch.utilities import rank_zero_only
from typing_extensions import override

from harness.config.checks import parsed_number
from harness.config.overrides import as_typed
from harness.errors import ConfigError, HarnessError
from harness.tracking import store_access
from harness.tracking.experiments import PARENT_TAG, experiment_for, sweep_info
from harness.tracking.run_facts import MAX_PARAM_CHARS, flatten

MAX_METRICS_PER_BATCH = 1000  # MLflow's limit for one log_batch call
MAX_PARAMS_PER_BATCH = 100
_NOT_A_METRIC_CHAR = re.compile(r"[^a-zA-Z0-9_/. -]+")


def _from_hydra_job() -> tuple[str, str | None]:
    """(run name, parent run id its sweep left in the sweep dir) of the current Hydra job.

    The name is the job's overrides; in a sweep only what tells the children apart, short
    ("bs=8 bf16 r1"): the UI's runs table shows about 14 characters of a child's name.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from harness.config.sweep_keys import run_name

    if not HydraConfig.initialized():
        return "harness", None
    job = HydraConfig.get()
    overrides = as_typed(job.overrides.task)  # a ${...} in an override stays as written
    if job.mode != RunMode.MULTIRUN:
        return ",".join(overrides)[:250] or "harness", None
    sweep = sweep_info(Path(str(job.sweep.dir)))
    name = run_name(overrides, sweep.get("swept_keys") or [])
    return name[:250] or "harness", sweep.get("parent_run_id")


class HarnessMLFlowLogger(Logger):
    """An MLflow logger whose failures never end the run; see the module docstring."""

    def __init__(
        self,
        tracking_uri: str = "sqlite:///mlflow.db",
        experiment_name: str = "harness",
        run_name: str | None = None,
        artifact_location: str | None = None,
        parent_run_id: str | None = None,
        log_artifacts: bool = True,
        trace_size_cap_mb: float = 100,
        flush_every_s: float = 10,
        probe_timeout_s: float = 3,
        http_timeout_s: int | str = 10,
        http_max_retries: int | str = 2,
        tags: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        store_access.route_mlflow_logs()
        if importlib.util.find_spec("mlflow") is None:
            raise HarnessError("logger=mlflow needs the mlflow package."
                               " Fix: pip install 'mlflow>=3', or run with logger=none")
        if not isinstance(tracking_uri, str) or not tracking_uri.strip():
            raise ConfigError(
                "logger.tracking_uri", tracking_uri, "an MLflow tracking URI",
                "logger.tracking_uri=sqlite:///mlflow.db (or http://host:5000)",
            )
        if not isinstance(experiment_name, str) or not experiment_name.strip():
            raise ConfigError("logger.experiment_name", experiment_name, "a non-empty name",
                              "logger.experiment_name=harness")
        self.trace_size_cap_mb = parsed_number(
            "logger.trace_size_cap_mb", trace_size_cap_mb, allow_zero=True)
        self.flush_every_s = parsed_number(
            "logger.flush_every_s", flush_every_s, allow_zero=True)
        self.probe_timeout_s = parsed_number(
            "logger.probe_timeout_s", probe_timeout_s)
        store_access.configure_http(
            parsed_number("logger.http_timeout_s", http_timeout_s, integer=True),
            parsed_number("logger.http_max_retries", http_max_retries,
                          integer=True, allow_zero=True),
        )
        default_name, sweep_parent = _from_hydra_job()
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.run_name = run_name or default_name
        self.parent_run_id = parent_run_id or sweep_parent
        self.log_artifacts = bool(log_artifacts)
        self.client: Any = None
        self._experiment_id: str | None = None
        self._run_id: str | None = None
        self.failure: str | None = None  # why tracking stopped, once it has
        self.not_logged: list[str] = []  # what the store did not get because of it
        self._pending: list[Any] = []  # mlflow Metric objects not yet sent
        self._last_flush = time.monotonic()
        if rank_zero_only.rank != 0:
            return
        reason = store_access.probe(tracking_uri, self.probe_timeout_s)
        if reason:
            self.fail("the whole run", reason)
            return
        try:
            self._start_run(artifact_location, {**(tags or {})})
        except Exception as err:  # the store cannot even be opened (locked, bad URI)
            self.client = None
            self.fail("the whole run", err)

    def _start_run(self, artifact_location: str | None, tags: dict[str, Any]) -> None:
        # Imported before the lock, so the lock is held for store work only.
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
        from mlflow import MlflowClient

        if self.parent_run_id:
            tags[PARENT_TAG] = self.parent_run_id
        # MlflowClient opens (and, the first time, creates) a sqlite store right away:
        # under the lock, so parallel jobs never create it twice.
        with store_access.creation_lock(self.tracking_uri):
            self.client = MlflowClient(self.tracking_uri)
            if self.parent_run_id:
                # A child run lives in its parent's experiment, or the UI cannot nest it.
                experiment_id = self.client.get_run(self.parent_run_id).info.experiment_id
            else:
                experiment_id = experiment_for(self.client, self.experiment_name, artifact_location)
            run = self.client.create_run(experiment_id, run_name=self.run_name,
                                         tags={k: str(v) for k, v in tags.items()})
        self._experiment_id, self._run_id = experiment_id, run.info.run_id

    # -- what the run is --------------------------------------------------------------------
    @property
    @override
    def name(self) -> str:
        return self.experiment_name

    @property
    @override
    def version(self) -> str | None:
        return self._run_id

    @property
    def run_id(self) -> str | None:
        return self._run_id

    @property
    def experiment_id(self) -> str | None:
        return self._experiment_id

    @property
    def experiment(self) -> Any:
        """MLflowClient of the run (a do-nothing stand-in once tracking failed)."""
        if self.client is None or self._run_id is None:
            return DummyExperiment()
        return self.client

    # -- failures ---------------------------------------------------------------------------
    def fail(self, what: str, err: BaseException | str) -> None:
        """Stop talking to the store; `what` is the part of the run it did not get."""
        if self.failure is None:
            self.failure = err if isinstance(err, str) else store_access.short_reason(err)
        if what not in self.not_logged:
            self.not_logged.append(what)
        self._pending.clear()

    @property
    def active(self) -> bool:
        return self.failure is None and self._run_id is not None and rank_zero_only.rank == 0

    # -- Lightning's logger API, guarded -----------------------------------------------------
    @override
    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        if not self.active:
            return
        from mlflow.entities import Param

        values = flatten(vars(params) if isinstance(params, Namespace) else dict(params))
        batch = [Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in values.items()]
        try:
            for start in range(0, len(batch), MAX_PARAMS_PER_BATCH):
                self.client.log_batch(self._run_id, params=batch[start:start + MAX_PARAMS_PER_BATCH])
        except Exception as err:
            self.fail("the module's hyperparameters and everything after them", err)

    @override
    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if not self.active:
            return
        from mlflow.entities import Metric

        timestamp_ms = store_access.now_ms()
        for key, value in metrics.items():
            if isinstance(value, str):
                continue
            self._pending.append(
                Metric(key=_NOT_A_METRIC_CHAR.sub("", key), value=float(value),
                       timestamp=timestamp_ms, step=step or 0)
            )
        if self.flush_every_s == 0:  # asked for: a store write per step, inside the step
            self.flush()

    def flush_if_due(self) -> None:
        """Send the buffered metrics if flush_every_s has passed: called where no step is
        timed (harness.run.build hands it to the presets' RunShared.between_steps)."""
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        """Send the buffered metrics now."""
        if not self.active or not self._pending:
            return
        pending, self._pending = self._pending, []
        try:
            for start in range(0, len(pending), MAX_METRICS_PER_BATCH):
                self.client.log_batch(self._run_id,
                                      metrics=pending[start:start + MAX_METRICS_PER_BATCH])
        except Exception as err:
            first_step = min(m.step for m in pending)
            self.fail(f"per-step metrics from step {first_step} on", err)
        self._last_flush = time.monotonic()

    @override
    def save(self) -> None:
        # Lightning calls this after every log_metrics: buffered, the flush comes between steps.
        return None

    @override
    @rank_zero_only
    def finalize(self, status: str) -> None:
        # The run's end status is set once the whole job ends (harness.tracking.run_logging).
        self.flush()
