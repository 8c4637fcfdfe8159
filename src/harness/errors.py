"""Errors that reach the user as one line instead of a traceback."""

from __future__ import annotations


class HarnessError(Exception):
    """A problem the user can fix: the message names the key, the bad value and the fix."""


class ConfigError(HarnessError):
    """A config value is wrong. Raised before any heavy work starts."""

    def __init__(self, key: str, value: object, expected: str, fix: str | None = None) -> None:
        self.key = key
        self.value = value
        message = f"{key}={value!r} is not valid: expected {expected}."
        if fix:
            message += f" Fix: {fix}"
        super().__init__(message)


def first_line(err: BaseException, with_type: bool = True) -> str:
    """The first non-empty line of an exception's message, for one-line reports.

    With `with_type`, prefixed by the exception's class (or the class alone when the
    message is empty); without, the bare line ('' when empty).
    """
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if not with_type:
        return text
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
