"""`ProfileSession`: harness's presets inside a user's own training script (docs/own-model.md);
result.json is written however the script ends (at interpreter exit at the latest)."""

from __future__ import annotations

import atexit
import datetime as dt
import functools
import logging
import os
import sys
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import get_object
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, open_dict
from typing_extensions import override

from harness import memory_peaks
from harness.cli_errors import describe
from harness.config.arguments import check_arguments, target_nodes
from harness.config.composed import hydra_config
from harness.config.locations import conf_dir
from harness.errors import ConfigError, HarnessError
from harness.launch.ddp import fits_in_other_processes
from harness.launch.output_dirs import new_dir
from harness.result.schema import Observed, RunResult
from harness.run import build
from harness.run.finish import write_reports
from harness.run.measure import record_what_ran
from harness.run.record import RunRecord
from harness.terminal import show, use_console

log = logging.getLogger(__name__)

# Presets that need the `harness` command around the run, not only a Trainer.
COMMAND_ONLY = {"nsys": "it re-runs the whole command under `nsys profile`",
                "pyspy": "it writes into the harness job's run directory"}


@contextmanager
def _hydra_for_compose() -> Iterator[None]:
    """Room for compose(): a script that is itself a Hydra app has GlobalHydra in use."""
    hydra = GlobalHydra.instance()
    previous = hydra.hydra if hydra.is_initialized() else None
    hydra.clear()
    try:
        yield
    finally:
        GlobalHydra.instance().clear()
        if previous is not None:
            GlobalHydra.instance().initialize(previous)


def compose_presets(presets: Sequence[str], overrides: Sequence[str], output_dir: Path) -> DictConfig:
    """harness's config with `profiler=[presets]` and `overrides`, as the command composes it."""
    wanted = [f"profiler=[{','.join(presets)}]", "logger=none", *overrides]
    try:
        with _hydra_for_compose(), initialize_config_dir(str(conf_dir()), version_base="1.3"):
            cfg = compose("config", overrides=wanted, return_hydra_config=True)
    except Exception as err:  # Hydra's multi-line errors, in the command's one line
        raise HarnessError(describe(err)[1]) from None
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(output_dir)
        cfg.hydra.runtime.cwd = os.getcwd()
    return cfg


class _TrainerSeen(Callback):
    """The Trainer the session's callbacks went into; its setup starts the peak-memory marks."""

    def __init__(self) -> None:
        self.trainer: Any = None

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        # Here in a process multiprocessing started: refused before a step is spent.
        _refuse_other_processes(trainer)
        if self.trainer is None:
            memory_peaks.reset(trainer.strategy.root_device)
        self.trainer = trainer


