"""GPU step timing without a synchronise per step: CUDA events on the current stream.

`profiler.speed.sync` picks the clock of a CUDA run (conf/profiler/speed.yaml):

- `step`: torch.cuda.synchronize() at every step boundary, then time.perf_counter
  (harness.profilers.step_timer.PhaseTimer). Exact per step, but the host can never run
  ahead of the device, so the step it times is not quite the step the run takes unobserved.
- `events`: one timing event recorded on torch.cuda.current_stream() at each step boundary
  (no host wait): the batch's arrival and the step's end, the step's end being the next
  step's origin, so two events a step. They are read back oldest first, every `flush_every`
  steps for those the device has passed (Event.query(), never a wait) and at the end of the
  phase, so the pending list stays bounded. A step's time is the device timeline from the
  end of the previous step's work to the end of its own; its `between_s` is the device's gap
  between the previous step's end and this batch's arrival: the part of the batch fetch the
  device waited for (a fetch hidden behind queued kernels costs nothing).
- `window`: no per-step device clock. The measured window alone is timed (below); the
  per-step rows are the host's dispatch times, labelled so.

In every mode the measured window is timed as a whole: each segment (the measured steps
between the end of warm-up, an epoch's start or a return from another phase, and the next
pause) has one synchronise at each end: a few per epoch, not two a step. With `events`,
`events_over_window` = (the measured steps' event times) / (the window's time) is the
cross-check: 1.00 when the events cover everything the device did
(slightly below: the hooks between a segment's last step and its pause), well below when work
ran on a stream the events did not wait for (a side stream, a collective on NCCL's stream).
Below EVENTS_MISS_WORK the headline s/it and examples/s come from the window, and `clocks`
says so.

The CUDA boundary is the `cuda` argument (torch.cuda in a run): Event(enable_timing=True)
with record(stream), query(), synchronize() and elapsed_time(other); current_stream();
synchronize(). tests/fake_cuda.py fakes it on a simulated device timeline.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.profilers.step_timer import (
    CLOCKS,
    PhaseTimer,
    Segment,
    StepRecord,
    step_figures,
    window_figures,
)

SYNC_MODES = ("step", "window", "events")
FLUSH_EVERY = 256  # steps between read-backs of the events the device has passed
MAX_PENDING = 4 * FLUSH_EVERY  # past this, the oldest event is waited for: the device is far behind
EVENTS_MISS_WORK = 0.95  # events_over_window below this: the events miss some of the device's work
# Figures the speed report derives from the step records (speed.json `clocks` names their clock).
STEP_FIGURES = ("median_step_s", "p90_step_s", "mad_step_s", "between_steps_share",
                "median_between_s", "steps_csv")


@dataclass
class _Pending:
    host: StepRecord  # the step as the host saw it (its dispatch time)
    origin: Any  # event: the end of the previous step (or the segment's start)
    batch: Any  # event: this step's batch arrived
    done: Any  # event: this step ended


class EventPhaseTimer:
    """PhaseTimer's interface (restart, batch_received, step_done, open/close_window, steps,
    summary) for `sync=events` and `sync=window` on a CUDA device. `host_now` arguments are
    the host's clock read without a synchronise; the window's ends synchronise here."""

    def __init__(self, name: str, warmup_steps: int, cuda: Any, sync: str = "events",
                 flush_every: int = FLUSH_EVERY,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.name = name
        self.warmup_steps = warmup_steps
        self.cuda = cuda
        self.sync = sync
        self.flush_every = flush_every
        self.clock = clock
        self.host = PhaseTimer(name, warmup_steps)  # dispatch times and the window's segments
        self.device_steps: list[StepRecord] = []  # read back from the events, oldest first
        self.syncs = 0  # torch.cuda.synchronize() calls
        self.event_waits = 0  # waits on one old event (MAX_PENDING reached)
        self._pending: deque[_Pending] = deque()
        self._origin: Any = None
        self._batch: Any = None

    # -- what the speed preset reads --------------------------------------------------------
    @property
    def steps(self) -> list[StepRecord]:
        """The step records read so far: the device's (events), or the host's (window)."""
        return self.host.steps if self.sync == "window" else self.device_steps

    @property
    def segments(self) -> list[Segment]:
        return self.host.segments

    @property
    def recorded(self) -> int:
        return self.host.recorded

    @property
    def measuring(self) -> bool:
        return self.host.measuring

    @property
    def window_open(self) -> bool:
        return self.host.window_open

    # -- the CUDA boundary ---------------------------------------------------------------------
    def _event(self) -> Any:
        if self.sync == "window":
            return None
        event = self.cuda.Event(enable_timing=True)
        event.record(self.cuda.current_stream())
        return event

    def _synchronize(self) -> float:
        self.cuda.synchronize()
        self.syncs += 1
        return self.clock()

    # -- steps -----------------------------------------------------------------------------------
    def restart(self, host_now: float) -> None:
        """A new epoch or a return from another phase: the next iteration starts here."""
        self.host.restart(host_now)
        self._origin, self._batch = self._event(), None

    def batch_received(self, host_now: float, examples: int) -> None:
        if self._origin is None:
            self._origin = self._event()
        self.host.batch_received(host_now, examples)
        self._batch = self._event()

    def step_done(self, host_now: float) -> StepRecord | None:
        """The step as the host saw it (its index, whether warm-up); its device time is read
        back later."""
        record = self.host.step_done(host_now)
        if record is None:
            return None
        done = self._event()
        if self.sync == "events":
            self._pending.append(_Pending(record, self._origin, self._batch, done))
            if len(self._pending) >= self.flush_every:
                self.flush()
        self._origin, self._batch = done, None
        return record

    def flush(self) -> None:
        """Turn the pending steps the device has finished into StepRecords, oldest first:
        never a host wait, unless the device is MAX_PENDING steps behind (then the oldest
        event alone is waited for)."""
        while self._pending:
            oldest = self._pending[0]
            if not oldest.done.query():
                if len(self._pending) < MAX_PENDING:
                    return
                oldest.done.synchronize()
                self.event_waits += 1
            self._pending.popleft()
            host = oldest.host
            self.device_steps.append(StepRecord(
                host.index, oldest.origin.elapsed_time(oldest.done) / 1e3,
                oldest.origin.elapsed_time(oldest.batch) / 1e3, host.examples, host.warmup))

    # -- the measured window: one synchronise at each end of a segment -------------------------
    def open_window(self, host_now: float | None = None) -> None:
        """Measured steps start: synchronise, and a segment opens. Call `restart` after it, so
        the next step's origin is recorded after the synchronise."""
        if not self.window_open:
            self.host.open_window(self._synchronize())

    def close_window(self, host_now: float | None = None) -> None:
        """Measured steps stop: synchronise (every pending event is then complete), the segment
        closes, and the steps are read back."""
        if self.window_open:
            self.host.close_window(self._synchronize())
        self.flush()

    def finish(self) -> None:
        """The phase is over: close the window and read every event back."""
        self.close_window()
        if self._pending:  # steps after the window closed (a run stopped mid-phase)
            self._synchronize()
            self.flush()

    # -- figures ---------------------------------------------------------------------------------
    def summary(self, world_size: int) -> dict[str, Any]:
        """The step figures of the mode's clock, the window's, the cross-check, and `clocks`:
        which clock made each figure."""
        self.flush()
        figures: dict[str, Any] = step_figures(self.steps, world_size)
        window = window_figures(self.segments)
        figures.update(window)
        figures["synchronises"] = self.syncs
        events_s = sum(s.step_s for s in self.device_steps if not s.warmup)
        ratio = events_s / window["window_s"] if self.sync == "events" and window["window_s"] else None
        figures["events_over_window"] = ratio
        miss = ratio is not None and ratio < EVENTS_MISS_WORK
        figures["events_miss_work"] = miss
        if self.sync == "window" or miss:
            measured = [s for s in self.host.steps if not s.warmup]
            examples = sum(s.examples for s in measured) * world_size
            figures["seconds_per_iteration"] = window["window_seconds_per_iteration"]
            figures["examples_per_second"] = (examples / window["window_s"]
                                              if window["window_s"] else None)
            figures["iterations_per_second"] = (window["window_steps"] / window["window_s"]
                                                if window["window_s"] else None)
        if self.sync == "window":  # no step was timed on the device
            for key in ("median_step_s", "p90_step_s", "mad_step_s", "median_between_s"):
                figures[key] = None
        figures["clocks"] = clocks(self.sync, miss)
        return figures


