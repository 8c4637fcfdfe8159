"""Check that every `_target_` imports before a run builds anything."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig

from harness.errors import ConfigError

REQUIRED_GROUPS = ("model", "data", "trainer")


def _nodes_with_targets(cfg: DictConfig) -> Iterator[tuple[str, Any]]:
    for group in ("model", "data", "trainer", "logger"):
        node = cfg.get(group)
        if isinstance(node, DictConfig) and "_target_" in node:
            yield group, node._target_
    presets = cfg.get("profiler")
    if isinstance(presets, DictConfig):
        for name, node in presets.items():
            if isinstance(node, DictConfig) and "_target_" in node:
                yield f"profiler.{name}", node._target_


def check_targets(cfg: DictConfig) -> None:
    """Raise a HarnessError naming the key of the first target that is missing or broken."""
    from hydra.utils import get_object

    # get_object logs its own multi-line error; ours below is the one the user needs.
    logging.getLogger("hydra.utils").setLevel(logging.CRITICAL)
    for group in REQUIRED_GROUPS:
        node = cfg.get(group)
        if not isinstance(node, DictConfig) or "_target_" not in node:
            raise ConfigError(
                f"{group}._target_", None, f"the class the '{group}' config builds",
                f"choose a preset ({group}=...) or set {group}._target_=package.module.Class",
            )
    for key, target in _nodes_with_targets(cfg):
        try:
            get_object(str(target))
        except Exception as err:  # ImportError, AttributeError, or errors raised by user code
            cause = str(err.__cause__ or err).splitlines()[0]
            raise ConfigError(
                f"{key}._target_", str(target), f"an importable class, but import failed: {cause}",
                f"point {key}._target_ at package.module.Class and check that its package is"
                " installed or on PYTHONPATH",
            ) from None
