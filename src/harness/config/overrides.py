"""A job's overrides (`batch_size=8`, `+model.fail_at=2`) read one way everywhere.

The run, its DDP ranks, the sweep's labels and MLflow names, and the table built from
the job directories all read the same list; this is the one parser of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

ROUND_KEY = "sweep_round"  # the round of a repeated sweep, in each job's overrides
AUTOTUNE_STAGE = "autotune_stage"  # the stage of an autotune sweep that ran the job
# Overrides that say how a point was measured, not which point: the rounds sweeper gives
# each job `repeat=1 +sweep_round=<r>`; autotune adds `+autotune_stage=<stage>`.
MEASUREMENT_KEYS = ("repeat", ROUND_KEY, AUTOTUNE_STAGE)


def as_typed(overrides: Any) -> list[str]:
    """Hydra's list of overrides (hydra.overrides.task) as typed: read without resolving,
    since an override such as `batch_size=${nope}` holds an interpolation itself."""
    from omegaconf import OmegaConf

    if isinstance(overrides, (list, tuple)):
        return [str(o) for o in overrides]
    return [str(o) for o in OmegaConf.to_container(overrides, resolve=False)]


def parse_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """`["batch_size=4", "+model.fail_at=2", "compile=True"]` -> {"batch_size": "4",
    "model.fail_at": "2", "compile": "true"}: keys without their +/~/++ prefix, Hydra's own
    `hydra.*` left out, booleans as the command line types them (Hydra's sweeper writes
    True/False). A deletion without a value (`~model.x`) has none and is left out."""
    settings: dict[str, str] = {}
    for item in overrides:
        key, sep, value = str(item).partition("=")
        key = key.lstrip("+~")
        if not sep or key.startswith("hydra."):
            continue
        settings[key] = value.lower() if value.lower() in ("true", "false") else value
    return settings
