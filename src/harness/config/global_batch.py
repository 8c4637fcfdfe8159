"""`global_batch_size`: the gradient accumulation that makes every optimizer step take that many
examples, checked before compute (read_knobs calls it, so a sweep's values are checked alike)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.config.arguments import callback_nodes
from harness.errors import ConfigError

ACCUMULATION_KEY = "trainer.accumulate_grad_batches"


def world_size(trainer: Any) -> int | None:
    """Ranks the trainer config starts: devices x num_nodes (devices=auto/-1: those this machine
    has, as Lightning counts them); None when trainer.devices says no count."""
    trainer = trainer if hasattr(trainer, "get") else {}
    devices = _devices(trainer.get("devices", "auto"), trainer.get("accelerator", "auto"))
    nodes = trainer.get("num_nodes", 1)
    if devices is None or not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        return None
    return devices * nodes


def _devices(devices: Any, accelerator: Any) -> int | None:
    """Lightning's reading of `devices`: a count (int or its string), ids (a list, '0,1'), auto."""
    if isinstance(devices, bool):
        return None
    if isinstance(devices, Sequence) and not isinstance(devices, str):
        return len(devices) or None  # device ids
    text = str(devices).strip().lower()
    if "," in text:  # '0,1' and '0,' are ids
        return len([part for part in text.split(",") if part.strip()]) or None
    if text not in ("auto", "-1"):
        return int(text) if text.isdigit() and int(text) > 0 else None
    if str(accelerator or "auto").lower() in ("cpu", "mps"):  # auto: one process on a CPU (and MPS)
        return 1
    import torch  # every GPU on CUDA

    return torch.cuda.device_count() if torch.cuda.is_available() else 1


def accumulation(cfg: Any, batch_size: int, global_batch: int | None) -> int | None:
    """The trainer.accumulate_grad_batches that `global_batch` sets (None: unset), or a one-line
    ConfigError when it is not a whole number of batches or the trainer already accumulates."""
    if global_batch is None:
        return None
    trainer = cfg.get("trainer")
    trainer = trainer if hasattr(trainer, "get") else {}
    ranks = world_size(trainer)
    if ranks is None:
        raise ConfigError("global_batch_size", global_batch, "a world size harness can read from"
                          f" trainer.devices={trainer.get('devices')!r} and trainer.num_nodes",
                          "trainer.devices=1 (a count, a list of ids or auto), or drop global_batch_size")
    per_batch = batch_size * ranks
    if global_batch % per_batch:
        # the fix: the largest micro-batch <= batch_size that divides it, or the nearest global batch
        fits = [size for size in range(batch_size, 0, -1) if global_batch % (size * ranks) == 0]
        instead = f"global_batch_size={max(per_batch, round(global_batch / per_batch) * per_batch)}"
        raise ConfigError("global_batch_size", global_batch, "a multiple of batch_size x ranks ="
                          f" {batch_size} x {ranks} = {per_batch}: every optimizer step takes whole batches"
                          " on every rank",
                          f"batch_size={fits[0]}, or {instead}" if fits else instead)
    steps = global_batch // per_batch
    asked = trainer.get("accumulate_grad_batches")
    if asked is not None and asked != steps:
        raise ConfigError(ACCUMULATION_KEY, asked, f"nothing, or {steps}: global_batch_size={global_batch}"
                          f" with batch_size={batch_size} on {ranks} rank(s) sets it to {steps}",
                          f"drop {ACCUMULATION_KEY} (global_batch_size sets it), or drop global_batch_size")
    for key, node in callback_nodes(trainer.get("callbacks")):
        if str(node.get("_target_", "")).endswith("GradientAccumulationScheduler"):
            raise ConfigError(key, node.get("_target_"), f"no accumulation schedule beside global_batch_size="
                              f"{global_batch}, which accumulates {steps} batches on every optimizer step",
                              "drop the callback, or drop global_batch_size")
    return steps
