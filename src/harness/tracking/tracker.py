"""MLflow in a process of its own beside the job (issue #22): the job's side.

Importing MLflow takes 1.6-1.8 s of CPU and creating a new sqlite store about 1 s more; in the
job they were the largest fixed cost of a default run. The job starts its tracker process first
thing (`start_tracker`, from run.job), so MLflow's import and the store's opening run on the
other core while the job imports Lightning; the job itself never imports MLflow. One tracker
serves a process: a sweep's jobs (Hydra's basic launcher runs them in one process) and its
parent run share it (one import, one open store).

Calls that return nothing are sent without waiting, each named by the part of the run it
belongs to (`step`); `check(run_id)` waits until the tracker has done all of them and raises
the first that failed, naming its step. During a run the logger's writes (the module's
hyperparameters, a batch of per-step metrics between steps) are small and not waited for. At
the run's end a single run checks before it says where the run is, as before: when `harness`
returns, the store holds the whole run. A sweep's job is checked later (`check_later`): its
end's writes go on while Hydra sets up the next job, whose run's creation waits for them
(calls run in order), so the next job does not measure beside them; a failure still reaches
the job's result.json, from the next run's start, the sweep's end or the process's exit
(`confirm`). Nothing is lost to the split (harness.tracking.tracker_process
says how): the tracker outlives Ctrl-C and SIGTERM until the job has made its last call, and
ends KILLED a run whose job died without ending it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import struct
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from omegaconf import DictConfig

from harness.tracking import store_access

log = logging.getLogger(__name__)
LOGGER_TARGET = "harness.tracking.mlflow_logger.HarnessMLFlowLogger"
_HEADER = struct.Struct("!I")
CLOSE_WAIT_S = 120  # at exit, how long the job waits for the tracker's last writes
HTTP_DEFAULTS = (10, 2)  # conf/logger/mlflow.yaml's http_timeout_s, http_max_retries


def write_frame(stream: Any, payload: Any) -> None:
    """One message: its length, then its pickle (plain values only)."""
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: Any) -> Any:
    """The next message; EOFError when the other side has closed the pipe."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


class TrackerError(store_access.StoreError):
    """A store call failed in the tracker: the store's reason, and the step it belonged to."""

    def __init__(self, reason: str, step: str | None = None) -> None:
        super().__init__(reason)
        self.step = step


