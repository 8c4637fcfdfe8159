"""The global on/off state read by every `harness.annotate` range.

Presets switch a kind of range on when their profiler starts and off when it
stops; the switches count, so two presets that both want `record_function`
ranges keep them on until the last one lets go:

    from harness.instrument import switches
    switches.enable("record_function")   # torch.profiler.record_function ranges
    ...
    switches.disable("record_function")

`enable("nvtx")` opens NVTX ranges through the `nvtx` package when it is
installed, else through torch.cuda.nvtx on a CUDA build with a GPU; with
neither it stays a no-op and returns False.
"""

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
        raise ValueError(
            f"unknown instrumentation kind {kind!r}: expected one of {', '.join(KINDS)}"
        )


def nvtx_backend() -> tuple[Callable[[str], Any], Callable[[], Any]] | None:
    """(push, pop) of an NVTX implementation that works here, or None."""
    try:
        import nvtx
    except ImportError:
        nvtx = None
    if nvtx is not None:
        return (lambda name: nvtx.push_range(message=name)), nvtx.pop_range
    import torch

    # torch.cuda.nvtx raises on CPU-only builds, so it is used only where CUDA works.
    if torch.cuda.is_available():
        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    return None


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
        backend = nvtx_backend()
        if backend is not None:
            STATE.nvtx_push, STATE.nvtx_pop = backend
    _refresh()
    return is_enabled(kind)


def disable(kind: str) -> None:
    """Undo one `enable(kind)`; the kind goes off when every enable has been undone."""
    _check(kind)
    if STATE.counts[kind] == 0:
        return
    STATE.counts[kind] -= 1
    if STATE.counts[kind] == 0:
        if kind == "record_function":
            STATE.record_function = None
        else:
            STATE.nvtx_push = STATE.nvtx_pop = None
    _refresh()


def is_enabled(kind: str) -> bool:
    """Whether ranges of this kind are opened now."""
    _check(kind)
    if kind == "record_function":
        return STATE.record_function is not None
    return STATE.nvtx_push is not None


def reset() -> None:
    """Everything off, whatever the counts (for tests and for a new job in the same process)."""
    STATE.counts = dict.fromkeys(KINDS, 0)
    STATE.record_function = STATE.nvtx_push = STATE.nvtx_pop = None
    _refresh()


@contextmanager
def enabled(kind: str) -> Iterator[bool]:
    """`with enabled("record_function"):` keeps the kind on for the block."""
    active = enable(kind)
    try:
        yield active
    finally:
        disable(kind)
