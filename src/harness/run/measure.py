"""One measurement: build the objects, train and/or infer, record what ran and the reports."""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig

from harness.config.knobs import Knobs
from harness.errors import HarnessError, first_line
from harness.run.record import RunRecord, classify_failure, write_error_log

log = logging.getLogger(__name__)


def measure_once(cfg: DictConfig, knobs: Knobs, record: RunRecord, logger: Any
                 ) -> dict[str, Any]:
    """Fit and/or predict once with fresh objects; figures land in `record.result`. Returns
    the presets that measured them (repeat=N diagnoses after the last one)."""
    import lightning.pytorch as pl

    from harness.launch.ddp import prepare_ranks
    from harness.run import build, environment
    from harness.run.compile import compile_facts, compile_network
    from harness.run.finish import write_reports
    from harness.run.record import record_trainer
    from harness.run.loss_watch import LossWatch
    from harness.run.observe import BatchObserver, check_what_ran

    result = record.result
    pl.seed_everything(knobs.seed, workers=True, verbose=False)
    datamodule = build.build_datamodule(cfg)
    module = build.build_module(cfg)
    presets = build.build_presets(cfg)
    observer, loss_watch = BatchObserver(), LossWatch()
    trainer = build.build_trainer(cfg, knobs.lightning_precision, presets, logger,
                                  [observer, loss_watch])
    device = trainer.strategy.root_device
    prepare_ranks(trainer, result)
    record_trainer(result, trainer, knobs.lightning_precision)
    result.model = cfg.model._target_
    result.data = None if datamodule is None else cfg.data._target_

    compile_before = environment.compile_seconds()
    if knobs.compile:
        compile_network(module, knobs.compile_module, knobs.compile)
    environment.reset_peak_memory(device)
    compiled = None
    try:
        if knobs.trains:
            trainer.fit(module, datamodule=datamodule)
        if knobs.infers:
            _infer_after(trainer, module, datamodule, knobs, record)
    finally:
        result.metrics.update(environment.peak_memory(device))
        if knobs.compile:
            compiled = compile_facts(compile_before)
            result.metrics.update(compiled)
        check_what_ran(result, knobs, observer, trainer.world_size, compiled)
        if trainer.is_global_zero and result.observed is not None:
            for note in result.observed.notes:  # what ran differs from a knob: said, not hidden
                log.info("what ran: %s", note)
        _flag_nonfinite_loss(result, loss_watch)
        if trainer.is_global_zero:
            write_reports(presets.by_name, record, diagnose=knobs.repeat == 1)
            _fail_partial_without_figures(result)
        # Compiled graphs, caches and peak counters are reset before each measurement
        # (harness.run.isolation.start_clean), not here.
    return presets.by_name


def _flag_nonfinite_loss(result: Any, loss_watch: Any) -> None:
    from harness.run.loss_watch import FLAG

    if loss_watch.saw_nonfinite() and FLAG not in result.flags:
        result.flags = sorted({*result.flags, FLAG})
        log.warning("the training loss was NaN or infinite: the timings stand, but the model"
                    " stopped learning (result.json flags: %s). Fix: lower model.lr, check the"
                    " data, or try precision=fp32", FLAG)


def _fail_partial_without_figures(result: Any) -> None:
    """A `partial` run keeps the phases it measured: if warm-up swallowed every training step
    (the speed preset measured none), nothing was measured and the run failed."""
    if result.status == "partial" and result.metrics.get("train_measured_steps") == 0:
        result.status, result.reason = "failed", (
            "nothing measured: every training step was warm-up (profiler.speed.warmup_steps;"
            " fix: more batches, or fewer warm-up steps), and inference failed: "
            + result.phase_errors.get("inference", result.reason))


def _infer_after(trainer: Any, module: Any, datamodule: Any, knobs: Knobs,
                 record: RunRecord) -> None:
    """Inference; when it fails after training was measured, the run is `partial`: the
    training figures stay and the inference phase says why it has none."""
    try:
        _predict(trainer, module, datamodule, fitted=knobs.trains)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as err:
        status, reason = classify_failure(err)
        if not knobs.trains or status == "oom":
            raise
        result = record.result
        if not isinstance(err, HarnessError):
            result.error_log = write_error_log(record.output_dir, err).name
            reason += f" (traceback in {result.error_log})"
        result.phase_errors["inference"] = reason
        result.status, result.reason = "partial", f"training measured; inference failed: {reason}"


def _predict(trainer: Any, module: Any, datamodule: Any, fitted: bool) -> None:
    """The inference measurement: Lightning's predict loop (eval mode, torch.inference_mode)."""
    loaders = _inference_loaders(module, datamodule, fitted)
    try:
        if loaders is None:
            trainer.predict(module, datamodule=datamodule, return_predictions=False)
        else:
            trainer.predict(module, dataloaders=loaders, return_predictions=False)
    except Exception as err:
        import lightning.pytorch as pl
        from lightning.pytorch.utilities.model_helpers import is_overridden

        if is_overridden("predict_step", module, pl.LightningModule) or (
            classify_failure(err)[0] == "oom"
        ):
            raise  # the user's own predict_step failed, or memory ran out: not a missing step
        name = type(module).__name__
        raise HarnessError(
            f"{name} has no predict_step, so Lightning's default passed the whole batch to"
            f" forward(), which failed ({first_line(err)[:200]}). Fix: give {name} a"
            " predict_step(batch, batch_idx), or set mode=train"
        ) from err


def _inference_loaders(module: Any, datamodule: Any, fitted: bool) -> Any:
    """None: Lightning's own predict_dataloader (of the DataModule, or with data=none of the
    module) is used; else the validation loaders, for data without a predict split."""
    import lightning.pytorch as pl
    from lightning.pytorch.utilities.model_helpers import is_overridden

    source = module if datamodule is None else datamodule
    base = pl.LightningModule if datamodule is None else pl.LightningDataModule
    if is_overridden("predict_dataloader", source, base):
        return None
    if is_overridden("val_dataloader", source, base):
        # No predict split: measure inference on the validation data instead.
        if not fitted:
            source.prepare_data()
            source.setup("validate")
        return source.val_dataloader()
    whose = type(source).__name__ + (" (data=none: the module's own)" if datamodule is None else "")
    raise HarnessError(
        f"inference has no data: {whose} has neither a predict_dataloader nor a"
        " val_dataloader. Fix: give it one, or set mode=train")
