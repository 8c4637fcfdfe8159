"""The space from the command line (docs/autotune.md, "The space"): the named sweep's default
space fitted to the machine, overridden key by key; an unsearchable space refused before compute."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.autotune.settings import Settings
from harness.autotune.space import ABSENT, Key, Space, SpaceError, check_space, normal, role_of
from harness.config.knobs import Here, check_device, runnable

# Keys autotune sets on every job, and what to use instead.
OWNED = {
    "mode": "autotune.objective=training|inference|both",
    "repeat": "autotune.confirm_rounds (and autotune.max_rounds)",
    **dict.fromkeys(("trainer.max_steps", "trainer.max_epochs", "trainer.limit_train_batches",
                     "trainer.limit_predict_batches"), "autotune.probe_steps and autotune.growth"),
    "trainer.limit_val_batches": "nothing: validation is no part of the objective",
    "profiler.speed.warmup_steps": "autotune.warmup_steps",
}


@dataclass
class Parsed:
    space: Space
    fixed: list[str]  # every other override, as typed: passed to every job
    notes: list[str] = field(default_factory=list)  # what the default space left out, and why


def parse(params: Mapping[str, Any] | None, arguments: list[str], config: Any,
          settings: Settings, here: Here) -> Parsed:
    """The space and fixed overrides of this sweep; SpaceError or ConfigError if unsearchable."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    default = parser.parse_overrides([f"{k}={v}" for k, v in (params or {}).items()])
    entries: dict[str, tuple[str, Any, bool]] = {}  # bare key -> (key as typed, override, a line)
    for n, override in enumerate([*default, *parser.parse_overrides(arguments)]):
        key = override.get_key_element()
        entries.pop(key.lstrip("+~"), None)  # a later override of the key replaces an earlier one
        entries[key.lstrip("+~")] = (key, override, n < len(default))
    notes: list[str] = []
    keys, fixed = [], []
    for key, override, from_params in entries.values():
        if not override.is_sweep_override():
            fixed.append(override.input_line or f"{key}={override.get_value_element_as_str()}")
        elif from_params and config_value(config, key.lstrip("+~")) is None:
            group, _, leaf = f".{key.lstrip('+~')}".rpartition(".")  # data.num_workers, mostly
            notes.append(f"{key} left out of the default space: the{group.replace('.', ' ')}"
                         f" config has no {leaf}")
        else:
            made = _key(key, override, config, settings)
            made = adapt(made, here, notes) if from_params else made
            keys += [made] if made is not None else []
    owned = [bare for key in [*(k.name for k in keys), *(line.partition("=")[0] for line in fixed)]
             if (bare := key.lstrip("+~")) in OWNED]
    if owned:
        raise SpaceError(f"{owned[0]}: autotune sets it on every job. Fix: drop it; use {OWNED[owned[0]]}")
    space = Space(tuple(keys))
    check_space(space)
    check_device({k.name: list(k.listed()) for k in space.keys}, here)
    return Parsed(space, fixed, notes)


def _key(name: str, override: Any, config: Any, settings: Settings) -> Key:
    bare = name.lstrip("+~")
    role = role_of(bare, settings.loader_keys)
    default = config_value(config, bare)
    if name.startswith("~"):
        raise SpaceError(f"{name}: a deletion cannot be searched. Fix: give {bare} values,"
                         f" e.g. {bare}=a,b")
    if default is None and not name.startswith("+"):
        raise SpaceError(f"{bare} is not a key of the config. Fix: check the spelling"
                         f" (`harness --cfg job` lists the keys), or add it with +{bare}=...")
    if override.is_interval_sweep():
        interval = override.value()
        lo, hi = interval.start, interval.end
        if interval.tags or not (float(lo).is_integer() and float(hi).is_integer()):
            raise SpaceError(f"{bare}={override.input_line.partition('=')[2]}: autotune searches"
                             f" settings, not a float range. Fix: give values, e.g. {bare}=a,b,c")
        return Key(name, role, default or ABSENT, interval=(int(lo), int(hi)))
    values = tuple(dict.fromkeys(normal(v) for v in override.sweep_string_iterator()))
    return Key(name, role, default or ABSENT, values=values)


def config_value(config: Any, key: str) -> str | None:
    """The config's value of `key` as the command line types it; None when it has no such key."""
    from omegaconf import OmegaConf

    sentinel = object()
    try:
        value = OmegaConf.select(config, key, default=sentinel, throw_on_missing=False)
    except Exception:  # an interpolation that resolves only inside a job
        value = OmegaConf.select(config, key, default=sentinel, throw_on_resolution_failure=False)
    if value is sentinel:
        return None
    return "null" if value is None else normal(value)


def adapt(key: Key, here: Here, notes: list[str]) -> Key | None:
    """A line of the default space fitted to where the jobs run, drops noted; None: left out."""
    listed = key.listed()
    kept, why = runnable(key.name, listed, here)
    if key.name == "data.num_workers" and here.cpus is not None:
        kept = [v for v in listed if not v.isdigit() or int(v) <= here.cpus]
        why = f"a job has {here.cpus} CPUs"
    if len(kept) < len(listed):
        dropped = [v for v in listed if v not in kept]
        notes.append(f"{key.name}: {', '.join(dropped)} left out of the default space: {why}")
    if not kept and key.interval is None:
        return None
    return key if len(kept) == len(listed) else Key(key.name, key.role, key.default, values=tuple(kept))

