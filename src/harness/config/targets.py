"""Every `_target_` imports, and the model and data are Lightning's kinds, before a build."""

from __future__ import annotations

import difflib
import importlib
import inspect
import logging
import os
import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness.config.arguments import target_nodes
from harness.errors import ConfigError

REQUIRED_GROUPS = ("model", "trainer")


def put_start_directory_on_path() -> str:
    """Make `_target_`s in the start directory importable, as `python train.py` users expect."""
    from hydra.core.hydra_config import HydraConfig

    # Hydra's runtime.cwd: hydra.job.chdir=true would have moved os.getcwd() into the run dir.
    directory = str((HydraConfig.initialized() and OmegaConf.select(
        HydraConfig.get(), "runtime.cwd", default=None)) or os.getcwd())
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return directory


def uses_own_dataloaders(cfg: Any) -> bool:
    """`data=none` (or no data key): the LightningModule's own *_dataloader methods feed it."""
    node = cfg.get("data")
    return node is None or (isinstance(node, DictConfig) and len(node) == 0)


# What the model and data targets must be, checked on the class before anything is built.
KINDS = {
    "model": ("LightningModule", "point model._target_ at a LightningModule (pytorch_lightning"
              " classes do not mix with lightning.pytorch)"),
    "data": ("LightningDataModule", "point data._target_ at a LightningDataModule"),
}


def _check_kind(key: str, target: Any) -> None:
    if key not in KINDS or not isinstance(target, type):
        return
    import lightning.pytorch as pl

    kind, fix = KINDS[key]
    if not issubclass(target, getattr(pl, kind)):
        raise ConfigError(f"{key}._target_", f"{target.__module__}.{target.__qualname__}",
                          f"a lightning.pytorch.{kind} subclass", fix)


def check_targets(cfg: DictConfig) -> list[tuple[str, Any, DictConfig]]:
    """(key, imported target, node) of every `_target_` harness builds; ConfigError for a bad one."""
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
    targets = []
    for key, node in target_nodes(cfg):
        target = node._target_
        try:
            found = get_object(str(target))
        except Exception as err:  # ImportError, AttributeError, or errors raised by user code
            _check_name_in_module(key, str(target))
            cause = str(err.__cause__ or err).splitlines()[0]
            raise ConfigError(
                f"{key}._target_", str(target), f"an importable class, but import failed: {cause}",
                f"point {key}._target_ at package.module.Class and check that its package is"
                f" installed, on PYTHONPATH or in the start directory {start}",
            ) from None
        _check_kind(key, found)
        targets.append((key, found, node))
    return targets


def _check_name_in_module(key: str, target: str) -> None:
    """`mypkg.workload.Net` where mypkg.workload imports but has no Net: said, with its classes."""
    parts = target.split(".")
    for n in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:n])
        try:
            found: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name and (module_name + ".").startswith(err.name + "."):
                continue  # this prefix is not a module: try a shorter one
            return  # the module imports something missing: the import error says it
        except Exception:  # noqa: BLE001 - the module's own error: the import error says it
            return
        owner = module_name
        for name in parts[n:]:
            if not hasattr(found, name):
                break
            found, owner = getattr(found, name), f"{owner}.{name}"
        else:
            return
        if hasattr(found, "__path__"):
            return  # a package: the missing name may be a module, which the import error names
        classes = [c for c, obj in vars(found).items() if inspect.isclass(obj)
                   and getattr(obj, "__module__", None) == getattr(found, "__name__", None)]
        close = difflib.get_close_matches(name, classes, n=1)
        where = getattr(found, "__file__", None)
        raise ConfigError(
            f"{key}._target_", target,
            f"an importable class, but {owner}{f' ({where})' if where else ''} has no {name!r}",
            f"{key}._target_={owner}.{close[0]}" if close else
            f"point {key}._target_ at a class {owner} defines"
            + (f" ({', '.join(sorted(classes)[:8])})" if classes else ""))
