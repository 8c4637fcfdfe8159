"""The `speed` preset: end-to-end throughput of training, validation and inference.

Clocks: `time.perf_counter` on the host, read after `torch.cuda.synchronize()`
when the run is on a CUDA device, so a step's time includes the kernels it
queued and not only their launch. Warm-up steps (compilation, allocator and
cache warm-up) are recorded but left out of every figure.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from harness.errors import ConfigError
from harness.profilers.step_timer import PhaseTimer, StepRecord
from harness.reports.files import write_csv, write_report

PHASES = ("train", "validation", "inference")
RATE_METRIC = {"train": "training_rate", "validation": "validation_rate", "inference": "inference_rate"}


def count_examples(batch: Any) -> int | None:
    """Examples in a batch: the leading dimension of its first tensor, if it has one."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, Mapping):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            found = count_examples(item)
            if found is not None:
                return found
    return None


class SpeedMonitor(Callback):
    """Times every step of every phase and writes reports/speed.{json,csv}."""

    def __init__(self, warmup_steps: int = 5, log_rates: bool = True, batch_size: int = 1) -> None:
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ConfigError(
                "profiler.speed.warmup_steps", warmup_steps, "an integer >= 0",
                "profiler.speed.warmup_steps=5",
            )
        self.warmup_steps = warmup_steps
        self.log_rates = log_rates
        self.batch_size = batch_size
        self.timers = {phase: PhaseTimer(phase, warmup_steps) for phase in PHASES}
        self.world_size = 1
        self.device: torch.device | None = None
        self.inference_mode: bool | None = None

    # -- clock -----------------------------------------------------------------
    def _now(self) -> float:
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    @property
    def clock(self) -> str:
        if self.device is not None and self.device.type == "cuda":
            return "time.perf_counter after torch.cuda.synchronize"
        return "time.perf_counter"

    # -- Lightning hooks ---------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.world_size = trainer.world_size
        self.device = trainer.strategy.root_device

    def _received(self, phase: str, batch: Any) -> None:
        examples = count_examples(batch)
        self.timers[phase].batch_received(self._now(), examples or self.batch_size)

    def _done(self, phase: str, trainer: pl.Trainer) -> None:
        record = self.timers[phase].step_done(self._now())
        if record is not None and self.log_rates and record.step_s > 0:
            self._log_rate(trainer, phase, record)

    def _log_rate(self, trainer: pl.Trainer, phase: str, record: StepRecord) -> None:
        metric = {RATE_METRIC[phase]: 1.0 / record.step_s}
        step = trainer.global_step if phase == "train" else record.index
        for logger in trainer.loggers:
            logger.log_metrics(metric, step=step)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.timers["train"].restart(self._now())

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._received("train", batch)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:
        self._done("train", trainer)

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.timers["validation"].restart(self._now())

    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not trainer.sanity_checking:
            self._received("validation", batch)

    def on_validation_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int, dataloader_idx: int = 0,
    ) -> None:
        if not trainer.sanity_checking:
            self._done("validation", trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Training resumes after validation: its next iteration starts now, so
        # validation time is never charged to a training step.
        self.timers["train"].restart(self._now())

    def on_predict_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.inference_mode = torch.is_inference_mode_enabled()
        self.timers["inference"].restart(self._now())

    def on_predict_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._received("inference", batch)

    def on_predict_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int, dataloader_idx: int = 0,
    ) -> None:
        self._done("inference", trainer)

    # -- reports -------------------------------------------------------------------
    def phase_summaries(self) -> dict[str, dict[str, Any]]:
        """Figures per phase that ran at least one step."""
        return {
            phase: timer.summary(self.world_size)
            for phase, timer in self.timers.items()
            if timer.steps
        }

    def write_reports(self, reports_dir: Path) -> dict[str, Any]:
        phases = self.phase_summaries()
        payload = {
            "report": "speed",
            "what": "end-to-end iteration time (batch wait included) and throughput per phase",
            "clock": self.clock,
            "warmup_steps_excluded": self.warmup_steps,
            "world_size": self.world_size,
            "examples_counted": "examples in each batch on one rank x world_size",
            "inference_mode": self.inference_mode,
            "expected_overhead": "one clock read (and one device synchronise on CUDA) per step",
            "phases": phases,
        }
        rows = [{"phase": phase, **figures} for phase, figures in phases.items()]
        write_report(reports_dir, "speed", payload, rows)
        write_csv(reports_dir / "speed_steps.csv", self.step_rows())
        headline: dict[str, Any] = {}
        for phase, figures in phases.items():
            for key in ("seconds_per_iteration", "examples_per_second", "median_step_s",
                        "p90_step_s", "dataloader_wait_share", "first_step_s", "measured_steps"):
                headline[f"{phase}_{key}"] = figures[key]
        return headline

    def step_rows(self) -> list[dict[str, Any]]:
        """One row per step of every phase: the rates over time."""
        rows = []
        for phase, timer in self.timers.items():
            for s in timer.steps:
                rows.append({
                    "phase": phase,
                    "step": s.index,
                    "step_s": s.step_s,
                    "wait_s": s.wait_s,
                    "examples": s.examples * self.world_size,
                    RATE_METRIC[phase]: 1.0 / s.step_s if s.step_s > 0 else None,
                    "warmup": s.warmup,
                })
        return rows

    def console_tables(self) -> list[Any]:
        from rich.table import Table

        table = Table(title=f"Speed (warm-up of {self.warmup_steps} steps excluded; {self.clock})")
        for column in ("phase", "steps", "s/iter", "median s", "p90 s", "examples/s", "data wait"):
            table.add_column(column, justify="left" if column == "phase" else "right")
        for phase, f in self.phase_summaries().items():
            table.add_row(
                phase,
                str(f["measured_steps"]),
                _fmt(f["seconds_per_iteration"], ".4f"),
                _fmt(f["median_step_s"], ".4f"),
                _fmt(f["p90_step_s"], ".4f"),
                _fmt(f["examples_per_second"], ".1f"),
                _fmt(f["dataloader_wait_share"], ".1%"),
            )
        return [table]


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)
