"""`harness.annotate(name)`: a named range in user code, left in for good: one attribute read
while switched off; a record_function and/or NVTX range once a preset switches it on."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from harness.instrument.switches import STATE

F = TypeVar("F", bound=Callable[..., Any])


def _open(name: str) -> tuple[Any, Any]:
    scope = None
    if STATE.record_function is not None:
        scope = STATE.record_function(name)
        scope.__enter__()
    pop = STATE.nvtx_pop
    if STATE.nvtx_push is not None:
        STATE.nvtx_push(name)
    return scope, pop


def _close(opened: tuple[Any, Any]) -> None:
    scope, pop = opened
    if pop is not None:
        pop()
    if scope is not None:
        scope.__exit__(None, None, None)


class annotate:  # noqa: N801 - used like a function: `with harness.annotate("name"):`
    """A named range: `with annotate("name"): ...` or `@annotate("name")` on a function."""

    __slots__ = ("name", "_opened")

    def __init__(self, name: str) -> None:
        self.name = name
        # A stack: nesting or recursion through the same object closes its ranges in order.
        self._opened: list[tuple[Any, Any]] | None = None

    def __enter__(self) -> annotate:
        if STATE.on:
            if self._opened is None:
                self._opened = []
            self._opened.append(_open(self.name))
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        # What was opened is closed even if the switches changed in between.
        if self._opened:
            _close(self._opened.pop())

    def __call__(self, func: F) -> F:
        name = self.name

        @functools.wraps(func)
        def annotated(*args: Any, **kwargs: Any) -> Any:
            if not STATE.on:
                return func(*args, **kwargs)
            opened = _open(name)
            try:
                return func(*args, **kwargs)
            finally:
                _close(opened)

        return annotated  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"annotate({self.name!r})"
