"""One measurement: build the objects, train and/or infer, record what ran and the reports."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from harness.config.knobs import Knobs
from harness.errors import HarnessError, first_line
from harness.result.schema import Device
from harness.run.record import RunRecord, classify_failure

REPORTS_DIR = "reports"


def measure_once(cfg: DictConfig, knobs: Knobs, record: RunRecord, logger: Any) -> None:
    """Fit and/or predict once with fresh objects; figures land in `record.result`."""
    import lightning.pytorch as pl

    from harness.launch.ddp import prepare_ranks
    from harness.run import build, environment
    from harness.run.compile import compile_facts, compile_network

    result = record.result
    pl.seed_everything(knobs.seed, workers=True, verbose=False)
    datamodule = build.build_datamodule(cfg)
    module = build.build_module(cfg)
    presets = build.build_presets(cfg)
    trainer = build.build_trainer(cfg, knobs.lightning_precision, presets, logger)
    device = trainer.strategy.root_device
    prepare_ranks(trainer, result)

    result.precision_used = trainer.precision
    if trainer.precision != knobs.lightning_precision:
        result.precision_note = (
            f"asked for {knobs.lightning_precision}, Lightning used {trainer.precision}"
            f" on {device.type} (e.g. fp16 autocast is not supported on CPU, so 16-mixed runs as"
            " bf16-mixed there)"
        )
    result.device = Device(**environment.device_info(device), world_size=trainer.world_size)
    result.versions = environment.versions()
    result.host = environment.host()
    result.model = cfg.model._target_
    result.data = cfg.data._target_

    compile_before = environment.compile_seconds()
    if knobs.compile:
        compile_network(module, knobs.compile_module, knobs.compile)
    environment.reset_peak_memory(device)
    try:
        if knobs.trains:
            trainer.fit(module, datamodule=datamodule)
        if knobs.infers:
            _predict(trainer, module, datamodule, fitted=knobs.trains)
    finally:
        result.metrics.update(environment.peak_memory(device))
        if knobs.compile:
            result.metrics.update(compile_facts(compile_before))
        if trainer.is_global_zero:
            _write_reports(presets.by_name, record)
        # Compiled graphs, caches and peak counters are reset before each measurement
        # (harness.run.isolation.start_clean), not here.


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
        raise HarnessError(
            f"inference failed ({first_line(err)[:200]})."
            " Fix: give the LightningModule a predict_step(batch, batch_idx), or set mode=train"
        ) from err


def _write_reports(presets: dict[str, Any], record: RunRecord) -> None:
    from harness.launch.slurm import SLURM_REPORT, slurm_report
    from harness.profilers.reporting import Reporter
    from harness.reports.files import write_json
    from harness.terminal import show

    reports_dir = record.output_dir / REPORTS_DIR
    result = record.result
    for name, preset in presets.items():
        if not isinstance(preset, Reporter):
            continue
        try:
            result.metrics.update(preset.write_reports(reports_dir))
            for table in preset.console_tables():
                show(table)
        except Exception as err:  # one broken report must not lose the others
            result.report_errors[name] = first_line(err)
    if result.slurm:
        write_json(reports_dir / SLURM_REPORT, slurm_report(result.slurm))
    if reports_dir.is_dir():
        record.add_reports(sorted(p for p in reports_dir.rglob("*") if p.is_file()))
    show(f"[bold]result:[/bold] {record.path}")
