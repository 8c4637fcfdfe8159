"""Per-phase step timing on the host's clock, and the arithmetic behind the speed report: what an
iteration, `between_s` and an accumulated optimizer step are is docs/presets/speed.md, "What is
measured, and how"."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch


def now(device: torch.device | None) -> float:
    """Seconds on the host's clock, once `device` has finished the work queued on it."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


# Which clock made a figure (speed.json `clocks`, result.json `clocks`); docs/presets/speed.md.
CLOCKS = {
    "host": "time.perf_counter (no device queue: a CPU run)",
    "step": "time.perf_counter after torch.cuda.synchronize at every step boundary",
    "events": "CUDA events on the current stream at the step boundaries (no host wait)",
    "window": "time.perf_counter over the measured window, one torch.cuda.synchronize at each"
              " end of each of its segments",
    "dispatch": "time.perf_counter without a synchronise: the host's dispatch time",
}


Figures = dict[str, float | int | None]  # a phase's (or a rank's) figures, None where nothing was measured


@dataclass
class StepRecord:
    index: int  # 0-based step of this phase over the whole run
    step_s: float  # iteration time, seconds
    between_s: float  # from the previous step's end to this batch's arrival, seconds
    examples: int  # examples in this step's batch on this rank
    warmup: bool  # left out of the figures
    updates: bool = True  # the optimizer stepped at its end (training with accumulation)


@dataclass
class Segment:
    """One stretch of a phase's measured window, from when measured steps start to their stop."""

    start_s: float  # host clock (after a synchronise on a GPU)
    first_step: int  # index of the first step that began in it
    end_s: float | None = None
    steps: int = 0


def window_figures(segments: list[Segment], batches_per_step: int) -> Figures:
    """The measured window timed as a whole: its closed segments that held steps (batches);
    an iteration: `batches_per_step` of them."""
    closed = [s for s in segments if s.end_s is not None and s.steps > 0]
    window_s = float(sum(s.end_s - s.start_s for s in closed))  # type: ignore[operator]
    steps = sum(s.steps for s in closed)
    return {"window_s": window_s, "window_steps": steps, "window_segments": len(closed),
            "window_seconds_per_iteration": window_s * batches_per_step / steps if steps else None}


def optimizer_steps(steps: list[StepRecord], batches_per_step: int) -> list[StepRecord]:
    """Each run of `batches_per_step` batches that ended with an optimizer step as one record:
    their times, waits and examples summed. A step short of batches (an epoch's last) and the
    batches of one unfinished are left out: every record is a whole optimizer step."""
    if batches_per_step <= 1:
        return steps
    whole: list[StepRecord] = []
    batches: list[StepRecord] = []
    for step in steps:
        batches.append(step)
        if not step.updates:
            continue
        if len(batches) == batches_per_step:
            whole.append(StepRecord(len(whole), sum(b.step_s for b in batches),
                                    sum(b.between_s for b in batches), sum(b.examples for b in batches),
                                    warmup=any(b.warmup for b in batches)))
        batches = []
    return whole


def step_figures(steps: list[StepRecord], world_size: int, batches_per_step: int = 1) -> Figures:
    """Figures over the measured (non-warm-up) iterations (optimizer steps of `batches_per_step`
    batches); None where nothing was measured."""
    steps = optimizer_steps(steps, batches_per_step)
    measured = [s for s in steps if not s.warmup]
    times = np.array([s.step_s for s in measured], dtype=float)
    waits = np.array([s.between_s for s in measured], dtype=float)
    total, between = float(times.sum()), float(waits.sum())
    examples = sum(s.examples for s in measured) * world_size
    median = float(np.median(times)) if len(times) else None
    return {
        "measured_steps": len(measured), "warmup_steps": len(steps) - len(measured), "measured_time_s": total,
        "seconds_per_iteration": total / len(times) if len(times) else None, "median_step_s": median,
        "mad_step_s": float(np.median(np.abs(times - median))) if median is not None else None,
        "p90_step_s": float(np.percentile(times, 90)) if len(times) else None,
        "examples_per_second": examples / total if total > 0 else None,
        "iterations_per_second": len(times) / total if total > 0 else None, "between_steps_s": between,
        "between_steps_share": between / total if total > 0 else None,
        "median_between_s": float(np.median(waits)) if len(waits) else None,
        "first_step_s": steps[0].step_s if steps else None,
        "warmup_time_s": float(sum(s.step_s for s in steps if s.warmup)),
    }