class ProfileSession:
    """conf/profiler presets (and Hydra `overrides`) for the user's Trainer; `finish` writes
    reports/ and result.json into `output_dir` (default outputs/DATE/TIME)."""

    def __init__(self, presets: str | Sequence[str] = ("speed",), output_dir: str | Path | None = None,
                 overrides: Sequence[str] = ()) -> None:
        if not logging.getLogger().handlers:  # a plain script: print harness's lines and tables
            use_console()
        names = [presets] if isinstance(presets, str) else list(presets)
        if refused := next((n for n in names if n in COMMAND_ONLY), None):
            raise ConfigError("presets", refused, f"a preset that runs inside a Trainer: {refused}"
                              f" does not ({COMMAND_ONLY[refused]})",
                              f"run it with the command: harness profiler=[{refused}]")
        now = dt.datetime.now()
        self.output_dir = (Path(output_dir) if output_dir
                           else new_dir(f"outputs/{now:%Y-%m-%d}/{now:%H-%M-%S}")).absolute()
        self.overrides = [f"profiler=[{','.join(names)}]", *overrides]
        self.cfg = compose_presets(names, overrides, self.output_dir)
        with hydra_config(self.cfg):
            check_arguments([(key, get_object(node._target_), node) for key, node
                             in target_nodes(self.cfg) if key.startswith("profiler.")])
            self.presets = build.build_presets(self.cfg)
        self._seen = _TrainerSeen()
        self.record = RunRecord(self.output_dir, overrides=self.overrides)
        self.result: RunResult = self.record.result
        self.result.isolation = {"peak_rss_reset": memory_peaks.reset()}
        self._finished = False
        # A weak reference: a session the script let go of (a notebook cell, a test) is no
        # business of the interpreter's exit.
        self._exit_hook = functools.partial(_at_exit, weakref.ref(self))
        atexit.register(self._exit_hook)

    @property
    def callbacks(self) -> list[Callback]:
        return [*self.presets.callbacks, self.presets.observer, self._seen]

    @property
    def profiler(self) -> Any:
        """The preset that is a Lightning Profiler (pytorch, memory, ...), else None."""
        return self.presets.profiler

    def finish(self, trainer: Any = None) -> RunResult:
        """Write reports/ and result.json for the Trainer the callbacks ran in; once."""
        if self._finished:
            return self.result
        self._done()
        trainer = trainer or self._seen.trainer
        try:
            self._record(trainer)
        except BaseException as err:
            self.record.fail(err)
            raise
        finally:
            if trainer is None or trainer.is_global_zero:
                show(f"[bold]result:[/bold] {self.record.write()}")
        return self.result

    def _record(self, trainer: Any) -> None:
        if trainer is not None and self._seen.trainer is None:
            _refuse_other_processes(trainer)
        if trainer is None or self._seen.trainer is not trainer:
            raise HarnessError("the session's callbacks never ran in a Trainer. Fix: Trainer(callbacks=[...,"
                               " *session.callbacks], profiler=session.profiler), then fit or predict")
        if self.profiler is not None and trainer.profiler is not self.profiler:
            raise HarnessError(f"the Trainer has another profiler than the session's"
                               f" ({type(self.profiler).__name__}), whose report is missing."
                               " Fix: Trainer(profiler=session.profiler)")
        result = self.result
        record_what_ran(result, trainer, trainer.precision, self.presets)
        result.model = _qualified(trainer.lightning_module)
        result.data = None if trainer.datamodule is None else _qualified(trainer.datamodule)
        # What the script chose is recorded as what ran: there are no knobs to hold it against.
        result.knobs = _knobs_that_ran(trainer, result.observed)
        if trainer.is_global_zero:
            write_reports(self.presets.by_name, self.record)
        if trainer.interrupted:
            result.status, result.reason = "interrupted", "the Trainer was interrupted"
        elif result.status == "running":
            result.status = "ok"

    def __enter__(self) -> ProfileSession:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        if err is None:
            self.finish()
        elif not self._finished:
            self._record_failure(err)

    def _done(self) -> None:
        self._finished = True
        atexit.unregister(self._exit_hook)

    def _record_failure(self, err: BaseException) -> Path | None:
        """As a failed job: the reports of what ran, the error's status; result.json's path."""
        self._done()
        trainer = self._seen.trainer
        if trainer is not None:
            try:
                self._record(trainer)
            except Exception as failed:  # noqa: BLE001 - the script's error matters more
                log.warning("session: reports after the error incomplete: %s", failed)
        self.record.fail(err)
        if trainer is None or trainer.is_global_zero:
            return self.record.write()
        return None


def _at_exit(ref: weakref.ref[ProfileSession]) -> None:
    """At exit, a session alive and unfinished: an uncaught exception (sys.last_value) recorded
    as the `with` block would, or the forgotten finish() made now."""
    session = ref()
    if session is None:
        return
    err = getattr(sys, "last_value", None)
    try:
        if isinstance(err, BaseException):
            path = session._record_failure(err)
            if path is not None:
                log.warning("session: the script stopped before session.finish(); %s"
                            " records what ran and the error", path)
        elif session._seen.trainer is not None:
            log.warning("session: the script ended without session.finish(); writing result.json"
                        " now (call finish, or use `with ProfileSession(...)`)")
            session.finish()
    except Exception as failed:  # noqa: BLE001 - at exit: one line, not a traceback
        log.error("session: %s", failed)


def _refuse_other_processes(trainer: Any) -> None:
    if fits_in_other_processes(trainer):
        raise HarnessError(
            f"the session cannot measure strategy {type(trainer.strategy).__name__} as it is launched here:"
            " its fit runs in processes Lightning starts with multiprocessing (ddp_spawn, ddp_fork,"
            " ddp_notebook), with copies of the session's presets. Fix: Trainer(strategy='ddp') in a script"
            " (each rank a process of its own), or devices=1")


def _qualified(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _knobs_that_ran(trainer: Any, observed: Observed) -> dict[str, Any]:
    """result.json's `knobs` of a script, read off the Trainer and the batches."""
    sizes = {p: n for p, n in observed.examples_per_batch.items() if n is not None}
    knobs: dict[str, Any] = {
        "batch_size": next((sizes[p] for p in ("train", "inference", "validation") if p in sizes), None),
        "precision": trainer.precision, "lightning_precision": trainer.precision}
    phases = set(observed.examples_per_batch)
    if {"train", "inference"} & phases:
        knobs["mode"] = ("both" if {"train", "inference"} <= phases
                         else "train" if "train" in phases else "inference")
    return knobs
