"""Checks of the composed config as a whole, before any value is used: every interpolation
resolves, and no top-level key was added by a typo."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from harness.config.overrides import ROUND_KEY
from harness.errors import ConfigError, first_line

# Top-level keys harness itself adds with `+`: the rounds sweeper's round of a job.
ADDED_BY_HARNESS = (ROUND_KEY,)
# How close a new key must be to an existing one to be taken for its typo (difflib's ratio).
TYPO_CUTOFF = 0.75


def check_resolves(cfg: DictConfig) -> None:
    """Raise a ConfigError naming the first key whose value does not resolve (`${nope}`,
    a missing `???`). Top-level values first: `batch_size=${nope}` is named as batch_size,
    not as data.batch_size, which refers to it. The `hydra` node is Hydra's own."""
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
    """The value of `key` as written (the interpolation itself) in the unresolved config."""
    node: Any = written
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def check_added_keys(overrides: Iterable[str], keys: Iterable[str]) -> None:
    """Refuse `+batchsize=8`: a `+` override that adds a top-level key close to one the
    config has (Hydra suggests `+key=` for any unknown key, and the run would go on with the
    value ignored). Nested keys (`+model.fail_at=2`, arguments of a constructor) and
    `++key=` (add or override, deliberately) pass."""
    added = {}
    for override in overrides:
        key, _, value = str(override).partition("=")
        if key.startswith("+") and not key.startswith("++") and "." not in key:
            added[key[1:]] = value
    known = [k for k in map(str, keys) if k not in added]
    for name, value in added.items():
        if name in ADDED_BY_HARNESS:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=TYPO_CUTOFF)
        if close:
            raise ConfigError(f"+{name}", value,
                              f"a key the config has (did you mean {close[0]}?)",
                              f"{close[0]}={value} (or ++{name}={value} to add it anyway)")
