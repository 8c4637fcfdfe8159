"""The job's side of its tracker process, which makes StoreOps' calls (docs/tracking.md, "The
tracker process"); writes (`SENT`) are not waited for. One tracker serves a process."""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from harness.tracking.store_access import StoreError, absolute_uri

log = logging.getLogger(__name__)
LOGGER_TARGET = "harness.tracking.mlflow_logger.HarnessMLFlowLogger"
PARENT_FILE = "mlflow_parent_run.json"  # in the sweep dir: where its jobs find the parent run
SENT = ("log_batch", "record_run", "log_sweep")  # StoreOps' writes: sent, not waited for
CLOSE_WAIT_S = 120  # at exit, how long the job waits for the tracker's last writes


def write_message(stream: Any, payload: Any) -> None:
    """One pickled message; the other side reads it with pickle.load (EOFError: pipe closed)."""
    pickle.dump(payload, stream, protocol=pickle.HIGHEST_PROTOCOL)
    stream.flush()


class Tracker:
    """StoreOps' methods; any other name is MlflowClient's, waited for (a user's
    `trainer.logger.experiment.log_param`)."""

    def __init__(self, uri: str, http: tuple[int, int]) -> None:
        self.uri, self.key = uri, absolute_uri(uri)
        # runs whose calls were sent and not checked yet: what to do if one of them failed
        self._unconfirmed: dict[str, Callable[[StoreError], None]] = {}
        # MLflow's log lines and Python warnings come back with the answers.
        self.process = subprocess.Popen([sys.executable, "-m", "harness.tracking.tracker_process"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env={**os.environ, "MLFLOW_CONFIGURE_LOGGING": "false"})
        self._send("open", (uri, http))  # (http timeout s, max retries)

    def _send(self, method: str, args: tuple, kwargs: dict | None = None, step: str | None = None,
              asked: bool = False) -> Any:
        try:
            write_message(self.process.stdin, (method, args, kwargs or {}, step, asked))
            if not asked:
                return None
            ok, value, logs = pickle.load(self.process.stdout)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError) as err:  # ValueError: pipe closed
            raise StoreError(f"the tracker process has ended ({type(err).__name__})", step) from None
        for name, level, message in logs:  # logged here, where the job logs its own lines
            logging.getLogger(name).log(level, "%s", message)
        if not ok:
            raise StoreError(*value)
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in SENT:  # `step` names the part of the run a failure is reported as
            return lambda *args, step=None, **kwargs: self._send(name, args, kwargs, step)
        return lambda *args, **kwargs: self._send(name, args, kwargs, asked=True)

    def start_run(self, *args: Any) -> tuple[str, str]:
        """StoreOps.start_run; calls run in order, so earlier runs' calls are confirmed now."""
        try:
            return self._send("start_run", args, asked=True)
        finally:
            self.confirm()

    def check(self, run_id: str) -> None:
        """Wait until every call so far is done; raise the first of `run_id`'s that failed."""
        failure = self._send("sync", ([run_id],), asked=True).get(run_id)
        if failure is not None:
            raise StoreError(*failure)

    def check_later(self, run_id: str, on_failure: Callable[[StoreError], None]) -> None:
        self._unconfirmed[run_id] = on_failure

    def confirm(self) -> None:
        """Wait until every call so far is done; hand each run checked later its failure."""
        if not self._unconfirmed:
            return
        pending, self._unconfirmed = self._unconfirmed, {}
        try:
            failures = {run_id: StoreError(*failure) for run_id, failure in
                        self._send("sync", (list(pending),), asked=True).items()}
        except StoreError as err:  # nothing is known of what went in
            failures = dict.fromkeys(pending, err)
        for run_id, err in failures.items():
            try:
                pending[run_id](err)
            except Exception as report_err:  # noqa: BLE001 - the other runs are still told
                log.warning("MLflow: the failure of run %s could not be recorded (%s)", run_id, report_err)

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """No more calls; a tracker still busy after `wait_s` finishes on its own, never killed."""
        self.confirm()
        with contextlib.suppress(OSError, ValueError):
            self.process.stdin.close()
        try:
            self.process.wait(wait_s)
        except subprocess.TimeoutExpired:
            log.warning("MLflow: the tracker process (pid %d) is still writing to %s; it"
                        " finishes on its own", self.process.pid, self.uri)
        self.process.stdout.close()  # no answer is awaited any more; left open, the exit warns


_tracker: Tracker | None = None


def tracker_for(uri: str, http: tuple[int, int]) -> Tracker:
    """This process's tracker for `uri` (one for another store is closed first)."""
    global _tracker
    current = _tracker
    if current is not None and current.process.poll() is None and current.key == absolute_uri(uri):
        return current
    if current is not None:
        atexit.unregister(current.close)
        current.close()
    _tracker = Tracker(uri, http)
    atexit.register(_tracker.close)
    return _tracker


def mlflow_settings(cfg: DictConfig) -> DictConfig | None:
    node = cfg.get("logger")
    return node if isinstance(node, DictConfig) and node.get("_target_") == LOGGER_TARGET else None


def http_settings(settings: DictConfig) -> tuple[int, int]:
    return int(settings.http_timeout_s), int(settings.http_max_retries)


def start_tracker(cfg: DictConfig) -> None:
    """With logger=mlflow, start the tracker now, beside the config checks' Lightning import."""
    settings = mlflow_settings(cfg)
    if settings is None:
        return
    try:
        uri, http = settings.tracking_uri, http_settings(settings)
    except Exception:  # noqa: BLE001 - the logger names the bad setting when it is built
        return
    if isinstance(uri, str) and uri.strip():
        tracker_for(uri, http)


def sweep_info(sweep_dir: Path) -> dict[str, Any]:
    """What the sweep's parent run left for its jobs in PARENT_FILE ({} if none)."""
    try:
        return json.loads((sweep_dir / PARENT_FILE).read_text())
    except (OSError, ValueError):
        return {}
