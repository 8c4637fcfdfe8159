"""The `speed` preset: end-to-end throughput of training, validation and inference.

Clocks: `time.perf_counter` on the host, read after `torch.cuda.synchronize()`
when the run is on a CUDA device, so a step's time includes the kernels it
queued and not only their launch. Warm-up steps (compilation, allocator and
cache warm-up) are recorded but left out of every figure.

Multi-process runs (DDP): every rank times its own steps; at the end of fit and
of predict the ranks' step records are gathered on every rank, so rank 0 can
report each rank's figures and a total throughput that is the sum of the ranks'.
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from harness.config.checks import non_negative_int, positive_int
from harness.launch.ranks import rank_path
from harness.measured import PHASES
from harness.profilers.step_timer import (
    PhaseTimer,
    StepRecord,
    rank_figures,
    total_examples_per_second,
)
from harness.reports.files import write_csv, write_report

log = logging.getLogger(__name__)
RATE_METRIC = {  # iterations per second (it/s), per step
    "train": "training_rate", "validation": "validation_rate", "inference": "inference_rate"
}
# examples per second per step, comparable across batch sizes: the step's examples on this
# rank x world size / its time (the headline figure sums the ranks' own measurements)
EXAMPLES_RATE_METRIC = {phase: f"{metric.split('_')[0]}_examples_rate"
                        for phase, metric in RATE_METRIC.items()}


def count_examples(batch: Any) -> int | None:
    """Examples in a batch on this rank, by Lightning's own batch-size extraction (the leading
    dimension of the first tensor found in it), or None when no tensor holds it."""
    from lightning.pytorch.utilities.data import extract_batch_size

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an ambiguous collection: the first size found is kept
        try:
            return int(extract_batch_size(batch))
        except Exception:  # MisconfigurationException: nothing to read it from
            return None


class SpeedPreset(Callback):
    """Times every step of every phase and writes reports/speed.{json,csv}."""

    def __init__(self, warmup_steps: int = 5, log_rates: bool = True, batch_size: int = 1,
                 min_measured_steps: int = 10) -> None:
        self.warmup_steps = non_negative_int("profiler.speed.warmup_steps", warmup_steps, 5)
        self.min_measured_steps = positive_int("profiler.speed.min_measured_steps",
                                               min_measured_steps, 10)
        self.log_rates = log_rates
        self.batch_size = batch_size
        self.timers = {phase: PhaseTimer(phase, warmup_steps) for phase in PHASES}
        # (id of the last batch received, its examples): BatchObserver reads it, not the batch
        self.counted: tuple[int, int | None] | None = None
        self.world_size = 1
        self.device: torch.device | None = None
        self.inference_mode: bool | None = None
        self.rank = 0
        # phase -> rank -> that rank's step records, once gathered at the end of the phase
        self.rank_steps: dict[str, dict[int, list[StepRecord]]] = {}
        # per phase: the logger step of each record (global_step for training), and how many
        # records' rates the loggers have had
        self._rate_steps: dict[str, list[int]] = {phase: [] for phase in PHASES}
        self._rates_logged = dict.fromkeys(PHASES, 0)

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
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.world_size = trainer.world_size
        self.rank = trainer.global_rank
        self.device = trainer.strategy.root_device

    def _received(self, phase: str, batch: Any) -> None:
        now = self._now()  # the batch is here: counting it is part of the step
        self.counted = (id(batch), count_examples(batch))
        self.timers[phase].batch_received(now, self.counted[1] or self.batch_size)

    def _done(self, phase: str, trainer: pl.Trainer) -> None:
        record = self.timers[phase].step_done(self._now())
        if record is not None and self.log_rates:
            self._rate_steps[phase].append(trainer.global_step if phase == "train" else record.index)

    def _log_rates(self, trainer: pl.Trainer, *phases: str) -> None:
        """Send the per-step rates recorded since the last call to the loggers.

        Called only between timed steps (after validation, at epoch and phase ends): a logger
        that writes to its store (an MLflow flush can take seconds) would otherwise land in
        the next step's time and in its batch wait.
        """
        if not self.log_rates:
            return
        for phase in phases:
            steps = self.timers[phase].steps
            done = self._rates_logged[phase]
            for record, step in zip(steps[done:], self._rate_steps[phase][done:], strict=True):
                if record.step_s > 0:
                    rates = {RATE_METRIC[phase]: 1.0 / record.step_s,
                             EXAMPLES_RATE_METRIC[phase]:
                                 record.examples * self.world_size / record.step_s}
                    for logger in trainer.loggers:
                        logger.log_metrics(rates, step=step)
            self._rates_logged[phase] = len(steps)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.timers["train"].restart(self._now())

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._received("train", batch)

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:
        self._done("train", trainer)

    @override
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.timers["validation"].restart(self._now())

    @override
    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not trainer.sanity_checking:
            self._received("validation", batch)

    @override
    def on_validation_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int, dataloader_idx: int = 0,
    ) -> None:
        if not trainer.sanity_checking:
            self._done("validation", trainer)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._log_rates(trainer, "train", "validation")
        # Training resumes after validation: its next iteration starts now, so
        # validation time is never charged to a training step.
        self.timers["train"].restart(self._now())

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._log_rates(trainer, "train")  # the next epoch's first iteration starts after this

    @override
    def on_predict_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.inference_mode = torch.is_inference_mode_enabled()
        self.timers["inference"].restart(self._now())

    @override
    def on_predict_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._received("inference", batch)

    @override
    def on_predict_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int, dataloader_idx: int = 0,
    ) -> None:
        self._done("inference", trainer)

    # Every rank runs these hooks, so the collective inside cannot hang.
    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._gather_ranks(("train", "validation"))
        self._log_rates(trainer, "train", "validation")

    @override
    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._gather_ranks(("inference",))
        self._log_rates(trainer, "inference")

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._log_rates(trainer, *PHASES)  # an interrupted run keeps the rates it measured

    def _gather_ranks(self, phases: tuple[str, ...]) -> None:
        import torch.distributed as dist

        if self.world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
            return
        mine = {phase: list(self.timers[phase].steps) for phase in phases}
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
        for phase in phases:
            self.rank_steps[phase] = {rank: steps[phase] for rank, steps in enumerate(gathered)}

    def _steps_by_rank(self, phase: str) -> dict[int, list[StepRecord]]:
        """Each rank's steps of `phase`; only this rank's own when the ranks were not
        gathered (one process, or the run stopped before the end of the phase)."""
        return self.rank_steps.get(phase) or {self.rank: self.timers[phase].steps}

    # -- reports -------------------------------------------------------------------
    def phase_summaries(self) -> dict[str, dict[str, Any]]:
        """Figures per phase that ran at least one step.

        Step-time figures are this rank's (rank 0 when reports are written);
        `examples_per_second` is the whole run's: the sum of every rank's own
        examples / measured time, or this rank's x world_size when the other
        ranks' figures could not be collected (`ranks_measured` < world_size).
        """
        summaries = {}
        for phase, timer in self.timers.items():
            if not timer.steps:
                continue
            figures: dict[str, Any] = timer.summary(self.world_size)
            per_rank = [rank_figures(rank, steps)
                        for rank, steps in sorted(self._steps_by_rank(phase).items())]
            if len(per_rank) == self.world_size:
                figures["examples_per_second"] = total_examples_per_second(per_rank)
            figures["ranks_measured"] = len(per_rank)
            figures["thin"] = figures["measured_steps"] < self.min_measured_steps
            figures["per_rank"] = per_rank
            summaries[phase] = figures
        return summaries

    def flags(self) -> list[str]:
        """result.json flags: thin:<phase> (fewer measured steps than min_measured_steps),
        warmup_swallowed:<phase> (every step of the phase was warm-up)."""
        found = []
        for phase, figures in self.phase_summaries().items():
            if figures["measured_steps"] == 0:
                found.append(f"warmup_swallowed:{phase}")
            elif figures["thin"]:
                found.append(f"thin:{phase}")
        return found

    def _say_thin(self, phases: dict[str, dict[str, Any]]) -> None:
        for phase, figures in phases.items():
            steps = figures["measured_steps"] + figures["warmup_steps"]
            if figures["measured_steps"] == 0:
                log.warning("speed: all %d %s steps were warm-up (profiler.speed.warmup_steps=%d):"
                            " no %s figures. Fix: lower warmup_steps or run more %s batches",
                            steps, phase, self.warmup_steps, phase, phase)
            elif figures["thin"]:
                log.info("speed: %s figures rest on %d measured steps, fewer than"
                         " profiler.speed.min_measured_steps=%d: read them as rough (thin)",
                         phase, figures["measured_steps"], self.min_measured_steps)

    def write_reports(self, reports_dir: Path) -> dict[str, Any]:
        phases = self.phase_summaries()
        self._say_thin(phases)
        payload = {
            "report": "speed",
            "what": "end-to-end iteration time and throughput per phase",
            "between_steps": "share of each iteration from the end of the previous step to the"
            " next batch's arrival: the batch fetch and transfer, plus Lightning's work after"
            " this preset's end-of-step hook (later callbacks, checkpoints, logging)",
            "clock": self.clock,
            "warmup_steps_excluded": self.warmup_steps,
            "min_measured_steps": self.min_measured_steps,
            "thin": "a phase with fewer measured steps than min_measured_steps: figures on few"
            " samples",
            "world_size": self.world_size,
            "examples_counted": (
                "examples_per_second: sum over ranks of (rank's examples / rank's measured time);"
                " rank 0 x world_size if ranks_measured < world_size. Step times: rank 0's"
            ),
            "inference_mode": self.inference_mode,
            "expected_overhead": (
                "two clock reads (each after a device synchronise on CUDA) per step; rates reach"
                " the loggers between phases, outside the timed steps"
            ),
            "phases": phases,
        }
        # the CSV keeps one row per phase; per-rank figures are in the JSON
        rows = [{"phase": phase, **{k: v for k, v in figures.items() if k != "per_rank"}}
                for phase, figures in phases.items()]
        write_report(reports_dir, "speed", payload, rows)
        write_csv(reports_dir / "speed_steps.csv", self.step_rows(self.rank))
        if self.world_size > 1:  # each rank's own timeline, from the gathered records
            ranks = sorted({r for phase in PHASES for r in self._steps_by_rank(phase)})
            for rank in ranks:
                write_csv(rank_path(reports_dir / "speed_steps.csv", rank), self.step_rows(rank))
        headline: dict[str, Any] = {}
        for phase, figures in phases.items():
            for key in ("seconds_per_iteration", "examples_per_second", "median_step_s",
                        "p90_step_s", "between_steps_share", "first_step_s", "measured_steps"):
                headline[f"{phase}_{key}"] = figures[key]
        return headline

    def step_rows(self, rank: int = 0) -> list[dict[str, Any]]:
        """One row per step of every phase of one rank: its rates over time."""
        rows = []
        for phase in PHASES:
            for s in self._steps_by_rank(phase).get(rank, []):
                rows.append({
                    "rank": rank,
                    "phase": phase,
                    "step": s.index,
                    "step_s": s.step_s,
                    "between_s": s.between_s,
                    "examples": s.examples,
                    RATE_METRIC[phase]: 1.0 / s.step_s if s.step_s > 0 else None,
                    "warmup": s.warmup,
                })
        return rows

    def console_tables(self) -> list[Any]:
        from harness.profilers.speed_tables import rank_table, speed_table

        return [speed_table(self), *rank_table(self)]
