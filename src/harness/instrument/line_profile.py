"""`@harness.profile`: mark a function for line-by-line timing by `profiler=line`. Marking
records it and returns the very same object: it costs nothing while no line profiler runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_marked: list[Callable[..., Any]] = []
_active: Any = None  # the running line_profiler.LineProfiler, if any


def profile(func: F) -> F:
    """Mark `func` for `profiler=line`; returns `func` itself."""
    _marked.append(func)
    if _active is not None:  # marked after the profiler started (a module imported late)
        _active.add_callable(func)
    return func


def marked() -> list[Callable[..., Any]]:
    return list(_marked)


def attach(profiler: Any) -> None:
    """Functions marked from now on are added to `profiler`."""
    global _active
    _active = profiler


def detach() -> None:
    global _active
    _active = None
