"""Preemption and time limits (docs/slurm.md): SIGTERM, SIGINT and submitit's warning signal
become `RunInterrupted`, a KeyboardInterrupt that Lightning shuts down on gracefully, so the
reports measured so far are written, with status `interrupted`. The run is never requeued."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

PREEMPT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"


class RunInterrupted(KeyboardInterrupt):
    """A signal asked the run to stop; the message names the signal."""


def preemption_signal() -> signal.Signals:
    """The signal submitit asks SLURM to send before the time limit (SIGUSR2 by default)."""
    name = os.environ.get(PREEMPT_SIGNAL_ENV, "USR2").upper().removeprefix("SIG")
    return getattr(signal.Signals, f"SIG{name}", signal.SIGUSR2)


class InterruptionSignals:
    """Remembers which signal stopped the run; `received` is None until one does."""

    def __init__(self) -> None:
        self.received: str | None = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            return  # already stopping: let the reports be written
        self.received = signal.Signals(signum).name
        raise RunInterrupted(f"received {self.received}")

    @property
    def reason(self) -> str | None:
        if self.received is None:
            return None
        why = {"SIGTERM": "scancel, preemption or shutdown", "SIGINT": "Ctrl-C"}.get(
            self.received, "submitit's warning: time limit or preemption")
        return f"interrupted by {self.received} ({why}); reports hold the steps measured so far"

    @property
    def exit_status(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + signal.Signals[self.received].value if self.received else 1


def stop_sweep_on_sigterm() -> Any:
    """Between a sweep's jobs, SIGTERM stops it as Ctrl-C does; returns the handler replaced."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, InterruptionSignals().handle)


def restore_sigterm(handler: Any) -> None:
    if handler is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[InterruptionSignals]:
    """Within this block SIGTERM and the preemption signal stop the run (main thread only)."""
    state = InterruptionSignals()
    if threading.current_thread() is not threading.main_thread():
        yield state  # signal handlers can only be installed from the main thread
        return
    signums = {signal.SIGTERM, signal.SIGINT, preemption_signal()}
    previous = {s: signal.signal(s, state.handle) for s in signums}  # a set: each once
    try:
        yield state
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
