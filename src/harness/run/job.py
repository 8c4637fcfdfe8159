"""One job of `harness`, top to bottom: check the config, measure the run (harness.run.measure,
loaded once the config is known good), write result.json, log it to the tracker."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from harness.config.arguments import check_arguments
from harness.config.composed import check_added_keys, check_resolves
from harness.config.knobs import Knobs, check_trainer_keys, read_knobs, sweep_round
from harness.config.targets import check_targets
from harness.errors import ConfigError
from harness.launch.job_scope import handle_interruption, job_scope
from harness.launch.nsys import relaunch_under_nsys
from harness.launch.ranks import global_rank
from harness.launch.slurm import slurm_metadata
from harness.result.schema import RunResult
from harness.run.record import RunRecord
from harness.terminal import show
from harness.tracking.run_logging import log_finished_run
from harness.tracking.tracker import start_tracker

log = logging.getLogger(__name__)


def run_job(cfg: DictConfig, output_dir: Path, overrides: list[str]) -> RunResult:
    """Run the job described by `cfg`, writing into `output_dir`.

    result.json is written however the job ends; the exception, if any, is re-raised for
    the CLI to report.
    """
    record = RunRecord(output_dir, overrides=overrides)
    try:
        check_resolves(cfg)  # before anything reads a value, the nsys re-launch's included
    except ConfigError as err:
        record.fail(err)
        _write(record)
        raise
    # profiler=nsys: Nsight Systems has to start the process it profiles, so this job runs
    # again as its child, which measures; here its result.json is read back.
    relaunched = relaunch_under_nsys(cfg, output_dir, overrides)
    if relaunched is not None:
        return relaunched
    record.result.slurm = slurm_metadata()
    if global_rank() == 0:
        start_tracker(cfg)  # logger=mlflow: MLflow loads in its own process, beside the checks
    logger: Any = None
    with job_scope() as signals:
        try:
            knobs = check_config(cfg, overrides, record.result)
            # torch and Lightning load here, after the config checks: a typo is said at once.
            from harness.run import build, measure

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
            if global_rank() == 0:
                _write(record)
                if logger:
                    log_finished_run(cfg, record.result, record.output_dir, logger)
    return record.result


def check_config(cfg: DictConfig, overrides: list[str], result: RunResult | None = None) -> Knobs:
    """Everything checked before compute is spent, each error a one-line ConfigError naming
    the key: the knobs (recorded in `result` as soon as they are valid), `+key` typos, trainer
    keys harness owns, the targets (importable, Lightning's kinds) and their arguments.
    (Interpolations are checked before this, by check_resolves.)"""
    knobs = read_knobs(cfg)
    if result is not None:
        result.knobs = knobs.as_dict()
        result.sweep_round = sweep_round(cfg)
    check_added_keys(overrides, cfg.keys())
    check_trainer_keys(cfg)
    targets = check_targets(cfg)  # each imports; the model is a LightningModule class
    check_arguments(targets)  # each argument fits its constructor's type hints
    return knobs


def _write(record: RunRecord) -> None:
    """result.json (an OutputError when the disk refuses it); its path is shown once the
    run measured something."""
    path = record.write()
    if record.result.device is not None:
        show(f"[bold]result:[/bold] {path}")
