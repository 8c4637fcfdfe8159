"""Every `_target_` imports, and the model and data are Lightning's kinds, before a build."""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import logging
import os
import sys
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf

from harness.config.arguments import target_nodes
from harness.errors import ConfigError

REQUIRED_GROUPS = ("model", "trainer")


def put_start_directory_on_path() -> str:
    """Make `_target_`s in the start directory importable, as `python train.py` users expect."""
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
KINDS = {"model": ("LightningModule", "point model._target_ at a LightningModule (pytorch_lightning classes"
                   " do not mix with lightning.pytorch)"),
         "data": ("LightningDataModule", "point data._target_ at a LightningDataModule")}


def check_targets(cfg: DictConfig) -> list[tuple[str, Any, DictConfig]]:
    """(key, imported target, node) of every `_target_` harness builds; ConfigError for a bad one."""
    start = put_start_directory_on_path()
    # get_object logs its own multi-line error; ours below is the one the user needs.
    logging.getLogger("hydra.utils").setLevel(logging.CRITICAL)
    for group in REQUIRED_GROUPS:
        node = cfg.get(group)
        if not isinstance(node, DictConfig) or "_target_" not in node:
            raise ConfigError(f"{group}._target_", None, f"the class the '{group}' config builds",
                              f"choose a preset ({group}=...) or set {group}._target_=package.module.Class")
    if not uses_own_dataloaders(cfg) and "_target_" not in cfg.data:
        raise ConfigError("data._target_", None, "the LightningDataModule the 'data' config builds",
                          "choose a preset (data=...), set data._target_=package.module.Class, or data=none"
                          " to run the module on its own dataloaders")
    targets = []
    for key, node in target_nodes(cfg):
        target = node._target_
        try:
            found = get_object(str(target))
        except Exception as err:  # ImportError, AttributeError, or errors raised by user code
            _check_name_in_module(key, str(target))
            cause = str(err.__cause__ or err).splitlines()[0]
            raise ConfigError(f"{key}._target_", str(target), f"an importable class, but import failed:"
                              f" {cause}", f"point {key}._target_ at package.module.Class and check that"
                              f" its package is installed, on PYTHONPATH or in the start directory {start}"
                              ) from None
        if key in KINDS and isinstance(found, type):
            import lightning.pytorch as pl

            kind, fix = KINDS[key]
            if not issubclass(found, getattr(pl, kind)):
                raise ConfigError(f"{key}._target_", f"{found.__module__}.{found.__qualname__}",
                                  f"a lightning.pytorch.{kind} subclass", fix)
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
        listed = f" ({', '.join(sorted(classes)[:8])})" if classes else ""
        raise ConfigError(f"{key}._target_", target, f"an importable class, but {owner}"
                          f"{f' ({where})' if where else ''} has no {name!r}",
                          f"{key}._target_={owner}.{close[0]}" if close else
                          f"point {key}._target_ at a class {owner} defines{listed}")


def check_one_profiler(targets: list[tuple[str, Any, Any]]) -> None:
    """Lightning takes one profiler: of the presets whose class is one, only those one of which
    `can_absorb` the other run together (pytorch + memory); else one ConfigError naming both."""
    from lightning.pytorch.profilers import Profiler

    found = [(key.removeprefix("profiler."), t) for key, t, _ in targets if key.startswith("profiler.")
             and isinstance(t, type) and issubclass(t, Profiler)]
    chosen = [key.removeprefix("profiler.") for key, _, _ in targets if key.startswith("profiler.")]
    if found:
        functools.reduce(lambda kept, other: absorber(kept, other, chosen), found)


def absorber(first: tuple[str, type], second: tuple[str, type],
             chosen: list[str] | None = None) -> tuple[str, type]:
    """Of two Profiler presets' (name, class), the one that absorbs the other, else ConfigError."""
    for kept, other in ((first, second), (second, first)):
        if getattr(kept[1], "can_absorb", lambda _: False)(other[1]):
            return kept
    raise ConfigError("profiler", f"[{','.join(chosen or (first[0], second[0]))}]", "at most one Lightning"
                      f" Profiler among the presets: '{first[0]}' and '{second[0]}' cannot run together"
                      " (Lightning takes one profiler and each of them is one; only pytorch + memory merge)",
                      f"keep one of them, e.g. profiler=[speed,system,{second[0]}], and run the other in a"
                      " second run")
