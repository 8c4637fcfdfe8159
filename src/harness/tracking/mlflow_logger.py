"""A Lightning logger that records a run into MLflow, through the job's tracker process, without
ever slowing or ending it: per-step metrics are sent only where no step is timed (`flush_if_due`);
a failing store turns tracking off for the rest of the run (docs/tracking.md)."""

from __future__ import annotations

import importlib.util
import re
import time
from argparse import Namespace
from collections.abc import Mapping
from typing import Annotated, Any

from lightning.pytorch.loggers import Logger
from lightning.pytorch.loggers.logger import DummyExperiment
from lightning.pytorch.utilities import rank_zero_only
from pydantic import Field, StringConstraints
from typing_extensions import override

from harness.config.overrides import as_typed
from harness.errors import HarnessError
from harness.launch.code_dir import sweep_dir
from harness.tracking.store_access import MAX_PARAM_CHARS, now_ms, probe, short_reason
from harness.tracking.store_ops import flatten
from harness.tracking.tracker import sweep_info, tracker_for

_NOT_A_METRIC_CHAR = re.compile(r"[^a-zA-Z0-9_/. -]+")
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
# ${oc.env:...} gives strings: these numbers are parsed from one (the constructor converts).
Number = Annotated[float, Field(strict=False, ge=0)]
Count = Annotated[int, Field(strict=False, ge=0)]


def _from_hydra_job() -> tuple[str, str | None, bool]:
    """(run name, the sweep's parent run id, whether in a sweep) of the current Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    from harness.config.sweep_keys import run_name

    if not HydraConfig.initialized():
        return "harness", None, False
    overrides = as_typed(HydraConfig.get().overrides.task)  # a ${...} in an override stays as written
    # A sweep's job run again in a fresh process (code_dir) is a single run that knows its sweep.
    if (directory := sweep_dir()) is None:
        return ",".join(overrides) or "harness", None, False
    sweep = sweep_info(directory)
    name = run_name(overrides, sweep.get("swept_keys") or [])
    return name or "harness", sweep.get("parent_run_id"), True


class HarnessMLFlowLogger(Logger):
    """An MLflow logger whose failures never end the run."""

    def __init__(self, tracking_uri: Name = "sqlite:///mlflow.db", experiment_name: Name = "harness",
                 run_name: str | None = None, artifact_location: str | None = None,
                 parent_run_id: str | None = None, log_artifacts: bool = True,
                 trace_size_cap_mb: Number = 100, flush_every_s: Number = 10,
                 probe_timeout_s: Annotated[Number, Field(gt=0)] = 3,
                 http_timeout_s: Annotated[Count, Field(gt=0)] = 10, http_max_retries: Count = 2,
                 tags: dict[str, Any] | None = None) -> None:
        super().__init__()
        if importlib.util.find_spec("mlflow") is None:
            raise HarnessError("logger=mlflow needs the mlflow package."
                               " Fix: pip install 'mlflow>=3', or run with logger=none")
        self.trace_size_cap_mb, self.flush_every_s = float(trace_size_cap_mb), float(flush_every_s)
        self.http = (int(http_timeout_s), int(http_max_retries))
        default_name, sweep_parent, self.in_sweep = _from_hydra_job()
        self.tracking_uri, self.experiment_name = tracking_uri, experiment_name
        self.run_name, self.parent_run_id = run_name or default_name, parent_run_id or sweep_parent
        self.log_artifacts = bool(log_artifacts)
        self.client: Any = None
        self.experiment_id: str | None = None
        self.run_id: str | None = None
        self.failure: str | None = None  # why tracking stopped, once it has
        self.not_logged: list[str] = []  # what the store did not get because of it
        self._pending: list[tuple[str, float, int, int]] = []  # (key, value, ms, step) not sent
        self._last_flush = time.monotonic()
        if rank_zero_only.rank != 0:
            return
        try:  # the tracker started with the job (run.job): MLflow is imported by now
            probe(tracking_uri, float(probe_timeout_s))
            self.client = tracker_for(self.tracking_uri, self.http)
            self.experiment_id, self.run_id = self.client.start_run(
                self.experiment_name, artifact_location, self.parent_run_id, self.run_name,
                {k: str(v) for k, v in (tags or {}).items()})
        except Exception as err:  # the store is unreachable or cannot be opened (locked, bad URI)
            self.fail("the whole run", err)

    @property
    @override
    def name(self) -> str:
        return self.experiment_name

    @property
    @override
    def version(self) -> str | None:
        return self.run_id

    @property
    def experiment(self) -> Any:
        """The run's MlflowClient, in the tracker process (a stand-in once tracking failed)."""
        if self.client is None or self.run_id is None:
            return DummyExperiment()
        return self.client

    def fail(self, what: str, err: BaseException | str) -> None:
        """Stop talking to the store; `what` is the part of the run it did not get."""
        if self.failure is None:
            self.failure = err if isinstance(err, str) else short_reason(err)
        if what not in self.not_logged:
            self.not_logged.append(what)
        self._pending.clear()

    @property
    def active(self) -> bool:
        return self.failure is None and self.run_id is not None and rank_zero_only.rank == 0

    @override
    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        if not self.active:
            return
        values = flatten(vars(params) if isinstance(params, Namespace) else dict(params))
        self._write("the module's hyperparameters and everything after them",
                    params=[(k, str(v)[:MAX_PARAM_CHARS]) for k, v in values.items()])

    @override
    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if not self.active:
            return
        timestamp_ms = now_ms()
        self._pending += [(_NOT_A_METRIC_CHAR.sub("", key), float(value), timestamp_ms, step or 0)
                          for key, value in metrics.items() if not isinstance(value, str)]
        if self.flush_every_s == 0:  # asked for: a store write per step, inside the step
            self.flush()

    def flush_if_due(self) -> None:
        """Send the buffered metrics if flush_every_s has passed (called where no step is timed)."""
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        if not self.active or not self._pending:
            return
        pending, self._pending = self._pending, []
        self._write(f"per-step metrics from step {min(m[3] for m in pending)} on", metrics=pending)
        self._last_flush = time.monotonic()

    def _write(self, what: str, **batch: Any) -> None:
        """One batch, not waited for: a failure comes back named `what` at the run's end."""
        try:
            self.client.log_batch(self.run_id, step=what, **batch)
        except Exception as err:  # the tracker process has ended
            self.fail(what, err)

    @override
    def save(self) -> None:
        """Lightning calls this after every log_metrics: buffered, the flush comes between steps."""

    @override
    @rank_zero_only
    def finalize(self, status: str) -> None:
        # The run's end status is set once the whole job ends (harness.tracking.run_logging).
        self.flush()