class Tracker:
    """The job's handle on its tracker process; the calls mirror harness.tracking.store_ops."""

    def __init__(self, uri: str, http_timeout_s: int, http_max_retries: int) -> None:
        self.uri = uri
        self.key = store_access.absolute_uri(uri)
        # runs whose calls were sent and not checked yet: what to do if one of them failed
        self._unconfirmed: dict[str, Callable[[TrackerError], None]] = {}
        # MLflow prints through a handler of its own unless told not to; its log lines and
        # Python warnings come back with the replies and go to the job's log (forward_logs).
        env = {**os.environ, "MLFLOW_CONFIGURE_LOGGING": "false"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "harness.tracking.tracker_process"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self._send("open", (uri, http_timeout_s, http_max_retries))

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def _send(self, method: str, args: tuple, step: str | None = None) -> None:
        try:
            write_frame(self.process.stdin, (method, args, step, False))
        except (OSError, ValueError) as err:  # ValueError: the pipe was closed here
            raise TrackerError(f"the tracker process has ended ({type(err).__name__})",
                               step) from None

    def _ask(self, method: str, args: tuple) -> Any:
        try:
            write_frame(self.process.stdin, (method, args, None, True))
            ok, value, logs = read_frame(self.process.stdout)
        except (OSError, ValueError, EOFError) as err:
            raise TrackerError(f"the tracker process has ended ({type(err).__name__})") from None
        forward_logs(logs)
        if not ok:
            raise TrackerError(*value)
        return value

    # -- calls whose answer the job needs: they wait ------------------------------------------
    def start_run(self, experiment_name: str, artifact_location: str | None,
                  parent_run_id: str | None, run_name: str, tags: dict[str, str]
                  ) -> tuple[str, str]:
        """(experiment id, run id) of a new run (StoreOps.start_run). Calls run in order: the
        answer also means an earlier run's calls are done, so they are confirmed now."""
        try:
            return self._ask("start_run", (experiment_name, artifact_location, parent_run_id,
                                           run_name, tags))
        finally:
            self.confirm()

    def run_info(self, run_id: str) -> tuple[str, str]:
        """(experiment id, status) of a run."""
        return self._ask("run_info", (run_id,))

    def check(self, run_id: str) -> None:
        """Wait until every call so far is done; raise the first of `run_id`'s that failed."""
        failure = self._ask("sync", ([run_id],)).get(run_id)
        if failure is not None:
            raise TrackerError(*failure)

    def check_later(self, run_id: str, on_failure: Callable[[TrackerError], None]) -> None:
        """Check `run_id`'s calls at the next `confirm`; `on_failure` gets the first that
        failed."""
        self._unconfirmed[run_id] = on_failure

    def confirm(self) -> None:
        """Wait until every call so far is done, and hand each run checked later whose calls
        failed its failure (a tracker that has ended: every such run's)."""
        if not self._unconfirmed:
            return
        pending, self._unconfirmed = self._unconfirmed, {}
        try:
            failures = {run_id: TrackerError(*failure) for run_id, failure in
                        self._ask("sync", (list(pending),)).items()}
        except TrackerError as err:  # nothing is known of what went in
            failures = dict.fromkeys(pending, err)
        for run_id, err in failures.items():
            try:
                pending[run_id](err)
            except Exception as report_err:  # noqa: BLE001 - the other runs are still told
                log.warning("MLflow: the failure of run %s could not be recorded (%s)", run_id,
                            report_err)

    # -- calls that return nothing: sent without waiting --------------------------------------
    def log_batch(self, run_id: str, metrics: Sequence[Any] = (), params: Sequence[Any] = (),
                  tags: Sequence[Any] = (), step: str | None = None) -> None:
        self._send("log_batch", (run_id, list(metrics), list(params), list(tags)), step)

    def log_new_params(self, run_id: str, params: Sequence[Any], step: str | None = None) -> None:
        self._send("log_new_params", (run_id, list(params)), step)

    def log_artifact(self, run_id: str, path: str, artifact_path: str | None = None,
                     step: str | None = None) -> None:
        self._send("log_artifact", (run_id, path, artifact_path), step)

    def log_artifacts(self, run_id: str, path: str, artifact_path: str | None = None,
                      step: str | None = None) -> None:
        self._send("log_artifacts", (run_id, path, artifact_path), step)

    def log_table_csv(self, run_id: str, csv_path: str, artifact_file: str,
                      step: str | None = None) -> None:
        self._send("log_table_csv", (run_id, csv_path, artifact_file), step)

    def log_system_series(self, run_id: str, csv_path: str, step: str | None = None) -> None:
        self._send("log_system_series", (run_id, csv_path), step)

    def set_terminated(self, run_id: str, status: str, step: str | None = None) -> None:
        self._send("set_terminated", (run_id, status), step)

    # -- a user's own calls ---------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        """Any other MlflowClient method, run in the tracker and waited for: a user's
        `trainer.logger.experiment.log_param(...)`, as with Lightning's MLFlowLogger."""
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._ask("client", (name, args, kwargs))

        return call

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """No more calls: the runs checked later are confirmed, the tracker does what is
        queued, ends any run left open, and exits. Waited for, so that the job's process ends
        after its writes; one still busy after `wait_s` is left to finish on its own, never
        killed."""
        self.confirm()
        with contextlib.suppress(OSError, ValueError):
            self.process.stdin.close()
        try:
            self.process.wait(wait_s)
        except subprocess.TimeoutExpired:
            log.warning("MLflow: the tracker process (pid %d) is still writing to %s; it"
                        " finishes on its own", self.process.pid, self.uri)


def forward_logs(records: list[tuple[str, int, str]]) -> None:
    """The tracker's log lines (MLflow's, alembic's, Python warnings), logged here under their
    own loggers' names: the job's logging puts them where it puts its own."""
    for name, level, message in records:
        logging.getLogger(name).log(level, "%s", message)


_tracker: Tracker | None = None


def tracker_for(uri: str, http_timeout_s: int, http_max_retries: int) -> Tracker:
    """This process's tracker, opening `uri`: the one already running for that store, or a
    new one (a tracker for another store is closed first)."""
    global _tracker
    current = _tracker
    if current is not None and current.alive and current.key == store_access.absolute_uri(uri):
        return current
    if current is not None:
        atexit.unregister(current.close)
        current.close()
    _tracker = Tracker(uri, http_timeout_s, http_max_retries)
    atexit.register(_tracker.close)
    return _tracker


def mlflow_settings(cfg: DictConfig) -> DictConfig | None:
    """The `logger` node when it is harness's MLflow logger."""
    node = cfg.get("logger")
    if isinstance(node, DictConfig) and node.get("_target_") == LOGGER_TARGET:
        return node
    return None


def http_settings(settings: DictConfig) -> tuple[int, int]:
    """(http_timeout_s, http_max_retries) of the logger's settings."""
    return int(settings.http_timeout_s), int(settings.http_max_retries)


def start_tracker(cfg: DictConfig) -> None:
    """With logger=mlflow, start the tracker now, so that MLflow's import and the store's
    opening run beside the config checks' Lightning import (run.job, global rank zero)."""
    settings = mlflow_settings(cfg)
    if settings is None:
        return
    try:
        uri, http = settings.tracking_uri, http_settings(settings)
    except Exception:  # noqa: BLE001 - the logger names the bad setting when it is built
        return
    if isinstance(uri, str) and uri.strip():
        tracker_for(uri, *http)
