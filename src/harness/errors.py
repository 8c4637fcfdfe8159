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
