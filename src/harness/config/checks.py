"""The one check of a config value: `check` validates it against its type hint with pydantic (loaded on the
first check, never for --help), the constraint written in the hint (`Annotated[int, Ge(1)]`, `Literal[...]`),
or raises one ConfigError naming the key and the fix. Harness's own hints are judged strictly: a bool is no
int, a string no number (unless its hint says `Field(strict=False)`), an int is a float, no inf or nan."""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt, Lt, MinLen

from harness.errors import ConfigError

PositiveInt = Annotated[int, Ge(1)]
NonNegativeInt = Annotated[int, Ge(0)]
PositiveNumber = Annotated[float, Gt(0)]
Fraction = Annotated[float, Ge(0), Lt(1)]
Share = Annotated[float, Gt(0), Lt(1)]
_BOUNDS = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"),
           "less_than": ("<", "lt"), "less_than_equal": ("<=", "le")}


def at_least(bound: int) -> Any:
    """The hint of an integer >= `bound`."""
    return Annotated[int, Ge(bound)]


def one_or_more(allowed: Sequence[str], least: int = 1) -> Any:
    """The hint of a list of `allowed` names with `least` items; a bare name stands for a list of one."""
    item = Literal[tuple(allowed)]
    return item | Annotated[Sequence[item], MinLen(least)]


@functools.lru_cache(maxsize=512)
def _adapter(hint: Any, lax: bool) -> Any:
    from pydantic import ConfigDict, TypeAdapter

    # lax: pydantic's own coercions, for users' constructors (YAML's `name: 2024` is a str too)
    config = ConfigDict(strict=not lax, allow_inf_nan=False, coerce_numbers_to_str=lax)
    try:
        return TypeAdapter(hint, config=config)
    except Exception:  # PydanticSchemaGenerationError and kin: an arbitrary class
        try:
            return TypeAdapter(hint)  # a type with a config of its own
        except Exception:
            return None


def check(key: str, value: Any, hint: Any, example: object = None, lax: bool = False) -> Any:
    """`value` as pydantic validates it against `hint`; else a ConfigError naming `key`, with
    pydantic's reason and the fix `key=<example>` (`example` itself when it holds a `=`)."""
    from pydantic import ValidationError

    try:
        adapter = _adapter(hint, lax)
    except TypeError:  # an unhashable hint
        adapter = _adapter.__wrapped__(hint, lax)
    if adapter is None:
        return value
    try:
        return adapter.validate_python(value)
    except ValidationError as err:
        fix = None if example is None else str(example) if "=" in str(example) else f"{key}={example}"
        raise ConfigError(key, value, _reason(err.errors(include_url=False)), fix) from None


def _reason(errors: list[Any]) -> str:
    """pydantic's errors as one phrase: 'a value >= 1 or 'auto''."""
    words: list[str] = []
    # A bare name or a list of them: the str is no list, but what it is not is the news.
    for error in [e for e in errors if e["type"] != "sequence_str"] or errors:
        kind, text = error["type"], error["msg"]
        if kind in _BOUNDS:
            sign, bound = _BOUNDS[kind]
            text = f"a value {sign} {typed(error['ctx'][bound])}"
        elif kind == "too_short":
            text = f"a list of at least {error['ctx']['min_length']} item(s)"
        for lead in ("Input should be ", "String should have ", "Value should have "):
            text = text.removeprefix(lead)
        if text not in words:
            words.append(text)
    return " or ".join(words)


def read_fields(cls: type, raw: Mapping[str, Any] | None, prefix: str, listed_in: str) -> Any:
    """The dataclass `cls` from `raw`, each field checked against its hint, nested ones too."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    found = {}
    for key, value in dict(raw or {}).items():
        if key not in hints:
            raise ConfigError(f"{prefix}{key}", value, "one of " + ", ".join(hints), f"see {listed_in}")
        default = None if fields[key].default is dataclasses.MISSING else fields[key].default
        if dataclasses.is_dataclass(hints[key]):
            check(f"{prefix}{key}", value, Mapping | None, "{}")
            found[key] = read_fields(hints[key], value, f"{prefix}{key}.", listed_in)
            continue
        check(f"{prefix}{key}", value, hints[key], typed(default))
        found[key] = tuple(value) if isinstance(value, list) else value
    return cls(**found)


def typed(value: Any) -> str:
    """`value` as a command line writes it: true, null, [a,b], 0.001."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, (list, tuple)):
        return f"[{','.join(map(str, value))}]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:.3g}" if isinstance(value, float) else str(value)
