"""The global on/off state read by every `harness.annotate` range, switched by presets
(docs/profiling-your-code.md); NVTX comes from the `nvtx` package, else torch.cuda.nvtx."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

KINDS = ("record_function", "nvtx")


class _State:
    """What an annotate range reads on entry; `on` is the one check a disabled range makes."""

    __slots__ = ("on", "record_function", "nvtx_push", "nvtx_pop", "counts")

    def __init__(self) -> None:
        self.on = False
        self.record_function: Callable[[str], Any] | None = None
        self.nvtx_push: Callable[[str], Any] | None = None
        self.nvtx_pop: Callable[[], Any] | None = None
        self.counts = dict.fromkeys(KINDS, 0)


STATE = _State()


def _check(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown instrumentation kind {kind!r}: expected one of {', '.join(KINDS)}")


def nvtx_backend() -> tuple[Callable[[str], Any], Callable[[], Any]] | None:
    try:
        import nvtx
    except ImportError:
        import torch

        if torch.cuda.is_available():  # torch.cuda.nvtx raises on CPU-only builds
            return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
        return None
    return (lambda name: nvtx.push_range(message=name)), nvtx.pop_range


def _refresh() -> None:
    STATE.on = STATE.record_function is not None or STATE.nvtx_push is not None


def enable(kind: str) -> bool:
    """Switch one kind of range on (counted). Returns whether that kind is now active."""
    _check(kind)
    STATE.counts[kind] += 1
    if kind == "record_function" and STATE.record_function is None:
        from torch.profiler import record_function

        STATE.record_function = record_function
    elif kind == "nvtx" and STATE.nvtx_push is None:
        STATE.nvtx_push, STATE.nvtx_pop = nvtx_backend() or (None, None)
    _refresh()
    return is_enabled(kind)


def disable(kind: str) -> None:
    """Undo one `enable(kind)`; the kind goes off when every enable has been undone."""
    _check(kind)
    STATE.counts[kind] = max(0, STATE.counts[kind] - 1)
    if STATE.counts[kind] == 0:  # at 0 before, it was off already
        if kind == "record_function":
            STATE.record_function = None
        else:
            STATE.nvtx_push = STATE.nvtx_pop = None
    _refresh()


def is_enabled(kind: str) -> bool:
    _check(kind)
    return (STATE.record_function if kind == "record_function" else STATE.nvtx_push) is not None


def reset() -> None:
    """Everything off, whatever the counts (a new job in the same process)."""
    STATE.__init__()


@contextmanager
def enabled(kind: str) -> Iterator[bool]:
    active = enable(kind)
    try:
        yield active
    finally:
        disable(kind)
