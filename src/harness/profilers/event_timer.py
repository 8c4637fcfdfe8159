"""GPU step timing without a synchronise per step: `profiler.speed.sync=events|window`
(docs/presets/speed.md, "Clocks")."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.profilers.step_timer import CLOCKS, PhaseTimer, StepRecord, step_figures, window_figures

SYNC_MODES = ("step", "window", "events")
FLUSH_EVERY = 256  # steps between read-backs of the events the device has passed
MAX_PENDING = 4 * FLUSH_EVERY  # past this, the oldest event is waited for: the device is far behind
EVENTS_MISS_WORK = 0.95  # events_over_window below this: the events miss some of the device's work
# Figures the speed report derives from the step records (speed.json `clocks` names their clock).
STEP_FIGURES = ("median_step_s", "p90_step_s", "mad_step_s", "between_steps_share",
                "median_between_s", "steps_csv")
NOT_TIMED = ("median_step_s", "p90_step_s", "mad_step_s", "median_between_s")  # by sync=window


@dataclass
class _Pending:
    host: StepRecord  # the step as the host saw it (its dispatch time)
    origin: Any  # event: the end of the previous step (or the segment's start)
    batch: Any  # event: this step's batch arrived
    done: Any  # event: this step ended


class EventPhaseTimer(PhaseTimer):
    """A PhaseTimer for `sync=events|window` on CUDA: `host_steps` hold the dispatch times,
    `steps` the device's from the events (the host's with `sync=window`)."""

    def __init__(self, name: str, warmup_steps: int, cuda: Any, sync: str = "events",
                 flush_every: int = FLUSH_EVERY, clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__(name, warmup_steps)
        self.cuda, self.sync, self.flush_every, self.clock = cuda, sync, flush_every, clock
        self.device_steps: list[StepRecord] = []  # read back from the events, oldest first
        self.syncs = 0  # torch.cuda.synchronize() calls
        self._pending: deque[_Pending] = deque()
        self._origin_event: Any = None
        self._batch_event: Any = None

    @property
    def steps(self) -> list[StepRecord]:
        return self.host_steps if self.sync == "window" else self.device_steps

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

    def restart(self, now: float) -> None:
        super().restart(now)
        self._origin_event, self._batch_event = self._event(), None

    def batch_received(self, now: float, examples: int) -> None:
        if self._origin_event is None:
            self._origin_event = self._event()
        super().batch_received(now, examples)
        self._batch_event = self._event()

    def step_done(self, now: float, updates: bool = True) -> StepRecord | None:
        """The step as the host saw it; its device time is read back later."""
        record = super().step_done(now, updates)
        if record is None:
            return None
        done = self._event()
        if self.sync == "events":
            self._pending.append(_Pending(record, self._origin_event, self._batch_event, done))
            if len(self._pending) >= self.flush_every:
                self.flush()
        self._origin_event, self._batch_event = done, None
        return record

    def flush(self) -> None:
        """Finished steps into StepRecords, oldest first; waits only MAX_PENDING steps behind."""
        while self._pending:
            oldest = self._pending[0]
            if not oldest.done.query():
                if len(self._pending) < MAX_PENDING:
                    return
                oldest.done.synchronize()
            self._pending.popleft()
            host = oldest.host
            self.device_steps.append(StepRecord(host.index, oldest.origin.elapsed_time(oldest.done) / 1e3,
                oldest.origin.elapsed_time(oldest.batch) / 1e3, host.examples, host.warmup, host.updates))

    def open_window(self, now: float | None = None) -> None:
        """Synchronise and open a segment; call `restart` after it."""
        if not self.window_open:
            super().open_window(self._synchronize())

    def close_window(self, now: float | None = None) -> None:
        """Synchronise, close the segment and read the steps back."""
        if self.window_open:
            super().close_window(self._synchronize())
        self.flush()

    def finish(self) -> None:
        self.close_window()
        if self._pending:  # steps after the window closed (a run stopped mid-phase)
            self._synchronize()
            self.flush()

    def summary(self, world_size: int) -> dict[str, Any]:
        """The step figures of the mode's clock, the window's, the cross-check and `clocks`."""
        self.flush()
        figures: dict[str, Any] = step_figures(self.steps, world_size, self.batches_per_step)
        window = window_figures(self.segments, self.batches_per_step)
        window_s = window["window_s"]
        events_s = sum(s.step_s for s in self.device_steps if not s.warmup)
        ratio = events_s / window_s if self.sync == "events" and window_s else None
        miss = ratio is not None and ratio < EVENTS_MISS_WORK
        figures.update(window, synchronises=self.syncs, events_over_window=ratio, events_miss_work=miss)
        if self.sync == "window" or miss:
            examples = sum(s.examples for s in self.host_steps if not s.warmup) * world_size
            per_iteration = window["window_seconds_per_iteration"]
            figures.update(seconds_per_iteration=per_iteration,
                           examples_per_second=examples / window_s if window_s else None,
                           iterations_per_second=1 / per_iteration if per_iteration else None)
        if self.sync == "window":  # no step was timed on the device
            figures.update(dict.fromkeys(NOT_TIMED))
        figures["clocks"] = clocks(self.sync, miss)
        return figures


def clocks(sync: str, events_miss_work: bool = False) -> dict[str, str]:
    """Which clock made each figure of a phase; `sync`: the mode in force, `host` on a CPU."""
    rates = ("seconds_per_iteration", "examples_per_second")
    window = {} if sync == "host" else {"window_seconds_per_iteration": "window"}
    if sync in ("host", "step"):
        return dict.fromkeys((*rates, *STEP_FIGURES), sync) | window
    if sync == "window":
        return {**dict.fromkeys(rates, "window"), **dict.fromkeys(STEP_FIGURES, "dispatch"),
                **dict.fromkeys(NOT_TIMED, "none"), **window}
    return {**dict.fromkeys(rates, "window" if events_miss_work else "events"),
            **dict.fromkeys(STEP_FIGURES, "events"), **window, "events_over_window": "events / window"}


def clock_legend(used: dict[str, dict[str, str]]) -> dict[str, str]:
    """The clocks named in `used` (phase -> figure -> clock), spelled out (speed.json)."""
    names = {clock for figures in used.values() for clock in figures.values()}
    return {name: CLOCKS[name] for name in sorted(names) if name in CLOCKS}