@dataclass
class PhaseTimer:
    """One phase's step records on the clock the caller reads (`now`), and its window's segments."""

    name: str
    warmup_steps: int
    batches_per_step: int = 1  # training: batches per optimizer step (accumulate_grad_batches)
    host_steps: list[StepRecord] = field(default_factory=list)  # as the host's clock saw them
    segments: list[Segment] = field(default_factory=list)
    _origin: float | None = None  # end of the previous step, or the start of the phase
    _batch_at: float | None = None
    _examples: int = 0
    warm_from: int | None = None  # the first measured step; None: still warming up

    def __post_init__(self) -> None:
        if self.warmup_steps == 0:
            self.warm_from = 0

    @property
    def steps(self) -> list[StepRecord]:
        return self.host_steps

    @property
    def recorded(self) -> int:
        """Steps done so far, warm-up included."""
        return len(self.host_steps)

    @property
    def measuring(self) -> bool:
        return self.warm_from is not None

    @property
    def window_open(self) -> bool:
        return bool(self.segments) and self.segments[-1].end_s is None

    @property
    def in_step(self) -> bool:
        """A step received its batch and has not ended yet."""
        return self._batch_at is not None

    def restart(self, now: float) -> None:
        """The next iteration starts here (a new epoch, or back from another phase)."""
        self._origin, self._batch_at = now, None

    def batch_received(self, now: float, examples: int) -> None:
        if self._origin is None:
            self._origin = now
        self._batch_at = now
        self._examples = examples

    def step_done(self, now: float, updates: bool = True) -> StepRecord | None:
        """The step that ends now (`updates`: with an optimizer step); warm-up ends after
        `warmup_steps` of them, at the end of an optimizer step."""
        if self._origin is None or self._batch_at is None:
            return None
        record = StepRecord(self.recorded, now - self._origin, self._batch_at - self._origin,
                            self._examples, warmup=self.warm_from is None, updates=updates)
        self.host_steps.append(record)
        if self.warm_from is None and self.recorded >= self.warmup_steps and updates:
            self.warm_from = self.recorded
        self._origin, self._batch_at = now, None
        return record

    def open_window(self, now: float) -> None:
        if not self.window_open:
            self.segments.append(Segment(now, first_step=self.recorded))

    def close_window(self, now: float) -> None:
        if self.window_open:
            segment = self.segments[-1]
            segment.end_s, segment.steps = now, self.recorded - segment.first_step

    def summary(self, world_size: int) -> Figures:
        return step_figures(self.steps, world_size, self.batches_per_step)


def rank_figures(rank: int, steps: list[StepRecord], batches_per_step: int = 1) -> Figures:
    """One rank's own figures: its measured steps, time and examples (no world-size factor)."""
    figures = step_figures(steps, 1, batches_per_step)
    measured = [s for s in optimizer_steps(steps, batches_per_step) if not s.warmup]
    return {"rank": rank, "measured_steps": figures["measured_steps"],
            "measured_time_s": figures["measured_time_s"], "examples": sum(s.examples for s in measured),
            "examples_per_second": figures["examples_per_second"],
            "seconds_per_iteration": figures["seconds_per_iteration"],
            "median_step_s": figures["median_step_s"]}


def total_examples_per_second(per_rank: list[Figures]) -> float | None:
    """The run's throughput: every rank's examples over the slowest rank's measured window (the
    ranks work side by side, and the run goes as fast as its slowest: not rank 0's rate x N)."""
    times = [r["measured_time_s"] for r in per_rank]
    if not per_rank or any(not t for t in times):
        return None
    return float(sum(r["examples"] for r in per_rank)) / max(times)  # type: ignore[arg-type,type-var]