def clocks(sync: str, events_miss_work: bool = False) -> dict[str, str]:
    """Which clock made each figure of a phase (CLOCKS' keys): `sync` is the mode in force,
    `host` on a CPU."""
    if sync in ("host", "step"):
        return dict.fromkeys(("seconds_per_iteration", "examples_per_second", *STEP_FIGURES),
                             sync) | ({"window_seconds_per_iteration": "window"}
                                      if sync == "step" else {})
    window = {"window_seconds_per_iteration": "window"}
    if sync == "window":
        return {"seconds_per_iteration": "window", "examples_per_second": "window",
                **dict.fromkeys(STEP_FIGURES, "dispatch"), "median_step_s": "none",
                "p90_step_s": "none", "mad_step_s": "none", "median_between_s": "none", **window}
    rate = "window" if events_miss_work else "events"
    return {"seconds_per_iteration": rate, "examples_per_second": rate,
            **dict.fromkeys(STEP_FIGURES, "events"), **window,
            "events_over_window": "events / window"}


def clock_legend(used: dict[str, dict[str, str]]) -> dict[str, str]:
    """The clocks named in `used` (phase -> figure -> clock), spelled out (speed.json)."""
    names = {clock for figures in used.values() for clock in figures.values()}
    return {name: CLOCKS[name] for name in sorted(names) if name in CLOCKS}
