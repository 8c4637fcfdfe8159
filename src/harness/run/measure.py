"""The measurement of a job, loaded once its config is known good: `repeat` times from a clean
state, build, fit and/or predict, record what ran and the presets' reports; pool the repeats."""

from __future__ import annotations

import contextlib
import logging
import platform
import socket
from importlib import metadata
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import psutil
import torch
from lightning.pytorch.utilities.model_helpers import is_overridden
from omegaconf import DictConfig

from harness import memory_peaks, private_api
from harness.config.knobs import Knobs
from harness.errors import ConfigError, HarnessError, first_line
from harness.launch.ddp import distributed_facts, prepare_ranks
from harness.launch.ranks import global_rank
from harness.measured import pool
from harness.profilers.preset import Presets
from harness.result.schema import Device, Repeats, RunResult
from harness.run import build, torch_settings
from harness.run.checkpointing import checkpoint_blocks, said
from harness.run.compile import compile_facts, compile_network
from harness.run.finish import diagnose_run, write_reports
from harness.run.isolation import start_clean
from harness.run.loss_watch import NONFINITE_LOSS, LossWatch
from harness.run.observe import check_what_ran, observed_of
from harness.run.record import RunRecord, classify_failure, write_error_log

log = logging.getLogger(__name__)


def measure_repeats(cfg: DictConfig, knobs: Knobs, record: RunRecord, logger: Any) -> None:
    """`repeat` measurements, each from a clean state; several are pooled, then diagnosed."""
    runs: list[dict[str, Any]] = []
    presets: dict[str, Any] = {}
    try:
        for index in range(knobs.repeat):
            if knobs.repeat > 1:
                log.info("repeat %d/%d", index + 1, knobs.repeat)
            record.result.metrics = {}
            record.result.isolation = start_clean()
            try:
                presets = measure_once(cfg, knobs, record, logger)
            finally:
                runs.append(dict(record.result.metrics))
    finally:
        if knobs.repeat > 1:
            _pool_repeats(record.result, knobs.repeat, runs)
    if knobs.repeat > 1 and global_rank() == 0:
        diagnose_run(presets, record)


def measure_once(cfg: DictConfig, knobs: Knobs, record: RunRecord, logger: Any) -> dict[str, Any]:
    """Fit and/or predict once with fresh objects, into `record.result`; returns the presets."""
    result = record.result
    pl.seed_everything(knobs.seed, workers=True, verbose=False)
    datamodule = build.build_datamodule(cfg)
    module = build.build_module(cfg)
    check_accumulates(module, knobs)
    presets = build.build_presets(cfg)
    loss_watch = LossWatch()
    trainer = build.build_trainer(cfg, knobs.lightning_precision, presets, logger,
                                  [presets.observer, loss_watch], knobs.accumulation, knobs.scaling)
    device = trainer.strategy.root_device
    prepare_ranks(trainer, result)
    result.model = cfg.model._target_
    result.data = None if datamodule is None else cfg.data._target_

    # before compile, which then traces the wrapped blocks
    checkpointed = checkpoint_blocks(module, knobs.activation_checkpointing)
    compiling_before = private_api.compile_seconds()
    compiled_whole = compile_network(module, knobs.compile_module, knobs.compile) if knobs.compile else None
    if compiled_whole:
        log.info("%s", compiled_whole)
    # Nothing before the fit may initialise CUDA (Lightning refuses to fork a process that
    # did); until CUDA is initialised its allocator has no peaks to reset.
    memory_peaks.reset(device if device.type != "cuda" or torch.cuda.is_initialized() else None)
    try:
        if knobs.trains:
            trainer.fit(module, datamodule=datamodule)
        if knobs.infers:
            _infer_after(trainer, module, datamodule, knobs, record)
    finally:
        compiled = compile_facts(compiling_before) if knobs.compile else None
        try:
            record_what_ran(result, trainer, knobs.lightning_precision, presets, compiled)
        except Exception as err:  # a broken device: the fit's own error says more
            log.warning("the device's facts could not be read: %s", first_line(err))
        if compiled:
            result.metrics["compile_time_s"] = compiled.pop("compile_time_s")
        check_what_ran(result, knobs, trainer.world_size)
        if (observed := result.observed) is not None:  # None: the device's facts were unreadable
            for note in observed.notes if trainer.is_global_zero else ():  # what ran differs from a knob
                log.info("what ran: %s", note)
            if knobs.activation_checkpointing is not False:  # said before the fit already
                observed.checkpointed = None if checkpointed is None else checkpointed.classes()
                observed.notes.append(said(checkpointed, type(module).__name__))
            if compiled_whole:  # said before the fit already
                observed.notes.append(compiled_whole)
        _flag_nonfinite_loss(result, loss_watch)
        if trainer.is_global_zero:
            write_reports(presets.by_name, record, diagnose=knobs.repeat == 1)
            _fail_partial_without_figures(result)
    return presets.by_name


def check_accumulates(module: pl.LightningModule, knobs: Knobs) -> None:
    """global_batch_size sets Lightning's accumulation, which a module that steps its optimizers
    itself never runs: one line before the fit (Lightning would refuse the trainer anyway)."""
    if knobs.global_batch_size is not None and not module.automatic_optimization:
        raise ConfigError("global_batch_size", knobs.global_batch_size,
                          f"a module with automatic optimization: {type(module).__name__} sets"
                          " automatic_optimization = False and steps its optimizers itself, so"
                          " global_batch_size cannot set its accumulation",
                          "drop global_batch_size and accumulate in its training_step (step every N"
                          " batches), with batch_size the examples of one batch")


