"""`autotune.*`: each setting's type, constraint and default (sweeps/autotune.yaml says what
each means), read by harness.config.checks (`Settings.from_mapping`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from harness.config.checks import (
    Fraction,
    NonNegativeInt,
    PositiveInt,
    PositiveNumber,
    Share,
    at_least,
    check,
    read_fields,
)

AUTO = "auto"
LOADER_KEYS = ("data.num_workers", "data.pin_memory", "data.prefetch_factor", "data.persistent_workers")


@dataclass(frozen=True)
class Budget:
    jobs: PositiveInt | Literal["auto"] | None = AUTO  # auto: a third of the grid, at least 20
    minutes: PositiveNumber | None = None


@dataclass(frozen=True)
class Settings:
    objective: Literal["training", "inference", "both"] = "training"
    planned_steps: PositiveInt = 10_000
    warmup_steps: NonNegativeInt = 3
    probe_steps: PositiveInt = 10
    growth: PositiveInt = 2
    keep: Share = 1 / 3
    max_stages: PositiveInt = 3
    max_rounds: PositiveInt = 3
    confirm_rounds: PositiveInt = 3
    min_gain: Fraction = 0.05
    noise_floor: Fraction = 0.05
    data_share_floor: Fraction = 0.05
    memory_margin: Fraction = 0.10
    max_candidates: PositiveInt = 9
    retries: NonNegativeInt = 2
    bisect_steps: NonNegativeInt = 3
    find_max_batch: bool = True
    calibrate: bool = True
    warmup_job: bool | Literal["auto"] = AUTO
    probes: Literal["auto", "job", "stage"] = AUTO
    loader_keys: Sequence[str] = LOADER_KEYS
    budget: Budget = field(default_factory=Budget)

    @property
    def sequential_probes(self) -> bool:
        """The batch ladder one job per wave (it stops at the first OOM), unless `stage`."""
        return self.probes != "stage"

    @classmethod
    def from_mapping(cls, raw: dict[str, Any] | None) -> Settings:
        """From the composed `autotune` block (a ConfigError naming `autotune.<key>`)."""
        settings = read_fields(cls, raw, "autotune.", "sweeps/autotune.yaml")
        least = 2 * settings.confirm_rounds + 1  # a probe and the confirm stage
        check("autotune.budget.jobs", settings.budget.jobs,
              Literal["auto"] | at_least(least) | None, 4 * least)
        return settings

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "loader_keys": list(self.loader_keys)}


def job_budget(budget: Budget, grid_points: int) -> int | None:
    """The jobs cap: `auto` is a third of the grid's points (autotune's promise), at least 20."""
    return max(20, grid_points // 3) if budget.jobs == AUTO else budget.jobs  # type: ignore[return-value]
