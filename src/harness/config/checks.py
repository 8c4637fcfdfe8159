"""The one check of harness's own settings: a value against a constrained type hint
(`Annotated[int, ">= 1"]`: on a string or list, its length; `Literal[...]`), or a one-line
ConfigError naming the key. Standard library only; a bool is no int, an int is a float.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from harness.errors import ConfigError

PositiveInt = Annotated[int, ">= 1"]
NonNegativeInt = Annotated[int, ">= 0"]
PositiveNumber = Annotated[float, "> 0"]
Fraction = Annotated[float, ">= 0", "< 1"]
_OPERATORS = {">=": operator.ge, ">": operator.gt, "<": operator.lt}


def expected(hint: Any) -> str:
    """What `hint` allows, as the error says it: 'an integer >= 0', 'one of a, b'."""
    hint, rules, said = _parts(hint)
    if said:
        return said
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        words = [word for arg in args for word in (
            map(str, typing.get_args(arg)) if typing.get_origin(arg) is Literal
            else ("true", "false") if arg is bool else (expected(arg),))]
        return ", ".join(words[:-1]) + " or " + words[-1]
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin in (tuple, list):
        return f"a list of {expected(args[0]).removeprefix('a ').removeprefix('an ')}s"
    noun = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            type(None): "null"}.get(hint, getattr(hint, "__name__", str(hint)))
    low = next((r for r in rules if r[0] in (">=", ">")), None)
    high = next((r[1] for r in rules if r[0] == "<"), None)
    if low and high is not None:
        return f"{noun} from {typed(low[1])} to {typed(high - 1 if hint is int else high)}"
    if low == (">=", 1) and hint is int:
        return "a positive integer"
    return f"{noun} {low[0]} {typed(low[1])}" if low else noun


def _parts(hint: Any) -> tuple[Any, list[tuple[str, float]], str | None]:
    if typing.get_origin(hint) is not Annotated:
        return hint, [], None
    bare, *meta = typing.get_args(hint)
    rules = [(op, float(bound)) for op, _, bound in (str(m).partition(" ") for m in meta)
             if op in _OPERATORS]
    said = [m for m in meta if isinstance(m, str) and m.partition(" ")[0] not in _OPERATORS]
    return bare, rules, said[0] if said else None


def fits(value: Any, hint: Any) -> bool:
    hint, rules, _ = _parts(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, arg) for arg in args)
    if origin is Literal:
        return any(value == arg and type(value) is type(arg) for arg in args)
    if origin in (tuple, list):
        ok = isinstance(value, (list, tuple)) and all(fits(v, args[0]) for v in value)
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is type(None):
        ok = value is None
    else:
        ok = isinstance(value, hint)
    measure = len(value) if ok and isinstance(value, (str, list, tuple)) else value
    return ok and all(_OPERATORS[op](measure, bound) for op, bound in rules)


def check(key: str, value: Any, hint: Any, example: object = None, what: str | None = None) -> Any:
    """`value` when it fits `hint`; else a ConfigError naming `key`, fix `key=<example>`."""
    if fits(value, hint):
        return value
    fix = None if example is None else str(example) if "=" in str(example) else f"{key}={example}"
    raise ConfigError(key, value, what or expected(hint), fix)


def read_fields(cls: type, raw: Mapping[str, Any] | None, prefix: str, listed_in: str) -> Any:
    """The dataclass `cls` from `raw`, each field checked against its hint, nested ones too."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    found = {}
    for key, value in dict(raw or {}).items():
        if key not in hints:
            raise ConfigError(f"{prefix}{key}", value, "one of " + ", ".join(hints),
                              f"see {listed_in}")
        default = None if fields[key].default is dataclasses.MISSING else fields[key].default
        if dataclasses.is_dataclass(hints[key]):
            check(f"{prefix}{key}", value, Mapping | None, "{}", "a mapping of its settings")
            found[key] = read_fields(hints[key], value, f"{prefix}{key}.", listed_in)
            continue
        check(f"{prefix}{key}", value, hints[key], typed(default))
        found[key] = tuple(value) if isinstance(value, list) else value
    return cls(**found)


def typed(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, (list, tuple)):
        return f"[{','.join(map(str, value))}]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:.3g}" if isinstance(value, float) else str(value)


# The shapes preset constructors use (they run without a config too: ProfileSession, tests).
def boolean(key: str, value: Any) -> bool:
    return check(key, value, bool, "true")


def non_negative_int(key: str, value: Any, example: object = 2, what: str | None = None) -> int:
    return check(key, value, NonNegativeInt, example, what)


def positive_int(key: str, value: Any, example: object = 1, what: str | None = None) -> int:
    return check(key, value, PositiveInt, example, what)


def positive_number(key: str, value: Any, example: object = 1.0, what: str | None = None) -> float:
    return float(check(key, value, PositiveNumber, example, what))


def one_of(key: str, value: Any, allowed: Sequence[str], example: object = None) -> Any:
    return check(key, value, Literal[tuple(allowed)], allowed[0] if example is None else example)


def list_of(key: str, values: Any, allowed: Sequence[str], example: str,
            allow_empty: bool = False) -> list[Any]:
    values = [values] if isinstance(values, str) else list(values)
    items = Annotated[tuple[Literal[tuple(allowed)], ...], ">= 0" if allow_empty else ">= 1",
                      "a list of " + ", ".join(allowed) + ("" if allow_empty else " (at least one)")]
    return list(check(key, values, items, example))


def parsed_number(key: str, value: object, integer: bool = False, allow_zero: bool = False,
                  example: object = 10) -> float:
    """`value` as a finite number > 0 (>= 0 with allow_zero), parsed: ${oc.env:...} gives strings."""
    try:
        number: Any = None if isinstance(value, bool) else (int if integer else float)(str(value))
    except ValueError:
        number = None
    hint = Annotated[int if integer else float, ">= 0" if allow_zero else "> 0"]
    if not fits(number, hint):
        raise ConfigError(key, value, expected(hint), f"{key}={example}")
    return number
