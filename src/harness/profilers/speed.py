"""The `speed` preset: end-to-end throughput of training, validation and inference.

Clock: harness.profilers.step_timer.now (perf_counter after a device synchronise on CUDA).
Warm-up steps (compilation, allocator and cache warm-up) are recorded but left out of every
figure. The preset times steps for the whole run (harness.profilers.preset.RunShared): it
counts each batch's examples inside the step, and runs the run's between-steps work (a
logger's flush) just before its clock restarts.

Multi-process runs (DDP): every rank times its own steps; at the end of fit and of predict
the ranks' step records are gathered on every rank, so rank 0 can report each rank's figures
and a total throughput that is the sum of the ranks'.

reports/speed.json's fields are explained in docs/presets/speed.md (its "doc" key).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from rich.table import Table
from typing_extensions import override

from harness.config.checks import non_negative_int, positive_int
from harness.launch.ranks import rank_path
from harness.measured import PHASES
from harness.profilers.all_ranks import gather
from harness.profilers.preset import Preset, Report, RunShared
from harness.profilers.step_timer import (
    PhaseTimer,
    StepRecord,
    clock_name,
    now,
    rank_figures,
    total_examples_per_second,
)
from harness.reports.files import write_csv, write_report

log = logging.getLogger(__name__)
DOC = "docs/presets/speed.md#output"
# Per-step rates sent to the loggers (MLflow charts them under these names): iterations per
# second, and examples per second (the step's examples on this rank x world size / its time,
# comparable across batch sizes; the headline figure sums the ranks' own measurements).
RATE_METRIC = {
    "train": "training_rate", "validation": "validation_rate", "inference": "inference_rate",
}
EXAMPLES_RATE_METRIC = {
    "train": "training_examples_rate",
    "validation": "validation_examples_rate",
    "inference": "inference_examples_rate",
}
# Per-phase figures copied into result.json's metrics as <phase>_<figure>.
HEADLINE = ("seconds_per_iteration", "examples_per_second", "median_step_s", "p90_step_s",
            "between_steps_share", "first_step_s", "measured_steps")


class SpeedPreset(Preset, Callback):
    """Times every step of every phase and writes reports/speed.{json,csv}."""

    def __init__(self, warmup_steps: int = 5, log_rates: bool = True, batch_size: int = 1,
                 min_measured_steps: int = 10) -> None:
        self.warmup_steps = non_negative_int("profiler.speed.warmup_steps", warmup_steps, 5)
        self.min_measured_steps = positive_int("profiler.speed.min_measured_steps",
                                               min_measured_steps, 10)
        self.log_rates = log_rates
        self.batch_size = batch_size
        self.timers = {phase: PhaseTimer(phase, warmup_steps) for phase in PHASES}
        self.shared = RunShared(timed_from_step=self.warmup_steps)  # alone until linked
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

    @override
    def link(self, shared: RunShared) -> None:
        super().link(shared)
        shared.timed_from_step = self.warmup_steps

    # -- Lightning hooks ---------------------------------------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.world_size = trainer.world_size
        self.rank = trainer.global_rank
        self.device = trainer.strategy.root_device

    def _received(self, phase: str, batch: Any) -> None:
        arrived = now(self.device)  # the batch is here: counting it is part of the step
        examples = self.shared.batches.count(phase, batch)
        self.timers[phase].batch_received(arrived, examples or self.batch_size)

    def _done(self, phase: str, trainer: pl.Trainer) -> None:
        record = self.timers[phase].step_done(now(self.device))
        if record is not None and self.log_rates:
            self._rate_steps[phase].append(trainer.global_step if phase == "train" else record.index)

    def _between_steps(self, trainer: pl.Trainer, *phases: str) -> None:
        """What must not land in a timed step, at a moment none is timed (after validation,
        at epoch and phase ends): the per-step rates recorded since the last call go to the
        loggers, then the run's between-steps work runs (a logger that writes to its store,
        an MLflow flush, can take seconds: inside a step it would count into its time and
        its batch wait)."""
        if self.log_rates:
            for phase in phases:
                self._log_rates(trainer, phase)
        self.shared.run_between_steps()

    def _log_rates(self, trainer: pl.Trainer, phase: str) -> None:
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
        self.timers["train"].restart(now(self.device))

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
            self.timers["validation"].restart(now(self.device))

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
        self._between_steps(trainer, *(() if trainer.sanity_checking else ("train", "validation")))
        # Training resumes after validation: its next iteration starts now, so
        # validation time is never charged to a training step.
        self.timers["train"].restart(now(self.device))

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._between_steps(trainer, "train")  # the next epoch's first iteration starts after this

    @override
    def on_predict_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.inference_mode = torch.is_inference_mode_enabled()
        self.timers["inference"].restart(now(self.device))

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
        if self.log_rates:
            for phase in ("train", "validation"):
                self._log_rates(trainer, phase)

    @override
    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._gather_ranks(("inference",))
        self._between_steps(trainer, "inference")

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if self.log_rates:  # an interrupted run keeps the rates it measured
            for phase in PHASES:
                self._log_rates(trainer, phase)

    def _gather_ranks(self, phases: tuple[str, ...]) -> None:
        if self.world_size <= 1:
            return
        gathered = gather({phase: list(self.timers[phase].steps) for phase in phases})
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

    def _flags(self, phases: dict[str, dict[str, Any]]) -> list[str]:
        """result.json flags, each said once on the terminal: thin:<phase> (fewer measured
        steps than min_measured_steps), warmup_swallowed:<phase> (every step was warm-up)."""
        found = []
        for phase, figures in phases.items():
            steps = figures["measured_steps"] + figures["warmup_steps"]
            if figures["measured_steps"] == 0:
                found.append(f"warmup_swallowed:{phase}")
                log.warning("speed: all %d %s steps were warm-up (profiler.speed.warmup_steps=%d):"
                            " no %s figures. Fix: lower warmup_steps or run more %s batches",
                            steps, phase, self.warmup_steps, phase, phase)
            elif figures["thin"]:
                found.append(f"thin:{phase}")
                log.info("speed: %s figures rest on %d measured steps, fewer than"
                         " profiler.speed.min_measured_steps=%d: read them as rough (thin)",
                         phase, figures["measured_steps"], self.min_measured_steps)
        return found

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        phases = self.phase_summaries()
        flags = self._flags(phases)
        payload = {
            "report": "speed",
            "doc": DOC,
            "clock": clock_name(self.device),
            "warmup_steps_excluded": self.warmup_steps,
            "min_measured_steps": self.min_measured_steps,
            "world_size": self.world_size,
            "inference_mode": self.inference_mode,
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
        metrics = {f"{phase}_{key}": figures[key]
                   for phase, figures in phases.items() for key in HEADLINE}
        return Report(metrics, flags, [self._table(phases), *self._rank_tables(phases)])

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

    # -- the terminal's tables (and the run's log) ---------------------------------
    def _table(self, phases: dict[str, dict[str, Any]]) -> Table:
        """One row per phase; a thin phase (too few measured steps) says so beside its steps."""
        table = Table(title=f"Speed (warm-up of {self.warmup_steps} steps excluded;"
                            f" {clock_name(self.device)})")
        for column in ("phase", "steps", "s/iter", "median s", "p90 s", "examples/s",
                       "between steps"):
            table.add_column(column, justify="left" if column == "phase" else "right")
        for phase, f in phases.items():
            table.add_row(
                phase,
                f"{f['measured_steps']}{' (thin)' if f['thin'] else ''}",
                _fmt(f["seconds_per_iteration"], ".4f"),
                _fmt(f["median_step_s"], ".4f"),
                _fmt(f["p90_step_s"], ".4f"),
                _fmt(f["examples_per_second"], ".1f"),
                _fmt(f["between_steps_share"], ".1%"),
            )
        return table

    def _rank_tables(self, phases: dict[str, dict[str, Any]]) -> list[Table]:
        """Multi-process runs: each rank's own figures, and their sum."""
        if self.world_size <= 1:
            return []
        table = Table(title=f"Speed per rank ({self.world_size} ranks; total = sum of ranks)")
        for column in ("phase", "rank", "steps", "s/iter", "examples/s"):
            table.add_column(column, justify="left" if column == "phase" else "right")
        for phase, f in phases.items():
            for r in f["per_rank"]:
                table.add_row(phase, str(r["rank"]), str(r["measured_steps"]),
                              _fmt(r["seconds_per_iteration"], ".4f"),
                              _fmt(r["examples_per_second"], ".1f"))
            total = "total" if f["ranks_measured"] == self.world_size else "rank 0 x world"
            table.add_row(phase, total, "", "", _fmt(f["examples_per_second"], ".1f"),
                          end_section=True)
        return [table]


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)
