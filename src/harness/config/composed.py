"""Checks of the composed config as a whole, before compute: a job's, and a sweep's values."""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.config.arguments import check_arguments, drop_replaced_arguments
from harness.config.knobs import Knobs, SweepSettings, check_ranks_fit, check_trainer_keys, read_knobs
from harness.config.overrides import ROUND_KEY
from harness.config.targets import check_one_profiler, check_targets, put_start_directory_on_path
from harness.errors import ConfigError, first_line

# Top-level keys harness itself adds with `+`: the rounds sweeper's round of a job.
ADDED_BY_HARNESS = (ROUND_KEY,)
# How close a new key must be to an existing one to be taken for its typo (difflib's ratio).
TYPO_CUTOFF = 0.75


def check_resolves(cfg: DictConfig) -> None:
    """Raise a ConfigError naming the first key that does not resolve (`${nope}`, `???`)."""
    written = OmegaConf.to_container(cfg, resolve=False)
    keys = [str(k) for k in cfg if k != "hydra"]
    for key in sorted(keys, key=lambda k: isinstance(written.get(k), (dict, list))):  # scalars first
        try:
            value = cfg[key]
            if isinstance(value, (DictConfig, ListConfig)):
                OmegaConf.to_container(value, resolve=True)
        except OmegaConfBaseException as err:
            where = str(getattr(err, "full_key", None) or key)
            raw = functools.reduce(lambda node, part: node.get(part) if isinstance(node, dict) else None,
                                   where.split("."), written)  # the value as written
            raise ConfigError(where, raw, f"a value that resolves, but {first_line(err, False)}",
                              f"give {where} a value, or an interpolation ${{...}} of a key that"
                              " exists") from None


def check_added_keys(overrides: Iterable[str], keys: Iterable[str]) -> None:
    """Refuse `+batchsize=8`: a `+` top-level key close to one the config has (it would be ignored)."""
    added = {}
    for override in overrides:
        key, _, value = str(override).partition("=")
        if key.startswith("+") and not key.startswith("++") and key[1:] not in ADDED_BY_HARNESS:
            added[key[1:]] = value
    known = [k for k in map(str, keys) if k not in added]
    for name, value in added.items():
        close = "." not in name and difflib.get_close_matches(name, known, n=1, cutoff=TYPO_CUTOFF)
        if close:
            raise ConfigError(f"+{name}", value, f"a key the config has (did you mean {close[0]}?)",
                              f"{close[0]}={value} (or ++{name}={value} to add it anyway)")


@dataclass(frozen=True)
class CheckedJob:
    """What the checks of a job found: its knobs, its sweep settings, its imported targets."""

    knobs: Knobs
    sweep: SweepSettings
    targets: list[tuple[str, Any, DictConfig]]  # (key, class, node) of each _target_


def check_job(cfg: DictConfig, overrides: list[str]) -> CheckedJob:
    """Every check of a job's config before compute, each a one-line ConfigError (docs/architecture.md)."""
    check_resolves(cfg)
    knobs, sweep = read_knobs(cfg), SweepSettings.read(cfg)
    check_added_keys(overrides, cfg.keys())
    check_trainer_keys(cfg)
    check_ranks_fit(cfg, knobs.scaling)
    with code_dir_imports(cfg):
        targets = check_targets(cfg)
        drop_replaced_arguments(targets, overrides)
        check_arguments(targets)
    check_one_profiler(targets)
    return CheckedJob(knobs, sweep, targets)


@contextlib.contextmanager
def code_dir_imports(cfg: DictConfig) -> Iterator[None]:
    """Within the block `code_dir` comes first on the import path, for a sweep's checks before
    its jobs; the modules its top-level entries gave are forgotten after, since the next
    value's tree may hold modules of the same names (a job's own fresh process keeps them)."""
    from harness.config.knobs import CODE_DIR_CHILD, code_dir_of

    directory = code_dir_of(cfg)
    if directory is None:
        yield
        return
    put_start_directory_on_path()  # there already, so the tree goes ahead of it
    if os.environ.get(CODE_DIR_CHILD) == "1":  # the job's own process: the tree stays first
        if str(directory) not in sys.path[:1]:
            sys.path.insert(0, str(directory))
        yield
        return
    before, where = set(sys.modules), str(directory)
    sys.path.insert(0, where)
    try:
        yield
    finally:
        sys.path.remove(where)
        for name in set(sys.modules) - before:  # not a .venv inside the tree: only its own
            top = name.partition(".")[0]
            file = Path(str(getattr(sys.modules[name], "__file__", None) or "/"))
            if any(file.is_relative_to(directory / entry) for entry in (top, f"{top}.py")):
                del sys.modules[name]


@contextlib.contextmanager
def hydra_config(cfg: DictConfig) -> Iterator[None]:
    """Within the block, `${hydra:...}` resolves against `cfg` (as in its job)."""
    holder = HydraConfig.instance()
    before = holder.cfg
    holder.set_config(cfg)
    try:
        yield
    finally:
        holder.cfg = before


def check_values(config: DictConfig, values: dict[str, list[str]], fixed: list[str],
                 check: Callable[[DictConfig, list[str]], Any] = check_job) -> None:
    """Before a sweep's first job: each swept value composed with `fixed` and checked by `check`."""
    loader = GlobalHydra.instance().config_loader()
    for key, listed in values.items():
        for value in listed:
            overrides = [*fixed, f"{key}={value}"]
            composed = loader.load_sweep_config(config, overrides)
            with hydra_config(composed):
                check(composed, overrides)
