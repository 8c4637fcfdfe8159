"""Checks of single config values: each returns the value or raises a one-line ConfigError.

YAML and the command line give ints and floats already typed; a bool is refused even
though Python counts it as an int (`steps: true` is a mistake, not 1).
"""

from __future__ import annotations

from typing import Any

from harness.errors import ConfigError


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def non_negative_int(key: str, value: Any, example: object = 2, what: str = "an integer >= 0") -> int:
    if not _is_int(value) or value < 0:
        raise ConfigError(key, value, what, f"{key}={example}")
    return value


def positive_int(key: str, value: Any, example: object = 1, what: str = "a positive integer") -> int:
    if not _is_int(value) or value <= 0:
        raise ConfigError(key, value, what, f"{key}={example}")
    return value


def positive_number(key: str, value: Any, example: object = 1.0, what: str = "a number > 0") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(key, value, what, f"{key}={example}")
    return float(value)
