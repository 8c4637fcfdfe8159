"""One job: validate the config, build the objects, train and/or infer, write the results."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from harness.config.knobs import Knobs, read_knobs
from harness.config.targets import check_targets
from harness.errors import HarnessError
from harness.launch import scale_out
from harness.launch.ranks import global_rank
from harness.profilers.nsys_launch import relaunch_under_nsys
from harness.run.result import RESULT_FILE, RunRecord, classify_failure
from harness.sweep.repeat import read_repeat, run_repeated

REPORTS_DIR = "reports"


def run_job(cfg: DictConfig) -> RunRecord:
    """Run the job described by `cfg` in Hydra's output directory.

    result.json is written however the job ends; the exception, if any, is
    re-raised for the CLI to report.
    """
    hydra_cfg = HydraConfig.get()
    relaunched = relaunch_under_nsys(cfg, hydra_cfg)  # profiler=nsys: the job runs inside nsys
    if relaunched is not None:
        return relaunched
    record = RunRecord(Path(hydra_cfg.runtime.output_dir), overrides=list(hydra_cfg.overrides.task))
    scale_out.record_cluster(record)
    logger: Any = None
    with scale_out.job_scope() as signals:
        try:
            knobs = read_knobs(cfg)
            record.knobs = knobs.as_dict()
            read_repeat(cfg)  # checked before check_targets imports the user's code
            check_targets(cfg)
            logger = _build_logger(cfg)  # one tracking run per job, shared by its repeats
            # Clean state before each measurement (jobs of a sweep share a process); repeat=N.
            run_repeated(cfg, knobs, record, functools.partial(_train_and_measure, logger=logger))
            record.status = "ok"
        except BaseException as err:
            record.fail(err)
            if not scale_out.handle_interruption(record, signals.reason):
                raise
        finally:
            if global_rank() == 0:
                record.write()
                from harness.tracking.run_logging import log_finished_run

                log_finished_run(cfg, record, logger)  # no-op unless logger=mlflow built a run
    return record


def _compile_seconds() -> float:
    """Seconds TorchDynamo and TorchInductor have spent compiling in this process so far."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:  # private API: absent in some torch releases
        return 0.0
    return float(sum(compilation_time_metrics.get("_compile.compile_inner", [])))


def _route_lightning_logs() -> None:
    """Send Lightning's messages through Hydra's logging only, so each prints once."""
    import logging

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True


def _build_logger(cfg: DictConfig) -> Any:
    from harness.run import build

    _route_lightning_logs()
    return build.build_logger(cfg)


def _train_and_measure(cfg: DictConfig, knobs: Knobs, record: RunRecord, logger: Any) -> None:
    import lightning.pytorch as pl

    from harness.run import build, environment
    from harness.run.compile import compile_network

    pl.seed_everything(knobs.seed, workers=True, verbose=False)
    datamodule = build.build_datamodule(cfg)
    module = build.build_module(cfg)
    presets = build.build_presets(cfg)
    trainer = build.build_trainer(cfg, knobs.lightning_precision, presets, logger)
    device = trainer.strategy.root_device
    scale_out.prepare_ranks(trainer, record)

    record.details["precision_used"] = trainer.precision
    if trainer.precision != knobs.lightning_precision:
        record.details["precision_note"] = (
            f"asked for {knobs.lightning_precision}, Lightning used {trainer.precision}"
            f" on {device.type} (e.g. fp16 autocast is not supported on CPU, so 16-mixed runs as"
            " bf16-mixed there)"
        )
    record.details["device"] = {**environment.device_info(device), "world_size": trainer.world_size}
    record.details["versions"] = environment.versions()
    record.details["host"] = environment.host()
    record.details["model"] = cfg.model._target_
    record.details["data"] = cfg.data._target_

    compile_before = _compile_seconds()
    if knobs.compile:
        compile_network(module, knobs.compile_module, knobs.compile)
    environment.reset_peak_memory(device)
    try:
        if knobs.trains:
            trainer.fit(module, datamodule=datamodule)
        if knobs.infers:
            _predict(trainer, module, datamodule, fitted=knobs.trains)
    finally:
        record.metrics.update(environment.peak_memory(device))
        if knobs.compile:
            record.metrics["compile_time_s"] = _compile_seconds() - compile_before
        if trainer.is_global_zero:
            _write_reports(presets.by_name, record)
        # Compiled graphs, caches and peak counters are reset before each measurement
        # (harness.sweep.isolation.start_clean), not here.


def _predict(trainer: Any, module: Any, datamodule: Any, fitted: bool) -> None:
    """The inference measurement: Lightning's predict loop (eval mode, torch.inference_mode)."""
    import lightning.pytorch as pl
    from lightning.pytorch.utilities.model_helpers import is_overridden

    try:
        if is_overridden("predict_dataloader", datamodule, pl.LightningDataModule):
            trainer.predict(module, datamodule=datamodule, return_predictions=False)
            return
        # No predict split: measure inference on the validation data instead.
        if not fitted:
            datamodule.prepare_data()
            datamodule.setup("validate")
        trainer.predict(module, dataloaders=datamodule.val_dataloader(), return_predictions=False)
    except (HarnessError, KeyboardInterrupt, SystemExit):
        raise
    except Exception as err:
        if is_overridden("predict_step", module, pl.LightningModule) or (
            classify_failure(err)[0] == "oom"
        ):
            raise  # the user's own predict_step failed, or memory ran out: not a missing step
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise HarnessError(
            f"inference failed ({type(err).__name__}: {first[:200]})."
            " Fix: give the LightningModule a predict_step(batch, batch_idx), or set mode=train"
        ) from err


def _write_reports(presets: dict[str, Any], record: RunRecord) -> None:
    from rich.console import Console

    from harness.profilers.reporting import Reporter

    reports_dir = record.output_dir / REPORTS_DIR
    console = Console()
    for name, preset in presets.items():
        if not isinstance(preset, Reporter):
            continue
        try:
            record.metrics.update(preset.write_reports(reports_dir))
            for table in preset.console_tables():
                console.print(table)
        except Exception as err:  # one broken report must not lose the others
            record.details.setdefault("report_errors", {})[name] = f"{type(err).__name__}: {err}"
    scale_out.write_cluster_report(reports_dir, record)
    if reports_dir.is_dir():
        record.add_reports(sorted(p for p in reports_dir.rglob("*") if p.is_file()))
    console.print(f"[bold]result:[/bold] {record.output_dir / RESULT_FILE}")

