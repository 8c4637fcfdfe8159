"""`autotune.*`: every setting of the search with its default (sweeps/autotune.yaml lists
them with a line each), read from the composed `autotune` block and checked."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

OBJECTIVES = ("training", "inference", "both")
PROBES = ("auto", "job", "stage")
AUTO = "auto"
LOADER_KEYS = ("data.num_workers", "data.pin_memory", "data.prefetch_factor",
               "data.persistent_workers")


class SettingError(ValueError):
    """A bad `autotune.*` value: the key, the value, what was expected and the fix, for a
    one-line ConfigError (exit 2)."""

    def __init__(self, key: str, value: object, expected: str, fix: str) -> None:
        self.key, self.value, self.expected, self.fix = key, value, expected, fix
        super().__init__(f"{key}={value!r}: expected {expected}. Fix: {fix}")


@dataclass(frozen=True)
class Budget:
    # most jobs, the confirm stage's included; auto: a third of the grid (at least 20); None: no cap
    jobs: int | str | None = AUTO
    # most minutes of the sweep (None: no cap): a wave that would pass them is not started
    minutes: float | None = None


@dataclass(frozen=True)
class Settings:
    objective: str = "training"  # training | inference | both (geometric mean of the two rates)
    planned_steps: int = 10_000  # steps of the real run that compile's one-off cost is spread over
    warmup_steps: int = 3  # steps of every job left out of its figures (profiler.speed.warmup_steps)
    probe_steps: int = 10  # measured steps of a probe (fit, screen, recheck)
    growth: int = 2  # each halving stage measures growth x the steps of the one before
    keep: float = 1 / 3  # fraction of the candidates a halving stage keeps (and the ties)
    max_stages: int = 3  # halving stages at most
    max_rounds: int = 3  # rounds of a halving stage at most
    confirm_rounds: int = 3  # rounds of winner vs default configuration in the confirm stage
    min_gain: float = 0.05  # a more complex setting must be this much faster, beyond spread, to win
    noise_floor: float = 0.05  # least half-width of a one-job figure (more: 2 x the measured noise)
    data_share_floor: float = 0.05  # loader keys are not searched below this input-pipeline share
    max_candidates: int = 9  # candidates entering the halving stages at most
    retries: int = 2  # stages an untrusted (thin, noisy, contended) candidate is measured again
    bisect_steps: int = 3  # probes between the largest batch that fit and the first that did not
    find_max_batch: bool = True  # climb to the first OOM (the largest batch that fits, a side result)
    calibrate: bool = True  # probe the start point twice: the job-to-job noise
    # a first job whose figures are not used (the process's cold start); auto: in this process
    warmup_job: bool | str = AUTO
    probes: str = AUTO  # job: the batch ladder job by job; stage: a wave per stage; auto: by launcher
    loader_keys: tuple[str, ...] = LOADER_KEYS
    budget: Budget = field(default_factory=Budget)

    @property
    def sequential_probes(self) -> bool:
        """The batch ladder one job per wave (it stops at the first OOM), unless `stage`."""
        return self.probes != "stage"

    @classmethod
    def from_mapping(cls, raw: dict[str, Any] | None) -> Settings:
        """From the composed `autotune` block; an unknown key or a bad value raises
        SettingError naming `autotune.<key>`."""
        raw = dict(raw or {})
        known = [f.name for f in fields(cls)]
        for key in raw:
            if key not in known:
                raise SettingError(f"autotune.{key}", raw[key], "a setting of autotune: "
                                   + ", ".join(known), "see sweeps/autotune.yaml")
        if "budget" in raw:
            budget = dict(raw["budget"] or {})
            for key in budget:
                if key not in ("jobs", "minutes"):
                    raise SettingError(f"autotune.budget.{key}", budget[key], "jobs or minutes",
                                       "autotune.budget.jobs=40 or autotune.budget.minutes=30")
            raw["budget"] = Budget(**budget)
        if "loader_keys" in raw:
            raw["loader_keys"] = tuple(str(k) for k in (raw["loader_keys"] or ()))
        settings = cls(**raw)
        settings.check()
        return settings

    def check(self) -> None:
        if self.objective not in OBJECTIVES:
            raise SettingError("autotune.objective", self.objective, "one of "
                               + ", ".join(OBJECTIVES), "autotune.objective=training")
        if self.probes not in PROBES:
            raise SettingError("autotune.probes", self.probes, "one of " + ", ".join(PROBES),
                               "autotune.probes=auto")
        for name in ("planned_steps", "probe_steps", "growth", "max_stages",
                     "max_rounds", "confirm_rounds", "max_candidates"):
            _whole(name, getattr(self, name), least=1)
        for name in ("warmup_steps", "retries", "bisect_steps"):
            _whole(name, getattr(self, name), least=0)
        for name in ("keep", "min_gain", "noise_floor", "data_share_floor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise SettingError(f"autotune.{name}", value, "a fraction from 0 to 1",
                                   f"autotune.{name}={getattr(Settings, name, 0.05)}")
        if self.keep == 0:
            raise SettingError("autotune.keep", self.keep, "a fraction above 0", "autotune.keep=0.333")
        if self.warmup_job not in (True, False, AUTO):
            raise SettingError("autotune.warmup_job", self.warmup_job, "auto, true or false",
                               "autotune.warmup_job=auto")
        for name in ("find_max_batch", "calibrate"):
            if not isinstance(getattr(self, name), bool):
                raise SettingError(f"autotune.{name}", getattr(self, name), "true or false",
                                   f"autotune.{name}=true")
        jobs, least = self.budget.jobs, 2 * self.confirm_rounds + 1
        if jobs not in (None, AUTO) and (isinstance(jobs, bool) or not isinstance(jobs, int)
                                         or jobs < least):
            raise SettingError("autotune.budget.jobs", jobs, f"auto, null or at least {least}"
                               " (a probe and the confirm stage)", f"autotune.budget.jobs={4 * least}")
        minutes = self.budget.minutes
        if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, (int, float))
                                    or minutes <= 0):
            raise SettingError("autotune.budget.minutes", minutes, "null or a number of minutes"
                               " above 0", "autotune.budget.minutes=30")

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["loader_keys"] = list(self.loader_keys)
        return found

    def resolved(self, **changes: Any) -> Settings:
        return Settings.from_mapping({**self.as_dict(), **changes})


def _whole(name: str, value: object, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise SettingError(f"autotune.{name}", value, f"an integer >= {least}",
                           f"autotune.{name}={getattr(Settings, name, least)}")


def job_budget(budget: Budget, grid_points: int) -> int | None:
    """The jobs cap: `auto` is a third of the grid's points (autotune's promise), at least 20."""
    if budget.jobs == AUTO:
        return max(20, grid_points // 3)
    return budget.jobs  # type: ignore[return-value]
