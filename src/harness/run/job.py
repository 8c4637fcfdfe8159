"""One job of `harness`, top to bottom: check the config, measure the run (harness.run.measure,
loaded once the config is known good), write result.json, log it to the tracker."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness.config.composed import check_job, check_resolves
from harness.config.global_batch import world_size
from harness.config.knobs import Knobs, read_knobs, sweep_round
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
from harness.sweep.rounds import SweepSettings
from harness.terminal import show
from harness.tracking.run_logging import log_finished_run
from harness.tracking.tracker import start_tracker

log = logging.getLogger(__name__)


def run_job(cfg: DictConfig, output_dir: Path, overrides: list[str]) -> RunResult:
    """Run the job into `output_dir`; result.json is written however it ends (errors re-raised)."""
    record = RunRecord(output_dir, overrides=overrides)
    try:
        check_resolves(cfg)  # before anything reads a value, the nsys re-launch's included
    except ConfigError as err:
        record.fail(err)
        _write(record)
        raise
    try:  # code_dir: the job runs again in a fresh process that imports that code first
        relaunched = run_in_code_dir(cfg, output_dir, overrides, record.result, sweep_dir(),
                                     _threads(cfg))
    except ConfigError as err:
        record.fail(err)
        _write(record)
        raise
    if relaunched is not None:
        return relaunched
    # profiler=nsys: Nsight Systems has to start the process it profiles, so this job runs
    # again as its child, which measures; here its result.json is read back.
    relaunched = relaunch_under_nsys(cfg, output_dir, overrides)
    if relaunched is not None:
        return relaunched
    record.result.slurm = slurm_metadata()
    if global_rank() == 0:
        start_tracker(cfg)  # logger=mlflow: MLflow loads in its own process, beside the checks
    logger: Any = None
    started_with: dict[str, Any] | None = None
    with job_scope() as signals:
        try:
            knobs = check_config(cfg, overrides, record.result)
            # torch and Lightning load here, after the config checks: a typo is said at once.
            from harness.run import build, measure

            startup_s(record.result)

            started_with = torch_settings.capture()  # what the job puts back when it ends
            record.result.threads = torch_settings.set_threads(_threads(cfg))
            build.route_lightning_logs()  # each Lightning message once, through the job's log
            logger = build.build_logger(cfg)  # one tracking run per job, shared by its repeats
            measure.measure_repeats(cfg, knobs, record, logger)
            if record.result.status == "running":
                record.result.status = "ok"
        except BaseException as err:
            record.fail(err)
            if not handle_interruption(record.result, str(output_dir), signals):
                raise
        finally:
            _end_ranks(record)
            # The process-wide torch settings the job changed go back (isolation names them).
            # (num_threads, when sweep.threads set it, is harness's own change, not the job's)
            if started_with is not None and (changed := [
                    name for name in torch_settings.restore(started_with)
                    if not (name == "num_threads" and record.result.threads)]):
                record.result.isolation = {**(record.result.isolation or {}),
                                           "torch_settings_put_back": changed}
                log.debug("put back after the job (it changed them): %s", ", ".join(changed))
            if global_rank() == 0:
                _write(record)
                if logger:
                    log_finished_run(cfg, record.result, record.output_dir, logger)
    return record.result


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


def check_config(cfg: DictConfig, overrides: list[str], result: RunResult | None = None) -> Knobs:
    """The knobs (into `result` as soon as they are valid), `check_job`, then the profiler list
    (Lightning takes one Profiler): every check before compute, each a one-line ConfigError."""
    knobs = read_knobs(cfg)
    if str(cfg.get("repeat")).lower() == "auto":  # a sweep's jobs get repeat=1 from its sweeper
        raise ConfigError("repeat", "auto", "a number of runs: auto adds rounds of a sweep until"
                          " its comparisons are decided, and a single run compares nothing",
                          "repeat=3, or a sweep: harness -m precision=fp32,bf16 repeat=auto")
    if result is not None:
        result.knobs = knobs.as_dict()
        result.sweep_round = sweep_round(cfg)
    SweepSettings.read(cfg)
    targets = check_job(cfg, overrides)
    # Here, not at the top: the targets checked imported Lightning already; --help does not.
    from harness.profilers.preset import check_one_profiler

    check_one_profiler(targets)
    return knobs


def _threads(cfg: DictConfig) -> int | None:
    """This process's share of sweep.threads as its sweeper resolved it (auto stays torch's
    default): a job's CPU ranks on one machine split it, or they would oversubscribe it."""
    value = OmegaConf.select(cfg, "sweep.threads", default=None)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return None
    trainer = cfg.get("trainer") or {}
    ranks = world_size(trainer) or 1
    return max(1, value // max(ranks // int(trainer.get("num_nodes") or 1), 1))


def sweep_dir() -> Path | None:
    """The directory of the sweep this job is part of; None in a single run."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    return Path(str(HydraConfig.get().sweep.dir))


def _write(record: RunRecord) -> None:
    """result.json (an OutputError when the disk refuses it), its path shown once measured."""
    path = record.write()
    if record.result.device is not None:
        show(f"[bold]result:[/bold] {path}")
