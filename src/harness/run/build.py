"""Turn the composed config into Lightning objects through `_target_`."""

from __future__ import annotations

import copy
import logging
from typing import Any

import lightning.pytorch as pl
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, ProgressBar
from omegaconf import DictConfig, open_dict

from harness.config.arguments import callback_nodes
from harness.config.global_batch import world_size
from harness.config.targets import uses_own_dataloaders
from harness.errors import HarnessError, first_line
from harness.profilers.preset import Presets


def _build(key: str, node: DictConfig, **kwargs: Any) -> Any:
    try:
        return instantiate(node, **kwargs)
    except HarnessError:
        raise
    except Exception as err:
        # Hydra wraps the real error; the one the user can act on is its cause.
        cause = err.__cause__ or err
        if isinstance(cause, HarnessError):
            raise cause from None
        first = first_line(cause, with_type=False) or type(cause).__name__
        raise HarnessError(f"{key}: could not build {node.get('_target_')}: {first}") from None


def _build_a(kind: type, key: str, node: DictConfig, fix: str) -> Any:
    """`_build`, then refuse what is not a `kind`: a factory `_target_` can return anything."""
    built = _build(key, node)
    if not isinstance(built, kind):
        raise HarnessError(f"{key}._target_={node._target_} built a {type(built).__name__}, not a"
                           f" lightning.pytorch {kind.__name__}. Fix: {fix}")
    return built


def build_module(cfg: DictConfig) -> pl.LightningModule:
    return _build_a(pl.LightningModule, "model", cfg.model, "point model._target_ at a LightningModule"
                    " (pytorch_lightning classes do not mix with lightning.pytorch)")


def build_datamodule(cfg: DictConfig) -> pl.LightningDataModule | None:
    """The DataModule, or None with `data=none` (the module's own dataloaders)."""
    if uses_own_dataloaders(cfg):
        return None
    return _build_a(pl.LightningDataModule, "data", cfg.data, "point data._target_ at a DataModule")


def build_presets(cfg: DictConfig) -> Presets:
    """The configured presets, sorted and linked (harness.profilers.preset.Presets.of)."""
    nodes = cfg.get("profiler") or {}
    return Presets.of({name: _build(f"profiler.{name}", node) for name, node in nodes.items()
                       if isinstance(node, DictConfig) and "_target_" in node})


def route_lightning_logs() -> None:
    """Send Lightning's messages through the job's logging only, so each prints once."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True


def build_logger(cfg: DictConfig) -> Any:
    """The logger group's logger, or None with logger=none."""
    node = cfg.get("logger")
    if not isinstance(node, DictConfig) or "_target_" not in node:
        return None
    return _build("logger", node)


def build_user_callbacks(node: Any) -> list[Callback]:
    """The user's trainer.callbacks: one `_target_` node, a list or a dict of them."""
    return [_build_a(Callback, key, child, "point it at a Callback class, or remove it")
            for key, child in callback_nodes(node)]


def build_trainer(cfg: DictConfig, precision: str, presets: Presets, logger: Any, own: list[Callback],
                  accumulation: int | None = None, scaling: str | None = None) -> pl.Trainer:
    """The Trainer with the user's callbacks, the presets, harness's own and the logger;
    `accumulation`: the accumulate_grad_batches global_batch_size sets (None: the config's);
    `scaling` (a scaling study): one rank runs as a plain single process, not DDP of one."""
    user = build_user_callbacks(cfg.trainer.get("callbacks"))
    # Without its callbacks node: Hydra would merge the list below into a dict of nodes.
    node = copy.copy(cfg.trainer)  # a shallow copy keeps the parent: ${...} still resolve
    with open_dict(node):
        node.pop("callbacks", None)
        if scaling and world_size(node) == 1:
            node.strategy = "auto"
    # Lightning refuses a ModelCheckpoint or a progress bar of the user's beside the switch
    # (off in conf/trainer/default.yaml) that turns it off.
    switches = {key: True for key, kind in (("enable_checkpointing", ModelCheckpoint),
                                            ("enable_progress_bar", ProgressBar))
                if any(isinstance(c, kind) for c in user)}
    accumulates = {} if accumulation is None else {"accumulate_grad_batches": accumulation}
    if hasattr(logger, "flush_if_due"):  # a buffering logger sends where no step is timed
        presets.shared.between_steps.append(logger.flush_if_due)
    # Trainer(logger=None) means its default logger: False means none
    return _build("trainer", node, precision=precision, callbacks=[*user, *presets.callbacks, *own],
                  profiler=presets.profiler, logger=False if logger is None else logger, **switches,
                  **accumulates)
