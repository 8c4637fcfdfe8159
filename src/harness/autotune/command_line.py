"""The space from the command line (docs/autotune.md, "The space"): the named sweep's default
space fitted to the machine, overridden key by key; an unsearchable space refused before compute."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from harness.autotune.settings import Settings
from harness.autotune.space import (
    ABSENT,
    BATCH,
    CHECKPOINT_KEY,
    GlobalBatch,
    Key,
    Space,
    SpaceError,
    as_number,
    check_space,
    normal,
    role_of,
)
from harness.config.knobs import Here, check_device, runnable

GLOBAL_BATCH_KEY = "global_batch_size"

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
          settings: Settings, here: Here, blocks: Callable[[], str | None] | None = None
          ) -> Parsed:
    """The space and fixed overrides of this sweep; SpaceError or ConfigError if unsearchable.
    `blocks()`: the model's repeated blocks in a few words (None: none), asked only if needed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    default = parser.parse_overrides([f"{k}={v}" for k, v in (params or {}).items()])
    entries: dict[str, tuple[str, Any, bool]] = {}  # bare key -> (key as typed, override, a line)
    for n, override in enumerate([*default, *parser.parse_overrides(arguments)]):
        key = override.get_key_element()
        entries.pop(key.lstrip("+~"), None)  # a later override of the key replaces an earlier one
        entries[key.lstrip("+~")] = (key, override, n < len(default))
    if owned := [key for key in entries if key in OWNED]:
        raise SpaceError(f"{owned[0]}: autotune sets it on every job. Fix: drop it; use {OWNED[owned[0]]}")
    keys, fixed, notes = [], [], []  # notes: what the default space left out or dropped, and why
    recipe = global_batch(config, entries.get(GLOBAL_BATCH_KEY))
    for key, override, from_params in entries.values():
        if not override.is_sweep_override():
            fixed.append(override.input_line or f"{key}={override.get_value_element_as_str()}")
        elif from_params and config_value(config, key.lstrip("+~")) is None:
            group, _, leaf = f".{key.lstrip('+~')}".rpartition(".")  # data.num_workers, mostly
            notes.append(f"{key} left out of the default space: the{group.replace('.', ' ')}"
                         f" config has no {leaf}")
        elif not from_params or key != CHECKPOINT_KEY or checkpointing(recipe, blocks, notes):
            made = _key(key, override, config, settings)
            made = adapt(made, here, notes) if from_params else made
            if not from_params and key.lstrip("+~") == CHECKPOINT_KEY:
                made = checkpointing_listed(made, blocks, notes)
                if len(made.values) == 1:  # one value (false alone, true dropped): every job's
                    fixed.append(f"{key}={made.values[0]}")
                    continue
            if made is not None and made.role == BATCH and recipe is not None:
                made = micro_batches(made, recipe, from_params, notes)
            keys += [made] if made is not None else []
    if recipe is not None and not any(k.role == BATCH for k in keys):
        recipe = replace(recipe, batch_size=_int(config_value(config, "batch_size")))
    space = Space(tuple(keys), recipe)
    check_space(space)
    check_device({k.name: list(k.listed()) for k in space.keys}, here)
    return Parsed(space, fixed, notes)


def _key(name: str, override: Any, config: Any, settings: Settings) -> Key:
    bare = name.lstrip("+~")
    role = role_of(bare, settings.loader_keys)
    default = config_value(config, bare)
    if name.startswith("~"):
        raise SpaceError(f"{name}: a deletion cannot be searched. Fix: give {bare} values, e.g. {bare}=a,b")
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
    value = OmegaConf.select(config, key, default=sentinel, throw_on_missing=False,
                             throw_on_resolution_failure=False)  # resolved only inside a job: none
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
    if len(kept) == len(listed):
        return key
    notes.append(f"{key.name}: {', '.join(v for v in listed if v not in kept)} left out of the"
                 f" default space: {why}")
    return Key(key.name, key.role, key.default, values=tuple(kept)) if kept else None


def _int(value: str | None) -> int | None:
    number = as_number(value) if value is not None else None
    return int(number) if number is not None and number.is_integer() else None


def global_batch(config: Any, entry: tuple[str, Any, bool] | None) -> GlobalBatch | None:
    """The recipe's global batch (global_batch_size), its world size read as a job reads it;
    None without one. A global batch autotune cannot keep is refused (SpaceError)."""
    from harness.config.global_batch import world_size

    if entry is not None and entry[1].is_sweep_override():
        raise SpaceError(f"{GLOBAL_BATCH_KEY}: autotune keeps a recipe's global batch (the"
                         " learning rate was tuned for it) and searches how to run it. Fix: one"
                         f" value, e.g. {GLOBAL_BATCH_KEY}=256; one autotune sweep per global batch")
    size = _int(config_value(config, GLOBAL_BATCH_KEY))
    if size is None or size < 1:
        return None  # null, or a value the jobs' own check refuses in one line
    ranks = world_size(config.get("trainer"))
    if ranks is None:
        raise SpaceError(f"{GLOBAL_BATCH_KEY}={size}: autotune splits it over the ranks, and"
                         f" trainer.devices={config_value(config, 'trainer.devices')} says no count."
                         " Fix: trainer.devices=N (a count, a list of ids or auto)")
    if size % ranks:
        nearest = max(ranks, round(size / ranks) * ranks)
        raise SpaceError(f"{GLOBAL_BATCH_KEY}={size} does not split over {ranks} ranks: every"
                         f" rank takes whole micro-batches. Fix: {GLOBAL_BATCH_KEY}={nearest}")
    return GlobalBatch(size, ranks)


