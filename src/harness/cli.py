"""The `harness` command: a Hydra app whose only job is to hand the config to a run.

Nothing heavy is imported here: torch, Lightning and MLflow load inside the
job, so `harness --help` and `harness --cfg job` answer at once.

Exit status: 0 done; 1 the run failed (or every job of a sweep did); 2 something to fix
on the command line or in the config, Hydra's own errors included. Every error is one
line on stderr; a traceback, when there is one, goes to the run's error.log.
"""

from __future__ import annotations

import atexit
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
# How a job ended; in a sweep the job's progress line says it (harness.terminal).
job_log = logging.getLogger("harness.cli.job")


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def _app(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from harness.config.overrides import as_typed
    from harness.run.job import run_job
    from harness.run.record import classify_failure, saved_traceback
    from harness.terminal import libraries_to_log

    job = HydraConfig.get()
    multirun = job.mode == RunMode.MULTIRUN
    output_dir = Path(job.runtime.output_dir)
    _progress_bar(cfg, multirun)
    try:
        # torch's C++ lines, TorchDynamo's log lines: the job's log, not the terminal.
        with libraries_to_log():
            result = run_job(cfg, output_dir, as_typed(job.overrides.task))
    except HarnessError as err:
        job_log.error("%s", err)
        if not multirun:
            sys.exit(err.exit_status)
    except Exception as err:
        unwritable = output_error(err)  # a report or log the disk refused
        if unwritable is not None:
            job_log.error("%s", unwritable)
        else:
            status, reason = classify_failure(err)
            job_log.error("%s: %s (%s)", status, reason, saved_traceback(output_dir, err))
        if not multirun:
            sys.exit(unwritable.exit_status if unwritable else 1)
    else:
        if result.status in ("invalid", "failed"):  # measured not what the knobs say, or nothing
            job_log.error("%s: %s", result.status, result.reason)
            if not multirun:
                sys.exit(1)
        elif result.status == "partial":
            job_log.warning("partial: %s", result.reason)
    # In a sweep a failed job is recorded in its result.json and the sweep goes on.


def _progress_bar(cfg: DictConfig, multirun: bool) -> None:
    """trainer.enable_progress_bar=null: Lightning's bar in a single run; none in a sweep's
    jobs, whose terminal shows one line each (harness.sweep.progress), unless verbose."""
    from harness.terminal import verbose

    trainer = cfg.get("trainer")
    if isinstance(trainer, DictConfig) and "enable_progress_bar" in trainer and (
            trainer.enable_progress_bar is None):
        trainer.enable_progress_bar = not multirun or verbose()


def main() -> None:
    """Entry point of the `harness` console script."""
    from harness.cli_errors import describe
    from harness.launch.output_dirs import register_resolver
    from harness.sweep.named import register_sweeps
    from harness.sweep.progress import current
    from harness.terminal import quiet_libraries, use_console

    # Hydra would print its errors with a partial traceback; raised, they are said in one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    # Registered first, so it runs last of the exit handlers (after MLflow's, the tracker's
    # close, logging's flush): the heap is frozen, and the interpreter's final collections
    # skip the ~600k objects torch and Lightning made, which took 1.3-1.9 s of CPU at every
    # exit, longer than a short run's training. What it gives up: objects still held in
    # reference cycles are not finalized; nothing of harness waits for that, since every
    # file is written whole and closed before (reports.files) and the tracker has answered.
    atexit.register(gc.freeze)
    quiet_libraries()
    use_console()
    if {"--help", "-h", "--hydra-help"} & set(sys.argv[1:]):
        from harness import private_api

        private_api.list_config_groups_once()  # not one repository copy per config group
    try:
        register_sweeps()  # `sweep=NAME` options, from sweeps/*.yaml
        register_resolver()  # ${unique_dir:...}: run and sweep directories never shared
        _app()
    except SystemExit as err:
        _end_unfinished_sweep(err)
        raise
    except BaseException as err:  # noqa: BLE001 - every ending gets one line and a status
        _end_unfinished_sweep(err)
        code, message = describe(err)
        log.error("%s", message)
        sys.exit(code)
    sweep = current()  # the multirun this command ran, if it was one
    verdict = sweep.verdict if sweep is not None else None
    if verdict is not None and verdict.exit_code:  # no job of the sweep measured its point
        log.error("%s", verdict.message or "the sweep failed")
        sys.exit(verdict.exit_code)


def _end_unfinished_sweep(err: BaseException) -> None:
    """A multirun that stopped before Hydra's end of it (Ctrl-C, SIGTERM, a job that exited,
    a setting refused at its start): the table of the jobs that finished, and the MLflow
    parent run closed, KILLED when interrupted, FAILED otherwise."""
    from harness.sweep.progress import current
    from harness.terminal import end_job_log

    sweep = current()
    if sweep is None or not sweep.running:
        return
    # The job that ended the process: what follows, the table of the jobs that finished, is
    # the sweep's (sweep.log), not that job's cli.log.
    end_job_log()
    interrupted = isinstance(err, KeyboardInterrupt) or (
        isinstance(err, SystemExit) and err.code not in (None, 0, 1, 2))
    sweep.end_early(interrupted)
    from harness.tracking.parent_run import end_parent_run

    # The parent run is found the way the jobs find it: through the sweep directory.
    end_parent_run(sweep.directory, "KILLED" if interrupted else "FAILED")


if __name__ == "__main__":
    main()
