"""One job of `harness`, top to bottom: check the config, measure the run (harness.run.measure,
loaded once the config is known good), write result.json, log it to the tracker."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from harness.config.composed import CheckedJob, check_job
from harness.config.global_batch import world_size
from harness.config.knobs import AUTO, sweep_round
from harness.errors import ConfigError
from harness.launch import rank_processes
from harness.launch.code_dir import run_in_code_dir, startup_s
from harness.launch.job_scope import end_process_group, handle_interruption, job_scope
from harness.launch.nsys import relaunch_under_nsys
from harness.launch.ranks import global_rank
from harness.launch.slurm import slurm_metadata
from harness.result.schema import RunResult
from harness.run import torch_settings
from harness.run.record import RunRecord
from harness.terminal import show
from harness.tracking.run_logging import log_finished_run
from harness.tracking.tracker import start_tracker

log = logging.getLogger(__name__)


def run_job(cfg: DictConfig, output_dir: Path, overrides: list[str]) -> RunResult:
    """Check, then run the job into `output_dir`; result.json is written however it ends
    (errors re-raised)."""
    record = RunRecord(output_dir, overrides=overrides)
    logger: Any = None
    started_with: dict[str, Any] | None = None
    relaunched: RunResult | None = None
    with job_scope() as signals:
        try:
            # every check before compute, and before a re-launch: each a one-line ConfigError
            job = check_config(cfg, overrides, record.result)
            threads = _threads(cfg, job)
            # code_dir: the job runs again in a fresh process that imports that code first;
            # profiler=nsys: Nsight Systems has to start the process it profiles. That process
            # measures; here its result.json is read back.
            relaunched = (run_in_code_dir(cfg, output_dir, overrides, record.result, threads)
                          or relaunch_under_nsys(cfg, output_dir, overrides))
            if relaunched is None:
                record.result.slurm = slurm_metadata()
                if global_rank() == 0:
                    start_tracker(cfg)  # logger=mlflow: MLflow loads in its own process
                from harness.run import build, measure

                startup_s(record.result)
                started_with = torch_settings.capture()  # what the job puts back when it ends
                record.result.threads = torch_settings.set_threads(threads)
                build.route_lightning_logs()  # each Lightning message once, through the job's log
                logger = build.build_logger(cfg)  # one tracking run per job, shared by its repeats
                measure.measure_repeats(cfg, job.knobs, record, logger)
                if record.result.status == "running":
                    record.result.status = "ok"
        except BaseException as err:
            record.fail(err)
            if not handle_interruption(record.result, str(output_dir), signals):
                raise
        finally:
            if relaunched is None:
                _finish(cfg, record, started_with, logger)
    return relaunched or record.result


def _finish(cfg: DictConfig, record: RunRecord, started_with: dict[str, Any] | None, logger: Any) -> None:
    """However the job ended: its ranks ended, the torch settings it changed put back (isolation
    names them), result.json written and the run logged."""
    _end_ranks(record)
    # (num_threads, when sweep.threads set it, is harness's own change, not the job's)
    if started_with is not None and (changed := [
            name for name in torch_settings.restore(started_with)
            if not (name == "num_threads" and record.result.threads)]):
        record.result.isolation = {**(record.result.isolation or {}), "torch_settings_put_back": changed}
        log.debug("put back after the job (it changed them): %s", ", ".join(changed))
    if global_rank() == 0:
        path = record.write()  # an OutputError when the disk refuses it
        if record.result.device is not None:  # measured: its path shown
            show(f"[bold]result:[/bold] {path}")
        if logger:
            log_finished_run(cfg, record.result, record.output_dir, logger)


def _end_ranks(record: RunRecord) -> None:
    """DDP: the job's ranks end with it, and rank 0 takes their endings into its status."""
    rank = global_rank()
    if rank > 0:
        with contextlib.suppress(OSError):  # rank 0 then goes by its exit status instead
            rank_processes.write_rank_ending(record.output_dir, rank, record.result)
    end_process_group()
    if rank == 0:
        failed = record.result.status not in rank_processes.MEASURED
        endings = rank_processes.end_ranks(record.output_dir, job_failed=failed)
        rank_processes.merge_rank_endings(record.result, endings)


def check_config(cfg: DictConfig, overrides: list[str], result: RunResult | None = None) -> CheckedJob:
    """A single job's checks (config.composed.check_job), the knobs into `result` as soon as
    they are valid; `repeat=auto` belongs to a sweep (its sweeper gives each job repeat=1)."""
    job = check_job(cfg, overrides)
    if job.knobs.repeat == AUTO:
        raise ConfigError("repeat", "auto", "a number of runs: auto adds rounds of a sweep until"
                          " its comparisons are decided, and a single run compares nothing",
                          "repeat=3, or a sweep: harness -m precision=fp32,bf16 repeat=auto")
    if result is not None:
        result.knobs = asdict(job.knobs)
        result.sweep_round = sweep_round(cfg)
    return job


def _threads(cfg: DictConfig, job: CheckedJob) -> int | None:
    """This process's share of sweep.threads as its sweeper resolved it (auto stays torch's
    default): a job's CPU ranks on one machine split it, or they would oversubscribe it; in a
    scaling study it is each rank's (every world size's ranks alike, docs/scaling.md)."""
    value = job.sweep.threads
    if not isinstance(value, int):  # auto, null
        return None
    if job.knobs.scaling:
        return value
    trainer = cfg.get("trainer") or {}
    ranks = world_size(trainer) or 1
    return max(1, value // max(ranks // int(trainer.get("num_nodes") or 1), 1))