def micro_batches(key: Key, recipe: GlobalBatch, from_params: bool, notes: list[str]) -> Key:
    """The batch_size line at a global batch: the default space's line and an interval become the
    divisors per rank within their ends (noted); a listed value that does not divide is refused."""
    where = (f"{GLOBAL_BATCH_KEY}={recipe.size}" + (f" on {recipe.ranks} ranks ({recipe.per_rank}"
                                                    " a rank)" if recipe.ranks > 1 else ""))
    numbers = [int(float(v)) for v in key.listed() if _int(v) is not None and _int(v) > 0]
    if not numbers:
        return key  # check_space says what is wrong with the values
    if not from_params and key.interval is None:
        if bad := [n for n in numbers if not recipe.divides(n)]:
            fits = recipe.divisors(min(numbers), max(numbers)) or recipe.divisors()
            raise SpaceError(
                f"batch_size={bad[0]} does not divide {where}: every optimizer step takes whole"
                f" micro-batches (batch_size x accumulation{' x ranks' if recipe.ranks > 1 else ''}"
                f" = {recipe.size}). Fix: batch_size={','.join(map(str, fits))}, or another"
                f" {GLOBAL_BATCH_KEY}")
    else:
        low, high = (key.interval if key.interval is not None else (min(numbers), max(numbers)))
        fits = recipe.divisors(low, high)
        if not fits:
            raise SpaceError(f"batch_size={low}..{high}: no micro-batch in it divides {where}."
                             f" Fix: batch_size={','.join(map(str, recipe.divisors()[-4:]))}")
        dropped = [str(n) for n in numbers if n not in fits]
        notes.append(f"batch_size: the micro-batches that divide {where}: {', '.join(map(str, fits))}"
                     + (f" ({', '.join(dropped)} left out)" if dropped else ""))
        key = Key(key.name, key.role, key.default, values=tuple(map(str, fits)))
    if (default := _int(key.default)) is not None and not recipe.divides(default):
        nearest = key.start()  # the space's value nearest it: every value divides
        notes.append(f"batch_size: the config's {default} does not divide {where}; the default"
                     f" configuration runs batch_size={nearest}")
        key = Key(key.name, key.role, nearest, key.values, key.interval)
    return key


NO_BLOCK = ("the model has no repeated block to wrap (no ModuleList or Sequential of one class of"
            " blocks, no _no_split_modules)")


def _found_blocks(blocks: Callable[[], str | None] | None) -> tuple[str | None, str | None]:
    """(the model's repeated blocks in a few words or None, why the model could not be built)."""
    try:
        return (blocks() if blocks is not None else None), None
    except Exception as err:  # a model that cannot be built outside its job
        return None, str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def checkpointing(recipe: GlobalBatch | None, blocks: Callable[[], str | None] | None,
                  notes: list[str]) -> bool:
    """Whether the default space's activation_checkpointing line is searched (at a global
    batch, on a model with repeated blocks); why not, or which blocks, in one note."""
    leave = f"{CHECKPOINT_KEY} left out of the default space"
    if recipe is None:
        notes.append(f"{leave}: it is searched at a global batch ({GLOBAL_BATCH_KEY}=N), where"
                     " checkpointing's recompute can buy a larger micro-batch of the same step")
        return False
    found, unbuilt = _found_blocks(blocks)
    if unbuilt is not None:
        notes.append(f"{leave}: the model could not be built here to look for its repeated"
                     f" blocks ({unbuilt}); to search it: {CHECKPOINT_KEY}=false,true")
    elif not found:
        notes.append(f"{leave}: {NO_BLOCK}")
    else:
        notes.append(f"{CHECKPOINT_KEY}: false, true searched: the model's repeated blocks are {found}")
    return bool(found)


def checkpointing_listed(key: Key, blocks: Callable[[], str | None] | None, notes: list[str]) -> Key:
    """A typed activation_checkpointing list without `true` (noted) where the model provably has no
    repeated block: it would run as `false` does. A model not buildable here proves nothing; `true`
    alone (`choice(true)`) is one value, which fixes the key as typed."""
    if ("true" not in key.values or key.values == ("true",) or blocks is None
            or _found_blocks(blocks) != (None, None)):
        return key
    notes.append(f"{CHECKPOINT_KEY}=true dropped before any job: {NO_BLOCK}, so it would run"
                 f" as {CHECKPOINT_KEY}=false. Fix: name the classes to wrap,"
                 f" {CHECKPOINT_KEY}=[MyBlock] (docs/own-model.md)")
    return Key(key.name, key.role, key.default, values=tuple(v for v in key.values if v != "true"))
