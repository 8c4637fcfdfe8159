"""A job's overrides (`batch_size=8`, `+model.fail_at=2`), read one way everywhere."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

ROUND_KEY = "sweep_round"  # the round of a repeated sweep, in each job's overrides
AUTOTUNE_STAGE = "autotune_stage"  # the stage of an autotune sweep that ran the job
# Keys whose values are repeats of one point, not variants (`seed=0,1,2`: three samples each).
REPEAT_KEYS = ("seed", ROUND_KEY)
# Overrides that say how a point was measured, not which point.
MEASUREMENT_KEYS = ("repeat", ROUND_KEY, AUTOTUNE_STAGE)
# Every key a job's overrides may get from autotune (beside repeat, the round and the stage).
SET_BY_AUTOTUNE = ("mode", "trainer.max_steps", "trainer.max_epochs", "trainer.limit_val_batches",
                   "trainer.limit_predict_batches", "profiler.speed.warmup_steps",
                   "data.train_batches", "data.predict_batches")


def as_typed(overrides: Any) -> list[str]:
    """hydra.overrides.task as typed, unresolved (`batch_size=${nope}` is one)."""
    from omegaconf import OmegaConf

    if isinstance(overrides, (list, tuple)):
        return [str(o) for o in overrides]
    return [str(o) for o in OmegaConf.to_container(overrides, resolve=False)]


def parse_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """`["+model.fail_at=2", "compile=True"]` -> {"model.fail_at": "2", "compile": "true"}."""
    settings: dict[str, str] = {}
    for item in overrides:
        key, sep, value = str(item).partition("=")
        key = key.lstrip("+~")
        if not sep or key.startswith("hydra."):
            continue
        settings[key] = value.lower() if value.lower() in ("true", "false") else value
    return settings
