"""Which keys a multirun varies and over which values, from its overrides and sweeper params."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def swept_values(overrides: Iterable[str],
                 sweeper_params: Mapping[str, Any] | None = None) -> dict[str, list[str]]:
    """Key -> values, for keys with several: `batch_size=1,2,4` or `range(...)` on the command
    line, and every key of `hydra.sweeper.params` (named sweeps set those), in that order.
    Values are as Hydra's sweeper writes them into each job's overrides."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    found: dict[str, list[str]] = {}
    params = [f"{k}={v}" for k, v in (sweeper_params or {}).items()]
    for override in parser.parse_overrides([*params, *overrides]):
        if override.is_sweep_override():
            key = override.get_key_element().lstrip("+~")
            found[key] = [v.lower() if v in ("True", "False") else v
                          for v in map(str, override.sweep_string_iterator())]
    return found


def swept_keys(overrides: Iterable[str], sweeper_params: Mapping[str, Any] | None = None) -> list[str]:
    return list(swept_values(overrides, sweeper_params))


def swept_values_of(config: Any) -> dict[str, list[str]]:
    """The swept keys and values of a multirun's composed config (`config.hydra` present)."""
    hydra = config.hydra
    params = hydra.sweeper.get("params") if "sweeper" in hydra else None
    from harness.config.composed import as_typed

    return swept_values(as_typed(hydra.overrides.task), params or {})


def swept_keys_of(config: Any) -> list[str]:
    return list(swept_values_of(config))