def record_what_ran(result: RunResult, trainer: Any, asked_precision: str, presets: Presets,
                    compiled: dict[str, Any] | None = None) -> None:
    """After the fit, into `result`: what ran (`observed`), torch settings, memory peaks, then the
    precision used (why not the one asked), device, versions, host (may fail: CUDA starts)."""
    device = trainer.strategy.root_device
    result.observed = observed_of(presets.shared.batches, compiled,
                                  trainer.accumulate_grad_batches, trainer.world_size)
    result.torch_settings = torch_settings.read()
    result.metrics.update(memory_peaks.read(device))
    result.precision_used = trainer.precision
    if trainer.precision != asked_precision:
        result.precision_note = (f"asked for {asked_precision}, Lightning used {trainer.precision}"
                                 f" on {device.type} (e.g. fp16 autocast is not supported on CPU, so"
                                 " 16-mixed runs as bf16-mixed there)")
    result.device = Device(**_device_facts(device), world_size=trainer.world_size)
    result.distributed = distributed_facts(trainer)
    result.versions = _versions()
    result.host = socket.gethostname()


def _device_facts(device: Any) -> dict[str, Any]:
    if device.type == "cuda":
        return {"accelerator": "cuda", "device_name": torch.cuda.get_device_name(device),
                "device_count": torch.cuda.device_count(),
                "memory_bytes": torch.cuda.get_device_properties(device).total_memory}
    return {"accelerator": device.type, "device_name": _cpu_name(), "device_count": 1,
            "memory_bytes": psutil.virtual_memory().total}


def _cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _versions() -> dict[str, str | None]:
    def version(package: str) -> str | None:
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(package)
        return None

    return {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "lightning": version("lightning"), "hydra-core": version("hydra-core"),
            "harness": version("lightning-harness")}


def _pool_repeats(result: RunResult, requested: int, runs: list[dict[str, Any]]) -> None:
    """repeat=N: `metrics` summarise the runs; each run's figures and their range: `repeats`."""
    result.metrics, low, high, _ = pool(runs)
    result.repeats = Repeats(
        requested=requested, completed=len(runs), min=low, max=high, per_repeat=runs,
        what="metrics: medians over the runs, each phase's examples_per_second = its examples per iteration"
        " / its median seconds_per_iteration; min and max: their range; diagnosis: from those medians"
        " and the last run's passes; reports/: the last run's")


def _flag_nonfinite_loss(result: Any, loss_watch: LossWatch) -> None:
    if loss_watch.saw_nonfinite() and NONFINITE_LOSS not in result.flags:
        result.flags = sorted({*result.flags, NONFINITE_LOSS})
        log.warning("the training loss was NaN or infinite: the timings stand, but the model"
                    " stopped learning (result.json flags: %s). Fix: lower model.lr, check the"
                    " data, or try precision=fp32", NONFINITE_LOSS)


def _fail_partial_without_figures(result: Any) -> None:
    """A `partial` run whose warm-up swallowed every training step measured nothing: failed."""
    if result.status == "partial" and result.metrics.get("train_measured_steps") == 0:
        result.status, result.reason = "failed", (
            "nothing measured: every training step was warm-up (profiler.speed.warmup_steps;"
            " fix: more batches, or fewer warm-up steps), and inference failed: "
            + result.phase_errors.get("inference", result.reason))


def _infer_after(trainer: pl.Trainer, module: pl.LightningModule, datamodule: Any,
                 knobs: Knobs, record: RunRecord) -> None:
    """Inference; when it fails after training was measured, the run is `partial`."""
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


def _predict(trainer: pl.Trainer, module: pl.LightningModule, datamodule: Any, fitted: bool) -> None:
    """The inference measurement: Lightning's predict loop (eval mode, torch.inference_mode)."""
    loaders = _inference_loaders(module, datamodule, fitted)
    data = {"datamodule": datamodule} if loaders is None else {"dataloaders": loaders}
    try:
        trainer.predict(module, **data, return_predictions=False)
    except Exception as err:
        if is_overridden("predict_step", module, pl.LightningModule) or classify_failure(err)[0] == "oom":
            raise  # the user's own predict_step failed, or memory ran out: not a missing step
        name = type(module).__name__
        raise HarnessError(f"{name} has no predict_step, so Lightning's default passed the whole batch to"
                           f" forward(), which failed ({first_line(err)[:200]}). Fix: give {name} a"
                           " predict_step(batch, batch_idx), or set mode=train") from err


def _inference_loaders(module: pl.LightningModule, datamodule: Any, fitted: bool) -> Any:
    """None: Lightning's own predict_dataloader is used; else the validation loaders."""
    source = module if datamodule is None else datamodule
    base = pl.LightningModule if datamodule is None else pl.LightningDataModule
    if is_overridden("predict_dataloader", source, base):
        return None
    if is_overridden("val_dataloader", source, base):
        if not fitted:  # fit has not set the data up
            source.prepare_data()
            source.setup("validate")
        return source.val_dataloader()
    whose = type(source).__name__ + (" (data=none: the module's own)" if datamodule is None else "")
    raise HarnessError(f"inference has no data: {whose} has neither a predict_dataloader nor a"
                       " val_dataloader. Fix: give it one, or set mode=train")
