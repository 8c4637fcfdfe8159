"""A stand-in for `torch.cuda` at the event timer's boundary: a simulated device timeline.

Host time is a FakeClock the test advances. `launch(seconds)` queues work on a stream: the
stream is busy until max(now, busy_until) + seconds; the host blocks (its clock advances)
when it is more than `max_lead` seconds ahead, as CUDA's launch queue makes it. An event
recorded on a stream completes when the stream reaches it; `elapsed_time` on an event the
device has not reached raises, as torch's does (cudaErrorNotReady).
"""

from __future__ import annotations

from typing import Any


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> float:
        self.t += seconds
        return self.t


class FakeStream:
    def __init__(self, name: str) -> None:
        self.name = name
        self.busy_until = 0.0


class FakeEvent:
    def __init__(self, cuda: FakeCuda, enable_timing: bool) -> None:
        self.cuda = cuda
        self.enable_timing = enable_timing
        self.at: float | None = None
        cuda.events.append(self)

    def record(self, stream: FakeStream | None = None) -> None:
        s = stream or self.cuda.stream
        self.at = max(self.cuda.clock.t, s.busy_until)
        s.busy_until = self.at

    def query(self) -> bool:
        self.cuda.queries += 1
        return self.at is not None and self.cuda.clock.t >= self.at

    def synchronize(self) -> None:
        assert self.at is not None
        self.cuda.event_syncs += 1
        self.cuda.clock.t = max(self.cuda.clock.t, self.at)

    def elapsed_time(self, end: Any) -> float:
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'")
        if not (self.at is not None and end.at is not None
                and self.cuda.clock.t >= max(self.at, end.at)):
            raise RuntimeError("CUDA error: device not ready")
        return (end.at - self.at) * 1e3  # milliseconds, as torch's


class FakeCuda:
    """torch.cuda as the event timer uses it: Event, current_stream, synchronize."""

    def __init__(self, clock: FakeClock, max_lead: float = 1.0) -> None:
        self.clock = clock
        self.max_lead = max_lead
        self.stream = FakeStream("default")
        self.side = FakeStream("side")
        self.syncs = 0
        self.event_syncs = 0
        self.queries = 0
        self.events: list[FakeEvent] = []
        cuda = self

        class Event(FakeEvent):
            def __init__(self, enable_timing: bool = False) -> None:
                super().__init__(cuda, enable_timing)

        self.Event = Event

    def current_stream(self, device: Any = None) -> FakeStream:
        return self.stream

    def launch(self, seconds: float, stream: FakeStream | None = None) -> None:
        """Queue `seconds` of kernels; the host waits only when the queue is full."""
        s = stream or self.stream
        s.busy_until = max(s.busy_until, self.clock.t) + seconds
        if s.busy_until - self.clock.t > self.max_lead:
            self.clock.t = s.busy_until - self.max_lead

    def synchronize(self, device: Any = None) -> None:
        self.syncs += 1
        self.clock.t = max(self.clock.t, self.stream.busy_until, self.side.busy_until)
