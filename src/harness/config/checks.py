"""Checks of single config values: each returns the value or raises a one-line ConfigError.

YAML and the command line give ints and floats already typed; a bool is refused even
though Python counts it as an int (`steps: true` is a mistake, not 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from harness.errors import ConfigError
from harness.measured import is_finite_number


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, value, "true or false", f"{key}=true")
    return value


def non_negative_int(key: str, value: Any, example: object = 2, what: str = "an integer >= 0") -> int:
    if not _is_int(value) or value < 0:
        raise ConfigError(key, value, what, f"{key}={example}")
    return value


def positive_int(key: str, value: Any, example: object = 1, what: str = "a positive integer") -> int:
    if not _is_int(value) or value <= 0:
        raise ConfigError(key, value, what, f"{key}={example}")
    return value


def positive_number(key: str, value: Any, example: object = 1.0, what: str = "a number > 0") -> float:
    if not is_finite_number(value) or value <= 0:
        raise ConfigError(key, value, what, f"{key}={example}")
    return float(value)


def parsed_number(key: str, value: object, integer: bool = False, allow_zero: bool = False,
                  example: object = 10) -> float:
    """`value` as a finite number > 0 (>= 0 with allow_zero), strings parsed: settings read
    from environment variables (${oc.env:...}) arrive as strings."""
    try:
        number = int(str(value)) if integer else float(str(value))
    except ValueError:
        number = None
    if (isinstance(value, bool) or number is None or not math.isfinite(number) or number < 0
            or (number == 0 and not allow_zero)):
        kind = "an integer" if integer else "a number"
        raise ConfigError(key, value, f"{kind} {'>=' if allow_zero else '>'} 0", f"{key}={example}")
    return number


def one_of(key: str, value: Any, allowed: Sequence[str], example: object = None) -> Any:
    if value not in allowed:
        raise ConfigError(key, value, "one of " + ", ".join(allowed),
                          f"{key}={allowed[0] if example is None else example}")
    return value


def list_of(
    key: str, values: Any, allowed: Sequence[str], example: str, allow_empty: bool = False
) -> list[Any]:
    """`values` (a list, or one value) as a list whose items are all in `allowed`."""
    values = [values] if isinstance(values, str) else list(values)
    if (not values and not allow_empty) or any(value not in allowed for value in values):
        raise ConfigError(key, values, "a list of " + ", ".join(allowed)
                          + ("" if allow_empty else " (at least one)"), f"{key}={example}")
    return values
