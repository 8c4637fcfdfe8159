"""The `harness` command: a Hydra app that hands the config to a job (harness.run.job), importing
nothing heavy itself. Exit status: 0 done; 1 the run (or every job of a sweep) failed; 2 a
command-line or config error. Every error is one line; a traceback goes to error.log."""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from harness.config.locations import conf_dir
from harness.errors import HarnessError, output_error

log = logging.getLogger("harness.cli")
# What can set `hydra.mode` (else Hydra composes the config twice to read it), besides a config
# of the user's (cli_errors.CONFIG_FLAGS); conf/ and sweeps/ never do (tests/test_config_compose.py).
_SETS_RUN_MODE = ("--experimental-rerun", "hydra.mode", "hydra.searchpath")
# How a job ended; in a sweep the job's progress line says it (harness.terminal).
job_log = logging.getLogger("harness.cli.job")


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def _app(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from harness.config.overrides import as_typed
    from harness.result.store import load_result
    from harness.run.job import run_job
    from harness.run.record import classify_failure, saved_traceback
    from harness.terminal import libraries_to_log, verbose

    job = HydraConfig.get()
    multirun = job.mode == RunMode.MULTIRUN
    output_dir = Path(job.runtime.output_dir)
    # trainer.enable_progress_bar=null: Lightning's bar in a single run, none in a sweep's
    trainer = cfg.get("trainer")
    if isinstance(trainer, DictConfig) and trainer.get("enable_progress_bar", False) is None:
        trainer.enable_progress_bar = not multirun or verbose()
    try:
        with libraries_to_log():
            result = run_job(cfg, output_dir, as_typed(job.overrides.task))
    except Exception as err:
        # harness's own errors, and a report or log the disk refused, are said as they are.
        said = err if isinstance(err, HarnessError) else output_error(err)
        if said is not None:
            job_log.error("%s", said)
        else:
            status, reason = classify_failure(err)
            with contextlib.suppress(Exception):  # the written one: a lost rank named over its echo
                written = load_result(output_dir)
                status, reason = written.status, written.reason or reason
            job_log.error("%s: %s (%s)", status, reason, saved_traceback(err, output_dir))
        if not multirun:
            sys.exit(said.exit_status if said is not None else 1)
    else:
        if result.status in ("invalid", "failed"):  # measured not what the knobs say, or nothing
            job_log.error("%s: %s", result.status, result.reason)
            if not multirun:
                sys.exit(1)
        elif result.status == "partial":
            job_log.warning("partial: %s", result.reason)


def main() -> None:
    from harness import private_api
    from harness.cli_errors import CONFIG_FLAGS, describe
    from harness.launch.output_dirs import register_resolver
    from harness.sweep.named import register_sweeps
    from harness.sweep.progress import current
    from harness.terminal import quiet_libraries, use_console

    # Hydra would print its errors with a partial traceback; raised, they are said in one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    # Registered first, so it runs last of the exit handlers: the interpreter's final
    # collections then skip the ~600k objects torch and Lightning made (1.3-1.9 s at every
    # exit). Objects in reference cycles are not finalized: every file is closed by then.
    atexit.register(gc.freeze)
    quiet_libraries()
    use_console()
    if {"--help", "-h", "--hydra-help"} & set(sys.argv[1:]):
        private_api.list_config_groups_once()  # not one repository copy per config group
    try:
        register_sweeps()  # `sweep=NAME` options, from sweeps/*.yaml
        register_resolver()  # ${unique_dir:...}: run and sweep directories never shared
        own_mode = any(a.lstrip("+~").startswith((*CONFIG_FLAGS, *_SETS_RUN_MODE)) for a in sys.argv[1:])
        with contextlib.nullcontext() if own_mode else private_api.run_mode_unset():
            _app()
    except BaseException as err:  # noqa: BLE001 - every ending gets one line and a status
        if isinstance(err, Exception) and isinstance(err.__context__, KeyboardInterrupt):
            err = err.__context__  # a stop signal that hit OmegaConf mid-compose: its error
        _end_unfinished_sweep(err)
        if isinstance(err, SystemExit):
            raise
        code, message = describe(err)
        log.error("%s", message)
        sys.exit(code)
    sweep = current()  # the multirun this command ran, if it was one
    verdict = sweep.verdict if sweep is not None else None
    if verdict is not None and verdict.exit_code:  # no job of the sweep measured its point
        log.error("%s", verdict.message or "the sweep failed")
        sys.exit(verdict.exit_code)


def _end_unfinished_sweep(err: BaseException) -> None:
    """A multirun that stopped early: the finished jobs' table, the parent run KILLED/FAILED."""
    from harness.sweep.progress import current
    from harness.terminal import end_job_log

    if (sweep := current(running=True)) is None:
        return
    end_job_log()  # what follows is the sweep's (sweep.log), not the last job's cli.log
    interrupted = isinstance(err, KeyboardInterrupt) or (
        isinstance(err, SystemExit) and err.code not in (None, 0, 1, 2))
    sweep.end_early(interrupted)
    from harness.tracking.parent_run import end_parent_run

    end_parent_run(sweep.directory, "KILLED" if interrupted else "FAILED")


if __name__ == "__main__":
    main()
