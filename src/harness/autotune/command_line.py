"""The space from the command line: Hydra's sweep syntax read the way the grid sweeper reads
it, the named sweep's default space fitted to the machine, and what autotune refuses before
any compute.

The grid's inputs: `hydra.sweeper.params` (the named sweep's default space), then the
command line's overrides. A sweep override (`batch_size=8,16,32`, `choice(...)`,
`range(...)`, an integer `interval(lo,hi)`) makes a key searched; the command line's sweep
overrides are the whole space when there are any (the default space applies only to a
command line without one); a single value fixes a key (it is passed to every job, and
replaces that key's default line); every other override is passed to every job as typed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.autotune.settings import Settings
from harness.autotune.space import ABSENT, Key, Space, check_space, normal, role_of
from harness.errors import CONFIG_STATUS, HarnessError

# Keys autotune sets on every job, and what to use instead.
OWNED = {
    "mode": "autotune.objective=training|inference|both",
    "repeat": "autotune.confirm_rounds (and autotune.max_rounds)",
    "trainer.max_steps": "autotune.probe_steps and autotune.growth",
    "trainer.max_epochs": "autotune.probe_steps and autotune.growth",
    "trainer.limit_train_batches": "autotune.probe_steps and autotune.growth",
    "trainer.limit_val_batches": "nothing: validation is no part of the objective",
    "trainer.limit_predict_batches": "autotune.probe_steps and autotune.growth",
    "profiler.speed.warmup_steps": "autotune.warmup_steps",
}
FP16 = ("fp16", "16", "16-mixed")
OFF = ("false", "off", "none", "no")


class SpaceError(HarnessError):
    """The space cannot be searched: one line naming the key and the fix (exit 2)."""

    exit_status = CONFIG_STATUS


@dataclass(frozen=True)
class Here:
    """What autotune knows of the machine the jobs run on, for the default space and the
    device-bound values (`here`: they run on this machine)."""

    here: bool = True
    cuda: bool = False
    cxx: bool = True
    cpus: int | None = None


@dataclass
class Parsed:
    space: Space
    fixed: list[str]  # every other override, as typed: passed to every job
    notes: list[str] = field(default_factory=list)  # what the default space left out, and why


def parse(params: Mapping[str, Any] | None, arguments: list[str], config: Any,
          settings: Settings, here: Here) -> Parsed:
    """The space and the fixed overrides of this sweep (module docstring); SpaceError for a
    space autotune cannot search. `config` is the sweep's composed config (for each key's
    default and whether it exists). The named sweep's lines are fitted to the machine the
    jobs run on (`adapt`); values typed on the command line are taken as they are, and one
    the jobs cannot run is refused."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    given = parser.parse_overrides(arguments)
    default = parser.parse_overrides([f"{k}={v}" for k, v in (params or {}).items()])
    if any(o.is_sweep_override() for o in given):  # the command line gives the space
        default = [o for o in default if not o.is_sweep_override()]
    entries: dict[str, tuple[str, Any, bool]] = {}  # bare key -> (key as typed, override, from params)
    for n, override in enumerate([*default, *given]):
        key = override.get_key_element()
        bare = key.lstrip("+~")
        entries.pop(bare, None)  # a later override of the key replaces an earlier one
        entries[bare] = (key, override, n < len(default))
    notes: list[str] = []
    keys, fixed = [], []
    for key, override, from_params in entries.values():
        if not override.is_sweep_override():
            fixed.append(override.input_line or f"{key}={override.get_value_element_as_str()}")
            continue
        made = _key(key, override, config, settings)
        made = adapt(made, config, here, notes) if from_params else made
        if made is not None:
            keys.append(made)
    _check_owned([k.name for k in keys], [line.partition("=")[0] for line in fixed])
    space = Space(tuple(keys))
    try:
        check_space(space)
    except ValueError as err:
        raise SpaceError(str(err)) from None
    _check_device(space, here)
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
    """The config's value of `key` as the command line types it; None when the config has
    no such key."""
    from omegaconf import OmegaConf

    sentinel = object()
    try:
        value = OmegaConf.select(config, key, default=sentinel, throw_on_missing=False)
    except Exception:  # an interpolation that resolves only inside a job
        value = OmegaConf.select(config, key, default=sentinel, throw_on_resolution_failure=False)
    if value is sentinel:
        return None
    return "null" if value is None else normal(value)


def adapt(key: Key, config: Any, here: Here, notes: list[str]) -> Key | None:
    """A line of the named sweep's default space fitted to where the jobs run: precisions
    the device runs, compile only with a C++ compiler, loader workers only where the data
    config has them and up to the CPUs a job has. None: the key is left out."""
    listed = key.listed()
    kept = listed
    if key.name == "precision" and here.here and not here.cuda:
        kept = tuple(v for v in listed if v.lower() not in FP16)
        why = "fp16 runs only on CUDA"
    elif key.name == "compile" and here.here and not here.cxx:
        kept = tuple(v for v in listed if v.lower() in OFF)
        why = "no C++ compiler on PATH here, which TorchInductor needs (set CXX, or install g++)"
    elif key.name == "data.num_workers":
        if config_value(config, key.name) is None:
            notes.append("data.num_workers left out: the data config has no num_workers")
            return None
        most = here.cpus
        kept = tuple(v for v in listed if most is None or not v.isdigit() or int(v) <= most)
        why = f"a job has {most} CPUs"
    if kept != listed:
        dropped = [v for v in listed if v not in kept]
        notes.append(f"{key.name}: {', '.join(dropped)} left out of the default space: {why}")
    if len(kept) < 2 and key.interval is None:
        return None if not kept else Key(key.name, key.role, key.default, values=kept)
    return key if kept == listed else Key(key.name, key.role, key.default, values=kept)


def _check_owned(searched: list[str], fixed: list[str]) -> None:
    for key in [*searched, *fixed]:
        bare = key.lstrip("+~")
        if bare in OWNED:
            raise SpaceError(f"{bare}: autotune sets it on every job. Fix: drop it; use"
                             f" {OWNED[bare]}")


def _check_device(space: Space, here: Here) -> None:
    """Values the jobs' device cannot run, when the jobs run on this machine."""
    if not here.here:
        return
    for key in space.keys:
        if key.role == "precision" and not here.cuda:
            fp16 = [v for v in key.listed() if v.lower() in FP16]
            if fp16:
                raise SpaceError(f"precision={fp16[0]}: this machine has no GPU; fp16 runs only on"
                                 " CUDA (the jobs would be invalid). Fix: drop it, e.g."
                                 " precision=fp32,bf16, or run the jobs on a GPU node"
                                 " (hydra/launcher=slurm)")
        if key.role == "compile" and not here.cxx and any(
                v.lower() not in OFF for v in key.listed()):
            raise SpaceError("compile=true: no C++ compiler on PATH, which TorchInductor needs."
                             " Fix: install g++ (or set CXX), or drop compile from the space")
