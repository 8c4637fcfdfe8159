"""`code_dir=DIR` (docs/sweeps.md, "Two code trees in one sweep"): the job runs again in a fresh
process, DIR first on its import path; its result.json is read back. Imports neither torch nor
Lightning."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from harness.config.knobs import CODE_DIR_CHILD, code_dir_of
from harness.launch.hydra_args import rerun_command, run_again, same_config_arguments
from harness.launch.outside_tool import git_commit
from harness.result.schema import RunResult

log = logging.getLogger(__name__)
SWEEP_ENV = "HARNESS_SWEEP_DIR"  # the child of a sweep's job: its sweep, for the MLflow parent run
CHILD_LOG = "code_dir.log"  # the child's terminal output, in the run directory


def sweep_dir() -> Path | None:
    """The directory of the sweep this job is part of (SWEEP_ENV in a sweep job's fresh process);
    None in a single run."""
    if os.environ.get(SWEEP_ENV):
        return Path(os.environ[SWEEP_ENV])
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    return Path(str(HydraConfig.get().sweep.dir))


def run_in_code_dir(cfg: Any, run_dir: Path, overrides: list[str], result: RunResult,
                    threads: int | None) -> RunResult | None:
    """The fresh process's RunResult once the job ran there; None to run it here: no code_dir,
    or this is that process (then `code_dir` goes first on sys.path and into `result`)."""
    directory = code_dir_of(cfg)
    if directory is None:
        return None
    if os.environ.get(CODE_DIR_CHILD) == "1":  # the checks put it first on sys.path (config.composed)
        commit, dirty = git_commit(directory)
        result.code_dir = str(directory)
        result.code_commit = commit and commit + ("+dirty" if dirty else "")
        return None
    # PYTHONPATH: the DDP ranks the child starts import it too
    env = {**os.environ, CODE_DIR_CHILD: "1",
           "PYTHONPATH": os.pathsep.join([str(directory), *filter(None, [os.environ.get("PYTHONPATH")])])}
    if (sweep := sweep_dir()) is not None:
        env[SWEEP_ENV] = str(sweep)
    if threads is not None:  # OpenMP sizes its pool when the process starts
        env["OMP_NUM_THREADS"] = str(threads)
    command = rerun_command(overrides, run_dir, config_args=same_config_arguments())
    log.info("code_dir=%s: running this job in a fresh process:\n  %s", directory, " ".join(command))
    run_dir.mkdir(parents=True, exist_ok=True)
    # A sweep's job says its outcome in one line; the child's own output goes to a file.
    log_file = run_dir / CHILD_LOG if sweep is not None else None
    return run_again(command, env, run_dir, "code_dir: the job's fresh process", log_file,
                     f" in {log_file}" if log_file else "")[0]


def startup_s(result: RunResult) -> None:
    """In the fresh process, once torch and Lightning are in: the seconds since it started,
    what a job run in the sweep's own process would not pay again."""
    if result.code_dir is not None:  # set in that process alone
        import psutil

        result.fresh_process_s = time.time() - psutil.Process().create_time()
