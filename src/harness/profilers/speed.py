"""The `speed` preset: end-to-end throughput of training, validation and inference. Times every
step of every phase past warm-up and is the run's step timer (RunShared); also reads contention,
step noise and memory per phase. Fields and clocks: docs/presets/speed.md."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import psutil
import torch
from lightning.pytorch.callbacks import Callback
from rich.table import Table
from typing_extensions import override

from harness import memory_peaks
from harness.config.checks import NonNegativeInt, PositiveInt, PositiveNumber
from harness.contention import CpuWindow, GpuWindow
from harness.errors import first_line
from harness.launch.ranks import rank_path
from harness.measured import PHASES
from harness.profilers.all_ranks import gather
from harness.profilers.diagnose import speed_of_light
from harness.profilers.event_timer import FLUSH_EVERY, SYNC_MODES, EventPhaseTimer, clock_legend, clocks
from harness.profilers.nvml import Nvml, torch_uuids
from harness.profilers.preset import Preset, Report, RunShared, figures_table
from harness.profilers.speed_flags import Cautions, phase_word
from harness.profilers.step_timer import (
    PhaseTimer,
    StepRecord,
    now,
    rank_figures,
    total_examples_per_second,
    window_figures,
)
from harness.reports.files import write_csv, write_report

DOC = "docs/presets/speed.md#output"
# Per-step rates for the loggers: iterations/s and examples/s (this rank's x world size).
RATE_METRIC = {phase: f"{phase_word(phase)}_rate" for phase in PHASES}
EXAMPLES_RATE_METRIC = {phase: f"{phase_word(phase)}_examples_rate" for phase in PHASES}
HEADLINE = ("seconds_per_iteration", "examples_per_second", "median_step_s", "p90_step_s",
            "between_steps_share", "first_step_s", "measured_steps", "mad_step_s", "median_between_s")
TRAIN_HEADLINE = ("optimizer_steps_per_second", "batches_per_step")  # training's alone
CONTENTION = ("other_cpu_share", "run_delay_share")  # and, on CUDA, gpu_other_sm_share
GPU_CLOCKS = ("window_seconds_per_iteration", "events_over_window")  # CUDA only
TABLE_FIGURES = (("seconds_per_iteration", ".4f"), ("median_step_s", ".4f"), ("p90_step_s", ".4f"),
                 ("examples_per_second", ".1f"), ("between_steps_share", ".1%"))
CLOCK_TITLES = {  # the clock in force, as the speed table's title and speed.json's `clock` say it
    "host": "time.perf_counter",
    "step": "time.perf_counter after torch.cuda.synchronize at every step",
    "events": "CUDA events per step, checked against the measured window (torch.cuda.synchronize"
              " at its ends)",
    "window": "the measured window alone (torch.cuda.synchronize at its ends)",
}


class SpeedPreset(Preset, Callback):
    """Times every step of every phase and writes reports/speed.{json,csv}."""

    def __init__(self, warmup_steps: NonNegativeInt = 5, log_rates: bool = True,
                 batch_size: PositiveInt = 1, min_measured_steps: PositiveInt = 10,
                 sync: Literal[SYNC_MODES] = "events", contended_above: PositiveNumber = 0.10,
                 noisy_above: PositiveNumber = 0.25, noisy_mean_over_median: PositiveNumber = 1.5) -> None:
        self.warmup_steps = warmup_steps
        self.cautions = Cautions(  # the thresholds in force
            warmup_steps, min_measured_steps, contended_above, noisy_above, noisy_mean_over_median)
        self.sync, self.log_rates, self.batch_size = sync, log_rates, batch_size
        self.timers: dict[str, PhaseTimer] = {phase: PhaseTimer(phase, warmup_steps) for phase in PHASES}
        self.clock = "host"  # the clock in force: host (a CPU), step, events or window
        self.cuda: Any = torch.cuda  # the CUDA boundary the event timers use (tests fake it)
        self.shared = RunShared(timed_from_step=self.warmup_steps)  # alone until linked
        self.world_size, self.rank = 1, 0
        self.device: torch.device | None = None
        self.inference_mode: bool | None = None
        self.rank_steps: dict[str, dict[int, list[StepRecord]]] = {}
        # under DDP every rank's own CPU time is gathered: the ranks on this host are ours
        self.cpu_windows = {phase: CpuWindow() for phase in PHASES}
        self.rank_cpu: dict[str, list[dict[str, Any]]] = {}
        self.nvml: Any = None  # an open Nvml on CUDA; None elsewhere or without NVML
        self.gpu_windows: dict[str, GpuWindow] = {}
        self.memory: dict[str, dict[str, int | None]] = {}  # phase -> its memory figures
        # per phase: each record's logger step, and how many records' rates were logged
        self._rate_steps: dict[str, list[int]] = {phase: [] for phase in PHASES}
        self._rates_logged = dict.fromkeys(PHASES, 0)
        self._running: str | None = None  # the phase whose clock runs (its steps go on)
        self._global_step = 0  # the trainer's optimizer steps when the training batch started
        self.optimizer_steps = True  # Lightning steps the optimizer (automatic optimization)
        self._held: list[Callable[[], None]] = []  # untimed work waiting for the step's end
        self._memory_notes: list[str] = []

    @override
    def link(self, shared: RunShared) -> None:
        super().link(shared)
        shared.timed_from_step = self.warmup_steps
        shared.cautions = self.cautions
        shared.untimed = self.untimed

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.world_size, self.rank = trainer.world_size, trainer.global_rank
        self.device = trainer.strategy.root_device
        if self.device.type != "cuda" or self.clock != "host":  # chosen once: setup runs again for predict
            return
        self.clock = self.sync
        if self.sync != "step":
            self.timers = {phase: EventPhaseTimer(phase, self.warmup_steps, self.cuda, self.sync,
                                                  clock=self._now) for phase in PHASES}
        self.nvml = Nvml(torch_uuids())  # cuda:i found in NVML by its UUID
        gpus, index = self.nvml.gpus, self.device.index or 0  # no GPUs where NVML is unavailable
        if index < len(gpus):
            self.gpu_windows = {phase: GpuWindow(self.nvml.module, gpus[index].handle) for phase in PHASES}

    def _now(self) -> float:
        """The host's clock; with sync=step, once the device has finished its queued work."""
        return now(self.device) if self.clock == "step" else time.perf_counter()

    def _warm_libraries(self, phase: str, trainer: pl.Trainer, module: pl.LightningModule,
                        batch: Any) -> None:
        """On a phase's first batch, before its memory counts: one step of its own alone, state put back,
        so that what libraries keep after first use is in no job's figure (presets/speed.md#memory)."""
        if not self.warmup_steps or self.timers[phase].recorded:  # without warm-up it would be measured
            return
        training = phase == "train"
        why = ("manual optimization" if training and not module.automatic_optimization  # it steps itself
               else speed_of_light.copy_refused(trainer.strategy, module, list(trainer.optimizers) if training
                                                else [], psutil.virtual_memory().available))
        # every rank runs the step, or none: it may hold collectives
        if trainer.world_size > 1 and not trainer.strategy.reduce_boolean_decision(why is None):
            why = why or "another rank could not"
        try:  # its time is the first warm-up step's (with compile: autotune's charge reads it there)
            if why is None:
                with memory_peaks.excluded(self.device):  # what it leaves held is read as it ends
                    own = copy.deepcopy(batch)  # a step may change it: pop a key, normalise in place
                    step = speed_of_light.own_step_fn(trainer, module, own, training)
                    why = speed_of_light.model_alone(trainer, module, step, own, 1, 0, training).note
                    del own, step  # the copy is not held
        except Exception as err:  # noqa: BLE001 - a state it cannot copy or put back costs the note only
            why = f"it failed: {first_line(err)}"
        if why:
            self._memory_notes.append(f"{phase}: what libraries keep after their first use counts in"
                                      f" its memory (its step did not run alone first: {why})")

    def _received(self, phase: str, batch: Any) -> None:
        arrived = self._now()  # the batch is here: counting it is part of the step
        examples = self.shared.batches.count(phase, batch)
        self.timers[phase].batch_received(arrived, examples or self.batch_size)

    def _done(self, phase: str, trainer: pl.Trainer) -> None:
        timer = self.timers[phase]
        # with accumulation a batch without an optimizer step is part of the next iteration
        updates = timer.batches_per_step == 1 or trainer.global_step != self._global_step
        record = timer.step_done(self._now(), updates)
        if record is None:
            return
        if self.log_rates:
            self._rate_steps[phase].append(trainer.global_step if phase == "train" else record.index)
        if timer.warm_from == record.index + 1 and not self._held:
            self._open_window(phase)  # warm-up is over: the measured window starts
        elif self.gpu_windows and record.index % FLUSH_EVERY == FLUSH_EVERY - 1:
            self.gpu_windows[phase].read()  # NVML keeps a short buffer of samples
        self._run_held(phase)  # its restart opens the window when warm-up is over

    def untimed(self, work: Callable[[], None]) -> None:
        """RunShared.untimed: after the step in progress is recorded, else at once."""
        phase = self._running
        if phase is not None and self.timers[phase].in_step:
            self._held.append(work)
            return
        self._paused(phase, [work])

    def _run_held(self, phase: str | None) -> None:
        if self._held:
            works, self._held = self._held, []
            self._paused(phase, works)

    def _paused(self, phase: str | None, works: list[Callable[[], None]]) -> None:
        """`works` with `phase`'s measured window closed, as around a validation."""
        if phase is not None:
            self._close_window(phase)
        try:
            for work in works:
                work()
        finally:
            if phase is not None:
                self._restart(phase)

    def _restart(self, phase: str) -> None:
        """A new epoch, or a return from another phase: the next iteration starts now."""
        self._running = phase
        if self.timers[phase].measuring:
            self._open_window(phase)
        else:
            self.timers[phase].restart(self._now())

    def _open_window(self, phase: str) -> None:
        """Counters, then the clock's window, then the next step's origin: none costs a step."""
        timer = self.timers[phase]
        if not timer.window_open:
            memory_peaks.phase_timed(phase, self.device, warmed_up=self.warmup_steps > 0)
            self.cpu_windows[phase].open()
            if phase in self.gpu_windows:
                self.gpu_windows[phase].open()
            timer.open_window(self._now())
        timer.restart(self._now())

    def _close_window(self, phase: str) -> None:
        timer = self.timers[phase]
        if not timer.window_open:
            return
        timer.close_window(self._now())
        self.cpu_windows[phase].close()
        if phase in self.gpu_windows:
            self.gpu_windows[phase].close()

    def _stage_end(self, phases: tuple[str, ...]) -> None:
        """Every step read back, the stage's memory peaks, and every rank's records."""
        for phase in phases:
            self._close_window(phase)
            if isinstance(timer := self.timers[phase], EventPhaseTimer):
                timer.finish()
        self.memory[phases[0]] = memory_peaks.phase_end(phases[0], self.device)
        self._gather_ranks(phases)

    def _between_steps(self, trainer: pl.Trainer, *phases: str) -> None:
        """With no step timed: the new rates to the loggers, then the run's between-steps work."""
        self._log_rates(trainer, *phases)
        self.shared.run_between_steps()

    def _log_rates(self, trainer: pl.Trainer, *phases: str) -> None:
        for phase in phases if self.log_rates else ():
            steps = self.timers[phase].steps  # with events: those read back so far
            for record in steps[self._rates_logged[phase]:]:
                if record.step_s > 0:
                    rates = {RATE_METRIC[phase]: 1.0 / record.step_s,
                             EXAMPLES_RATE_METRIC[phase]: record.examples * self.world_size / record.step_s}
                    for logger in trainer.loggers:
                        logger.log_metrics(rates, step=self._rate_steps[phase][record.index])
            self._rates_logged[phase] = len(steps)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # an iteration of training: one optimizer step, of this many batches (step_timer)
        self.timers["train"].batches_per_step = trainer.accumulate_grad_batches
        self.optimizer_steps = getattr(pl_module, "automatic_optimization", True)
        memory_peaks.phase_start("train", self.device)

    @override
    def on_predict_start(self, *_: Any) -> None:
        memory_peaks.phase_start("inference", self.device)

    @override
    def on_train_epoch_start(self, *_: Any) -> None:
        self._restart("train")

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             *_: Any) -> None:
        if self.timers["train"].batches_per_step > 1:
            self._global_step = trainer.global_step
        self._warm_libraries("train", trainer, pl_module, batch)
        self._received("train", batch)

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        self._done("train", trainer)

    @override
    def on_validation_epoch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if not trainer.sanity_checking:
            self._close_window("train")  # validation inside training is no training step
            self._restart("validation")

    @override
    def on_validation_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                  batch: Any, *_: Any) -> None:
        if not trainer.sanity_checking:
            self._received("validation", batch)

    @override
    def on_validation_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        if not trainer.sanity_checking:
            self._done("validation", trainer)

    @override
    def on_validation_end(self, trainer: pl.Trainer, *_: Any) -> None:
        if trainer.sanity_checking:  # before training: its epoch start restarts its clock
            self._between_steps(trainer)
            return
        self._close_window("validation")
        self._between_steps(trainer, "train", "validation")
        self._restart("train")  # validation time is never charged to a training step

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        self._phase_paused("train")  # before the epoch's end work and any pass at the fit's end
        self._between_steps(trainer, "train")  # the next epoch's first iteration starts after this

    @override
    def on_predict_epoch_start(self, *_: Any) -> None:
        self.inference_mode = torch.is_inference_mode_enabled()
        self._restart("inference")

    @override
    def on_predict_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                               batch: Any, *_: Any) -> None:
        self._warm_libraries("inference", trainer, pl_module, batch)
        self._received("inference", batch)

    @override
    def on_predict_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        self._done("inference", trainer)

    @override
    def on_predict_epoch_end(self, *_: Any) -> None:
        self._phase_paused("inference")  # before any pass at predict's end

    def _phase_paused(self, phase: str) -> None:
        self._close_window(phase)
        self._running = None
        self._run_held(None)

    # Every rank runs these hooks, so the collective inside cannot hang.
    @override
    def on_train_end(self, trainer: pl.Trainer, *_: Any) -> None:
        self._stage_end(("train", "validation"))
        self._log_rates(trainer, "train", "validation")

    @override
    def on_predict_end(self, trainer: pl.Trainer, *_: Any) -> None:
        self._stage_end(("inference",))
        self._between_steps(trainer, "inference")

    @override
    def on_exception(self, trainer: pl.Trainer, *_: Any) -> None:
        self._running = None
        self._held.clear()  # work held by the step that failed: its preset ends on its own
        self._log_rates(trainer, *PHASES)  # an interrupted run keeps the rates it measured

    def _gather_ranks(self, phases: tuple[str, ...]) -> None:
        """Every rank's step records, and its own CPU time over the window (one collective)."""
        if self.world_size <= 1:
            return
        gathered = gather({phase: (list(self.timers[phase].steps), self.cpu_windows[phase].own())
                           for phase in phases})
        for phase in phases:
            self.rank_steps[phase] = {rank: mine[phase][0] for rank, mine in enumerate(gathered)}
            self.rank_cpu[phase] = [mine[phase][1] for mine in gathered]

    def _steps_by_rank(self, phase: str) -> dict[int, list[StepRecord]]:
        """Each rank's steps of `phase`; this rank's own alone where they were not gathered."""
        return self.rank_steps.get(phase) or {self.rank: self.timers[phase].steps}

    def phase_summaries(self) -> dict[str, dict[str, Any]]:
        """Figures per phase that ran a step; `examples_per_second` sums the ranks'."""
        summaries = {}
        for phase, timer in self.timers.items():
            if not timer.recorded:
                continue
            figures: dict[str, Any] = timer.summary(self.world_size)
            if "clocks" not in figures:  # the host's clock (a CPU, or sync=step)
                figures["clocks"] = clocks(self.clock)
                if self.clock == "step":
                    figures.update(window_figures(timer.segments, timer.batches_per_step))
            if phase == "train":  # an iteration is an optimizer step (step_timer)
                figures["batches_per_step"] = timer.batches_per_step
                figures["optimizer_steps_per_second"] = (figures["iterations_per_second"]
                                                         if self.optimizer_steps else None)
            per_rank = [rank_figures(rank, steps, timer.batches_per_step)
                        for rank, steps in sorted(self._steps_by_rank(phase).items())]
            if len(per_rank) == self.world_size and figures["clocks"]["examples_per_second"] != "window":
                figures["examples_per_second"] = total_examples_per_second(per_rank)
            figures["ranks_measured"] = len(per_rank)
            figures["thin"] = figures["measured_steps"] < self.cautions.min_measured_steps
            figures.update(self.cautions.noise(figures))
            figures["contention"] = self._contention(phase)
            figures["memory"] = self.memory.get(phase)
            figures["per_rank"] = per_rank
            summaries[phase] = figures
        return summaries

    def _contention(self, phase: str) -> dict[str, Any] | None:
        """Who else used the CPUs (and GPU) in the measured window; None: it never opened."""
        found = self.cpu_windows[phase].figures(self.cautions.contended_above, self.rank_cpu.get(phase))
        gpu = self.gpu_windows.get(phase)
        if found is None or gpu is None:
            return found
        gpu.own_pids |= {r["pid"] for r in self.rank_cpu.get(phase, [])}
        found.update(gpu.figures(self.cautions.contended_above))
        if found["gpu_contended"]:
            found["contended"] = True
        return found

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        phases = self.phase_summaries()
        flags = self.cautions.flags(phases)
        if self.nvml is not None:
            self.nvml.close()
        c, device = self.cautions, getattr(self.device, "type", "cpu")
        payload = {
            "report": "speed", "doc": DOC, "clock": CLOCK_TITLES[self.clock], "sync": self.sync,
            "sync_note": (f"profiler.speed.sync={self.sync} is ignored on {device}: no device queue to"
                          " wait for, every figure is time.perf_counter's" if self.clock == "host" else None),
            "memory_note": ("; ".join(self._memory_notes) or None if self.warmup_steps
                            else memory_peaks.no_warmup_note(self.device)),
            "clocks": clock_legend({phase: figures["clocks"] for phase, figures in phases.items()}),
            "warmup_steps_excluded": self.warmup_steps, "min_measured_steps": c.min_measured_steps,
            "contended_above": c.contended_above, "noisy_above": c.noisy_above,
            "noisy_mean_over_median": c.noisy_mean_over_median, "world_size": self.world_size,
            "inference_mode": self.inference_mode, "phases": phases,
        }
        nested = ("per_rank", "clocks", "contention", "memory")
        rows = [{"phase": phase, **{k: v for k, v in figures.items() if k not in nested}}
                for phase, figures in phases.items()]
        write_report(reports_dir, "speed", payload, rows)
        write_csv(reports_dir / "speed_steps.csv", self.step_rows(self.rank))
        if self.world_size > 1:  # each rank's own timeline, from the gathered records
            for rank in sorted({r for phase in PHASES for r in self._steps_by_rank(phase)}):
                write_csv(rank_path(reports_dir / "speed_steps.csv", rank), self.step_rows(rank))
        metrics = self._metrics(phases)
        figure_clocks = {f"{phase}_{figure}": clock for phase, figures in phases.items()
                         for figure, clock in figures["clocks"].items() if f"{phase}_{figure}" in metrics}
        # a run stopped before any phase measured a step: no empty table under its error
        tables = [self._table(phases), *self._rank_tables(phases)] if phases else []
        return Report(metrics, flags, tables, clocks=figure_clocks)

    def _metrics(self, phases: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """result.json's metrics (docs/running.md lists them)."""
        metrics: dict[str, Any] = {}
        cuda = self.clock != "host"  # the clock leaves the host's on CUDA alone
        for phase, figures in phases.items():
            metrics.update({f"{phase}_{key}": figures[key] for key in (*HEADLINE, *TRAIN_HEADLINE)
                            if key in figures})
            found = figures["contention"] or {}
            for key in (*CONTENTION, *(("gpu_other_sm_share",) if cuda else ())):
                metrics[f"{phase}_{key}"] = found.get(key)
            if cuda:
                metrics.update({f"{phase}_{key}": figures.get(key) for key in GPU_CLOCKS})
            metrics.update(figures["memory"] or {})
        return metrics

    def step_rows(self, rank: int = 0) -> list[dict[str, Any]]:
        """One row per step of every phase of one rank: its rates over time."""
        return [{"rank": rank, "phase": phase, "step": s.index, "step_s": s.step_s,
                 "between_s": s.between_s, "examples": s.examples,
                 RATE_METRIC[phase]: 1.0 / s.step_s if s.step_s > 0 else None, "warmup": s.warmup}
                for phase in PHASES for s in self._steps_by_rank(phase).get(rank, [])]

    def _table(self, phases: dict[str, dict[str, Any]]) -> Table:
        table = figures_table(
            f"Speed (warm-up of {self.warmup_steps} steps excluded; {CLOCK_TITLES[self.clock]})",
            ("phase", "steps", "s/iter", "median s", "p90 s", "examples/s", "between steps"),
            [(phase, f"{f['measured_steps']}{' (thin)' if f['thin'] else ''}",
              *(_fmt(f[key], spec) for key, spec in TABLE_FIGURES)) for phase, f in phases.items()])
        train = phases.get("train", {})
        if train.get("batches_per_step", 1) > 1:  # gradient accumulation: say what a step is
            table.caption = (
                f"train: a step is one optimizer step of {train['batches_per_step']} batches"
                f" ({_fmt(train['optimizer_steps_per_second'], '.2f')} optimizer steps/s;"
                f" warm-up: {train['warmup_steps']} of them)")
        return table

    def _rank_tables(self, phases: dict[str, dict[str, Any]]) -> list[Table]:
        """Multi-process runs: each rank's own figures, and their sum."""
        if self.world_size <= 1:
            return []
        table = figures_table(f"Speed per rank ({self.world_size} ranks; total = sum of ranks)",
                              ("phase", "rank", "steps", "s/iter", "examples/s"))
        for phase, f in phases.items():
            for r in f["per_rank"]:
                table.add_row(phase, str(r["rank"]), str(r["measured_steps"]),
                              _fmt(r["seconds_per_iteration"], ".4f"), _fmt(r["examples_per_second"], ".1f"))
            total = "total" if f["ranks_measured"] == self.world_size else "rank 0 x world"
            table.add_row(phase, total, "", "", _fmt(f["examples_per_second"], ".1f"), end_section=True)
        return [table]


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)
