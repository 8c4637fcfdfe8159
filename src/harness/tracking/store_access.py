"""Reaching an MLflow store (sqlite or server) without stalling a benchmark: probe, open with
bounded retries, start runs. MLflow is imported only when a store is opened."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PARENT_TAG = "mlflow.parentRunId"
# The tag MLflow 3's UI writes for a "Machine learning" experiment (docs/tracking.md).
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"
MAX_PARAM_CHARS = 6000  # MLflow 3's limit on a param value
MAX_TAG_CHARS = 8000  # MLflow 3's limit on a tag value
HTTP_DEFAULTS = (10, 2)  # conf/logger/mlflow.yaml's http_timeout_s, http_max_retries
# The database driver's own line inside MLflow's message: "(sqlite3.OperationalError) ...".
_DRIVER_LINE = re.compile(r"\((\w+\.\w+Error)\) ([^\n\[]+)")


class StoreError(RuntimeError):
    """A store call that failed: its one-line reason, and the part of the run (`step`) it was."""

    def __init__(self, reason: str, step: str | None = None) -> None:
        super().__init__(reason)
        self.step = step


class Unreachable(StoreError):
    """Why the store cannot take a run, found by `probe`."""


def is_http(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def sqlite_path(uri: str) -> Path | None:
    """The database file of a sqlite:/// URI, or None for any other store."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def absolute_uri(uri: str) -> str:
    """The same store named so that it works from any working directory."""
    path = sqlite_path(uri)
    return uri if path is None or path.is_absolute() else f"sqlite:///{path.resolve()}"


def probe(uri: str, timeout_s: float) -> None:
    """Raise Unreachable if the store cannot take a run. Any HTTP answer counts as reachable
    (a server behind auth answers 401); a sqlite file is opened for writing as sqlite would,
    rather than asking MLflow, which answers with a long traceback."""
    path = sqlite_path(uri)
    if is_http(uri):
        import requests

        try:
            requests.get(uri.rstrip("/") + "/health", timeout=timeout_s)
        except requests.RequestException as err:
            raise Unreachable(f"cannot reach {uri}: {type(err).__name__}") from None
    elif path is not None:
        import tempfile

        try:
            if path.exists():
                open(path, "r+b").close()  # opened for writing, nothing written
            if path.parent.is_dir():  # sqlite writes its journal beside the database
                tempfile.TemporaryFile(dir=path.parent).close()
        except OSError as err:
            where = err.filename if isinstance(err.filename, str) else path
            raise Unreachable(f"the store is read-only ({where}: {err.strerror or err})") from None


def short_reason(err: BaseException) -> str:
    """One line about a tracking failure: the database's own error when there is one (MLflow's
    first line is often about SQLAlchemy's autoflush), never MLflow's multi-line detail."""
    text = str(err).strip()
    if isinstance(err, StoreError):
        return text
    driver = _DRIVER_LINE.search(text)
    if driver:
        why = driver[2].strip()
        if "readonly database" in why:
            why = f"the store is read-only: {why}"
        return f"{why} ({driver[1]})"
    first = text.splitlines()[0] if text else ""
    return f"{type(err).__name__}: {first[:200]}" if first else type(err).__name__


def now_ms() -> int:
    return int(time.time() * 1000)


@contextlib.contextmanager
def creation_lock(uri: str) -> Iterator[None]:
    """Serialise creating a sqlite store, experiment and run across local processes (a server
    serialises on its own; later writes wait on sqlite's 20 s busy timeout instead)."""
    import fcntl

    path = sqlite_path(uri)
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # A hidden file beside the database: sqlite's own locks stay untouched.
    with open(path.parent / f".{path.name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released as the file closes
        yield


class Store:
    """One MLflow store, a new sqlite file created at the first call that needs it; a store that
    cannot be opened raises its reason (StoreError) at each call."""

    def __init__(self, uri: str, http: tuple[int, int] = HTTP_DEFAULTS, client: Any = None) -> None:
        self.uri, self._client, self._unopened = uri, client, None
        if client is None:
            # HTTP bounded (MLflow's 7 retries with backoff stall a run for minutes); log lines
            # left to harness's logging (MLflow's handler prints whole SQLAlchemy tracebacks).
            os.environ["MLFLOW_CONFIGURE_LOGGING"] = "false"
            os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(int(http[0]))
            os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(int(http[1]))
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")  # seconds, not minutes
            import mlflow.store.tracking.sqlalchemy_store  # noqa: F401 - imported now, opened later

            path = sqlite_path(uri)
            if path is None or path.exists():
                self._open()

    def _open(self) -> None:
        from mlflow import MlflowClient

        try:
            with creation_lock(self.uri):  # the first time: created and migrated
                self._client = MlflowClient(self.uri)
        except Exception as err:  # noqa: BLE001 - said at the first call
            self._unopened = short_reason(err)

    @property
    def client(self) -> Any:
        if self._client is None and self._unopened is None:
            self._open()
        if self._unopened is not None:
            raise StoreError(self._unopened)
        return self._client

    def start_run(self, experiment_name: str, artifact_location: str | None, parent_run_id: str | None,
                  run_name: str, tags: dict[str, str]) -> tuple[str, str]:
        """(experiment id, run id) of a new run; a child lives in its parent's experiment, or
        the UI cannot nest it; a missing experiment is created as a model-training one."""
        client = self.client  # opened first: opening a new store takes the lock too
        with creation_lock(self.uri):
            experiment = None if parent_run_id else client.get_experiment_by_name(experiment_name)
            if parent_run_id:
                experiment_id = client.get_run(parent_run_id).info.experiment_id
                tags = {**tags, PARENT_TAG: parent_run_id}
            elif experiment is not None and experiment.lifecycle_stage != "deleted":
                experiment_id = experiment.experiment_id
            else:
                experiment_id = client.create_experiment(
                    experiment_name, artifact_location=artifact_location, tags={KIND_TAG: KIND})
            run = client.create_run(experiment_id, run_name=run_name[:250], tags=tags)
            return experiment_id, run.info.run_id

    def run_info(self, run_id: str) -> tuple[str, str]:  # (experiment id, status)
        info = self.client.get_run(run_id).info
        return info.experiment_id, info.status
