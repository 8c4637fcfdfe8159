"""Checks of the composed config as a whole, before compute: a job's, and a sweep's values."""

from __future__ import annotations

import contextlib
import difflib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from harness.config.overrides import ROUND_KEY
from harness.errors import ConfigError, first_line

# Top-level keys harness itself adds with `+`: the rounds sweeper's round of a job.
ADDED_BY_HARNESS = (ROUND_KEY,)
# How close a new key must be to an existing one to be taken for its typo (difflib's ratio).
TYPO_CUTOFF = 0.75


def check_resolves(cfg: DictConfig) -> None:
    """Raise a ConfigError naming the first key that does not resolve (`${nope}`, `???`)."""
    from omegaconf.errors import OmegaConfBaseException

    written = OmegaConf.to_container(cfg, resolve=False)
    keys = [str(k) for k in cfg if k != "hydra"]
    scalars_first = sorted(keys, key=lambda k: isinstance(written.get(k), (dict, list)))
    for key in scalars_first:
        try:
            value = cfg[key]
            if isinstance(value, (DictConfig, ListConfig)):
                OmegaConf.to_container(value, resolve=True)
        except OmegaConfBaseException as err:
            where = str(getattr(err, "full_key", None) or key)
            raise ConfigError(
                where, _raw(written, where), f"a value that resolves, but {first_line(err, False)}",
                f"give {where} a value, or an interpolation ${{...}} of a key that exists",
            ) from None


def _raw(written: dict[str, Any], key: str) -> Any:
    node: Any = written
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


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
            raise ConfigError(f"+{name}", value,
                              f"a key the config has (did you mean {close[0]}?)",
                              f"{close[0]}={value} (or ++{name}={value} to add it anyway)")


def check_job(cfg: DictConfig, overrides: list[str]) -> list[tuple[str, Any, DictConfig]]:
    """A job's config checked before compute (but its profiler list); returns check_targets' list."""
    from harness.config.arguments import check_arguments
    from harness.config.knobs import check_trainer_keys, read_knobs
    from harness.config.targets import check_targets

    read_knobs(cfg)
    check_added_keys(overrides, cfg.keys())
    check_trainer_keys(cfg)
    with code_dir_imports(cfg):
        targets = check_targets(cfg)
        check_arguments(targets)
    return targets


@contextlib.contextmanager
def code_dir_imports(cfg: DictConfig) -> Iterator[None]:
    """Within the block `code_dir` comes first on the import path, for a sweep's checks before
    its jobs; the modules its top-level entries gave are forgotten after, since the next
    value's tree may hold modules of the same names (a job's own fresh process keeps them)."""
    from harness.config.knobs import CODE_DIR_CHILD, code_dir_of

    directory = code_dir_of(cfg)
    if directory is None or os.environ.get(CODE_DIR_CHILD) == "1":
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
    from hydra.core.hydra_config import HydraConfig

    holder = HydraConfig.instance()
    before = holder.cfg
    holder.set_config(cfg)
    try:
        yield
    finally:
        holder.cfg = before


def check_values(config: DictConfig, values: dict[str, list[str]], fixed: list[str],
                 check: Callable[[DictConfig, list[str]], Any] = check_job,
                 loader: Any = None) -> None:
    """Before a sweep's first job: each swept value composed with `fixed` and checked by `check`."""
    from hydra.core.global_hydra import GlobalHydra

    loader = loader or GlobalHydra.instance().config_loader()
    for key, listed in values.items():
        for value in listed:
            overrides = [*fixed, f"{key}={value}"]
            composed = loader.load_sweep_config(config, overrides)
            with hydra_config(composed):
                check(composed, overrides)
