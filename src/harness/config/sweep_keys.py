"""Which keys a multirun varies and over which values, from its overrides and sweeper params."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.config.overrides import ROUND_KEY, as_typed, parse_overrides


def split_sweep(overrides: Iterable[str], sweeper_params: Mapping[str, Any] | None = None
                ) -> tuple[dict[str, list[str]], list[str]]:
    """({swept key as typed: its values}, every other override), from sweeper params then the command line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    found: dict[str, list[str]] = {}
    fixed: list[str] = []
    params = [f"{k}={v}" for k, v in (sweeper_params or {}).items()]
    for override in OverridesParser.create().parse_overrides([*params, *overrides]):
        if override.is_sweep_override():
            found[override.get_key_element()] = [v.lower() if v in ("True", "False") else v
                                                 for v in map(str, override.sweep_string_iterator())]
        else:
            fixed.append(override.input_line)
    return found, fixed


def swept_values(overrides: Iterable[str],
                 sweeper_params: Mapping[str, Any] | None = None) -> dict[str, list[str]]:
    """split_sweep's swept keys without their +/~ prefix."""
    return {k.lstrip("+~"): v for k, v in split_sweep(overrides, sweeper_params)[0].items()}


def swept_values_of(config: Any) -> dict[str, list[str]]:
    """The swept keys and values of a multirun's composed config."""
    hydra = config.hydra
    params = hydra.sweeper.get("params") if "sweeper" in hydra else None
    return swept_values(as_typed(hydra.overrides.task), params or {})


_NOT_BARE = ("true", "false", "null", "none", "(default)")


def short_setting(key: str, value: str) -> str:
    """'precision', 'bf16' -> 'bf16'; 'batch_size', '8' -> 'batch_size=8' (a number needs its key)."""
    try:
        float(value)
    except ValueError:
        if value.lower() not in _NOT_BARE:
            return value
    return f"{key}={value}"


def job_label(overrides: Iterable[str], swept: Iterable[str]) -> str:
    """What tells a job of a sweep apart ('batch_size=8,bf16 (round 1)'); all overrides if none swept."""
    settings = parse_overrides(overrides)
    swept = [key for key in swept if key in settings and key != ROUND_KEY]
    parts = ([short_setting(key, settings[key]) for key in swept] if swept
             else [f"{k}={v}" for k, v in settings.items() if k != ROUND_KEY])
    return ",".join(parts) + (f" (round {settings[ROUND_KEY]})" if ROUND_KEY in settings else "")


# MLflow's runs table shows about 14 characters of a child run's name.
SHORT_KEYS = {"batch_size": "bs", ROUND_KEY: "r"}


def short_key(key: str) -> str:
    """'batch_size' -> 'bs', 'data.seq_len' -> 'seq_len'."""
    return SHORT_KEYS.get(key, key.rsplit(".", 1)[-1])


def run_name(overrides: Iterable[str], swept: Iterable[str]) -> str:
    """A sweep job's MLflow run name, short: 'bs=8 bf16 r1'."""
    settings = parse_overrides(overrides)
    swept = [key for key in swept if key in settings and key != ROUND_KEY]
    parts = [short_setting(short_key(key), settings[key]) for key in swept]
    parts += [f"r{settings[ROUND_KEY]}"] if ROUND_KEY in settings else []
    return " ".join(parts) or job_label(overrides, [])


def sweep_run_name(swept: Iterable[str], named: str | None = None) -> str:
    """The sweep's parent run: 'bs x precision (sweep)', or 'physicsnemo (sweep)'."""
    return f"{named or ' x '.join(short_key(key) for key in swept) or 'sweep'} (sweep)"
