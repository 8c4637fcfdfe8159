"""Per-phase step timing: the clock, and the arithmetic behind the speed report (no Lightning).

The clock every preset times steps with (the speed preset, the diagnose preset's passes) is
`time.perf_counter`, read after `torch.cuda.synchronize()` when the device is a GPU, so a
step's time includes the kernels it queued and not only their launch.

An iteration is one whole loop step as the user experiences it: from the end
of the previous step (or the start of the phase) to the end of this one, so
the wait for the next batch is inside it. Its `between_s` is the time from that
same starting point to the moment the step receives its batch: the batch fetch and
its transfer, plus whatever Lightning runs after harness's end-of-step hook (later
callbacks' hooks, checkpoints, logging). The diagnose preset tells the two apart.
"""

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


def clock_name(device: torch.device | None) -> str:
    """The clock `now` reads on `device`, as the reports state it."""
    if device is not None and device.type == "cuda":
        return "time.perf_counter after torch.cuda.synchronize"
    return "time.perf_counter"


@dataclass
class StepRecord:
    index: int  # 0-based step of this phase over the whole run
    step_s: float  # iteration time, seconds
    between_s: float  # from the previous step's end to this batch's arrival, seconds
    examples: int  # examples in this step's batch on this rank
    warmup: bool  # left out of the figures


@dataclass
class PhaseTimer:
    """Collects step records for one phase (train, validation or inference)."""

    name: str
    warmup_steps: int
    steps: list[StepRecord] = field(default_factory=list)
    _origin: float | None = None  # end of the previous step, or the start of the phase
    _batch_at: float | None = None
    _examples: int = 0

    def restart(self, now: float) -> None:
        """A new epoch or a return from another phase: the next iteration starts here."""
        self._origin = now
        self._batch_at = None

    def batch_received(self, now: float, examples: int) -> None:
        if self._origin is None:
            self._origin = now
        self._batch_at = now
        self._examples = examples

    def step_done(self, now: float) -> StepRecord | None:
        if self._origin is None or self._batch_at is None:
            return None
        record = StepRecord(
            index=len(self.steps),
            step_s=now - self._origin,
            between_s=self._batch_at - self._origin,
            examples=self._examples,
            warmup=len(self.steps) < self.warmup_steps,
        )
        self.steps.append(record)
        self._origin = now
        self._batch_at = None
        return record

    def summary(self, world_size: int) -> dict[str, float | int | None]:
        """Figures over the measured (non-warm-up) steps; None where nothing was measured."""
        measured = [s for s in self.steps if not s.warmup]
        times = np.array([s.step_s for s in measured], dtype=float)
        total = float(times.sum()) if len(times) else 0.0
        between = float(sum(s.between_s for s in measured))
        examples = sum(s.examples for s in measured) * world_size
        first = self.steps[0].step_s if self.steps else None
        return {
            "measured_steps": len(measured),
            "warmup_steps": len(self.steps) - len(measured),
            "measured_time_s": total,
            "seconds_per_iteration": total / len(times) if len(times) else None,
            "median_step_s": float(np.median(times)) if len(times) else None,
            "p90_step_s": float(np.percentile(times, 90)) if len(times) else None,
            "examples_per_second": examples / total if total > 0 else None,
            "iterations_per_second": len(times) / total if total > 0 else None,
            "between_steps_s": between,
            "between_steps_share": between / total if total > 0 else None,
            "first_step_s": first,
            "warmup_time_s": float(sum(s.step_s for s in self.steps if s.warmup)),
        }


def rank_figures(rank: int, steps: list[StepRecord]) -> dict[str, float | int | None]:
    """One rank's own figures: its measured steps, time and examples (no world-size factor)."""
    figures = PhaseTimer("rank", 0, steps=steps).summary(world_size=1)
    measured = [s for s in steps if not s.warmup]
    return {
        "rank": rank,
        "measured_steps": figures["measured_steps"],
        "measured_time_s": figures["measured_time_s"],
        "examples": sum(s.examples for s in measured),
        "examples_per_second": figures["examples_per_second"],
        "seconds_per_iteration": figures["seconds_per_iteration"],
        "median_step_s": figures["median_step_s"],
    }


def total_examples_per_second(per_rank: list[dict[str, float | int | None]]) -> float | None:
    """Throughput of the whole run: ranks work side by side, so their rates add up."""
    rates = [r["examples_per_second"] for r in per_rank]
    if not rates or any(r is None for r in rates):
        return None
    return float(sum(rates))  # type: ignore[arg-type]
