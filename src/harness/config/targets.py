"""Check that every `_target_` imports before a run builds anything."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from harness.errors import ConfigError

REQUIRED_GROUPS = ("model", "trainer")


def start_directory() -> str:
    """The directory the command was started from (Hydra's original cwd in a job)."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        # hydra.job.chdir=true would have moved os.getcwd() into the run directory.
        cwd = OmegaConf.select(HydraConfig.get(), "runtime.cwd", default=None)
        if cwd:
            return str(cwd)
    return os.getcwd()


def put_start_directory_on_path() -> str:
    """Make `_target_`s in the start directory importable, as `python train.py` users expect.

    The `harness` console script puts its own bin directory first on sys.path, not the
    working directory, so `model._target_=mypkg.Net` run from the folder holding mypkg/
    would fail to import. DDP ranks > 0 start from the same directory (harness.launch.ddp)
    and call this too, through check_targets.
    """
    directory = start_directory()
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return directory


def uses_own_dataloaders(cfg: Any) -> bool:
    """`data=none` (or no data key): the LightningModule's own *_dataloader methods feed it."""
    node = cfg.get("data")
    return node is None or (isinstance(node, DictConfig) and len(node) == 0)


def callback_nodes(node: Any, key: str = "trainer.callbacks") -> Iterator[tuple[str, DictConfig]]:
    """(key, `_target_` node) of each callback in trainer.callbacks: one node, a list of them,
    or a dict of named ones (lightning-hydra-template's `callbacks` group); null entries skipped."""
    if isinstance(node, DictConfig) and "_target_" in node:
        yield key, node
    elif isinstance(node, DictConfig):
        for name, child in node.items():
            yield from callback_nodes(child, f"{key}.{name}")
    elif isinstance(node, ListConfig):
        for index, child in enumerate(node):
            yield from callback_nodes(child, f"{key}[{index}]")
    elif node is not None:
        raise ConfigError(key, node, "a callback node with a _target_, a list or a dict of them",
                          f"{key}=[{{_target_: lightning.pytorch.callbacks.LearningRateMonitor}}]")


def _nodes_with_targets(cfg: DictConfig) -> Iterator[tuple[str, Any]]:
    for group in ("model", "data", "trainer", "logger"):
        node = cfg.get(group)
        if isinstance(node, DictConfig) and "_target_" in node:
            yield group, node._target_
    trainer = cfg.get("trainer")
    if isinstance(trainer, DictConfig):
        for key, node in callback_nodes(trainer.get("callbacks")):
            yield key, node._target_
    presets = cfg.get("profiler")
    if isinstance(presets, DictConfig):
        for name, node in presets.items():
            if isinstance(node, DictConfig) and "_target_" in node:
                yield f"profiler.{name}", node._target_


def check_targets(cfg: DictConfig) -> None:
    """Raise a HarnessError naming the key of the first target that is missing or broken."""
    from hydra.utils import get_object

    start = put_start_directory_on_path()
    # get_object logs its own multi-line error; ours below is the one the user needs.
    logging.getLogger("hydra.utils").setLevel(logging.CRITICAL)
    for group in REQUIRED_GROUPS:
        node = cfg.get(group)
        if not isinstance(node, DictConfig) or "_target_" not in node:
            raise ConfigError(
                f"{group}._target_", None, f"the class the '{group}' config builds",
                f"choose a preset ({group}=...) or set {group}._target_=package.module.Class",
            )
    if not uses_own_dataloaders(cfg) and "_target_" not in cfg.data:
        raise ConfigError(
            "data._target_", None, "the LightningDataModule the 'data' config builds",
            "choose a preset (data=...), set data._target_=package.module.Class, or data=none"
            " to run the module on its own dataloaders",
        )
    for key, target in _nodes_with_targets(cfg):
        try:
            get_object(str(target))
        except Exception as err:  # ImportError, AttributeError, or errors raised by user code
            cause = str(err.__cause__ or err).splitlines()[0]
            raise ConfigError(
                f"{key}._target_", str(target), f"an importable class, but import failed: {cause}",
                f"point {key}._target_ at package.module.Class and check that its package is"
                f" installed, on PYTHONPATH or in the start directory {start}",
            ) from None
