"""The space autotune searches: keys, their values as the command line types them, roles, and
what "simpler" means. An integer `interval(lo,hi)` lists as lo, the powers of two above, hi."""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.errors import CONFIG_STATUS, HarnessError

BATCH, PRECISION, COMPILE, LOADER, OTHER = "batch", "precision", "compile", "loader", "other"
CHECKPOINT = "checkpointing"  # activation_checkpointing: false, true or class names
CHECKPOINT_KEY = "activation_checkpointing"
# Simplest first; a value not listed ranks after these, in the order typed.
PRECISION_ORDER = ("fp32", "32-true", "32", "bf16", "bf16-mixed", "bf16-true", "fp16", "16",
                   "16-mixed", "16-true", "fp64", "64", "64-true")
COMPILE_ORDER = ("false", "true", "default", "reduce-overhead", "max-autotune-no-cudagraphs",
                 "max-autotune")
ABSENT = "(default)"  # a `+key`'s value in the default configuration: not set at all
OFF = ("false",)  # activation_checkpointing's value that wraps nothing (normal() lower-cases)
# Which key's simplicity counts first when two candidates are tied: compile, then precision
# (it changes the numbers), then checkpointing (the same numbers, recomputed), then the rest.
_ROLE_PRIORITY = {COMPILE: 0, PRECISION: 1, CHECKPOINT: 2, LOADER: 3, BATCH: 4, OTHER: 5}


class SpaceError(HarnessError, ValueError):
    """The space cannot be searched: one line naming the key and the fix (exit 2)."""

    exit_status = CONFIG_STATUS


def as_number(value: str) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def normal(value: object) -> str:
    """A value as the command line types it: booleans lower-case."""
    text = str(value)
    return text.lower() if text in ("True", "False") else text


@dataclass(frozen=True)
class Key:
    """One searched key: its values (or integer interval), its role, and its config value."""

    name: str
    role: str
    default: str  # the config's value: the default configuration (may lie outside the space)
    values: tuple[str, ...] = ()  # discrete values, as typed
    interval: tuple[int, int] | None = None  # integer interval(lo, hi), bounds included

    def __post_init__(self) -> None:
        if not self.values and self.interval is None:
            raise ValueError(f"{self.name}: no values")

    def listed(self) -> tuple[str, ...]:
        """The values a grid would run (an interval's lo, powers of two, hi)."""
        if self.interval is None:
            return self.values
        lo, hi = self.interval
        found = [lo]
        power = 1
        while power < hi:
            if power > lo:
                found.append(power)
            power *= 2
        if found[-1] != hi:
            found.append(hi)
        return tuple(str(v) for v in found)

    def sorted_numbers(self) -> list[int]:
        return sorted({int(float(v)) for v in self.listed()})

    def contains(self, value: str) -> bool:
        if self.interval is not None:
            number = as_number(value)
            return number is not None and number == int(number) and (
                self.interval[0] <= number <= self.interval[1])
        return value in self.values

    def between(self, low: int, high: int) -> list[int]:
        """Batch sizes of the space strictly between two (every integer of an interval)."""
        if self.interval is not None:
            return list(range(max(low + 1, self.interval[0]), min(high, self.interval[1] + 1)))
        return [v for v in self.sorted_numbers() if low < v < high]

    def start(self) -> str:
        """The default if the space holds it, else the nearest value (in log space), else the first."""
        if self.contains(self.default):
            return str(int(float(self.default))) if self.interval is not None else self.default
        number = as_number(self.default)
        if number is not None and all(as_number(v) is not None for v in self.listed()):
            target = math.log(max(number, 1e-9))
            nearest = min(self.sorted_numbers(),
                          key=lambda v: (abs(math.log(max(v, 1e-9)) - target), v))
            return str(nearest) if self.interval is not None else next(
                v for v in self.listed() if int(float(v)) == nearest)
        return self.listed()[0]

    def simplicity(self, value: str) -> tuple[float, ...]:
        """Smaller is simpler: no compile, fp32, no checkpointing, fewer workers, a smaller
        batch, the default."""
        lowered = value.lower()
        if self.role == COMPILE:
            return (_rank(lowered, COMPILE_ORDER, self.listed()),)
        if self.role == PRECISION:
            return (_rank(lowered, PRECISION_ORDER, self.listed()),)
        if self.role in (LOADER, BATCH) and as_number(value) is not None:
            return (float(value),)
        if self.role in (LOADER, CHECKPOINT):  # off before on; a class list after true
            return (_rank(lowered, ("false", "true"), self.listed()),)
        if value == self.default:
            return (-1.0,)
        listed = self.listed()
        return (float(listed.index(value)) if value in listed else float(len(listed)),)

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "role": self.role, "default": self.default,
                "values": list(self.values), "interval": list(self.interval)
                if self.interval else None}

    @classmethod
    def from_dict(cls, raw: dict) -> Key:
        interval = raw.get("interval")
        return cls(raw["name"], raw["role"], raw["default"], tuple(raw.get("values") or ()),
                   (int(interval[0]), int(interval[1])) if interval else None)


def _rank(value: str, order: tuple[str, ...], listed: tuple[str, ...]) -> float:
    if value in order:
        return float(order.index(value))
    return float(len(order) + (listed.index(value) if value in listed else len(listed)))


@dataclass(frozen=True)
class Candidate:
    """One point of the space: (key, value) pairs in the space's key order."""

    items: tuple[tuple[str, str], ...]

    def __getitem__(self, key: str) -> str:
        return dict(self.items)[key]

    def get(self, key: str, default: str | None = None) -> str | None:
        return dict(self.items).get(key, default)

    def with_(self, key: str, value: str) -> Candidate:
        return Candidate(tuple((k, value if k == key else v) for k, v in self.items))

    def overrides(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.items if v != ABSENT]

    def label(self) -> str:
        return " ".join(self.overrides())

    def as_dict(self) -> dict[str, str]:
        return dict(self.items)


@dataclass(frozen=True)
class GlobalBatch:
    """global_batch_size: every optimizer step takes `size` examples over `ranks` ranks, as
    micro-batches of `batch_size` x accumulation on each rank."""

    size: int
    ranks: int = 1
    batch_size: int | None = None  # the micro-batch when batch_size is not searched

    @property
    def per_rank(self) -> int:
        return self.size // self.ranks

    def divides(self, micro: int) -> bool:
        return micro > 0 and self.size % (micro * self.ranks) == 0

    def divisors(self, low: int = 1, high: int | None = None) -> list[int]:
        """The micro-batches from `low` to `high` (default: all) that make whole steps."""
        top = self.per_rank if high is None else min(high, self.per_rank)
        return [b for b in range(max(low, 1), top + 1) if self.per_rank % b == 0]

    def accumulation(self, micro: int) -> int:
        return self.per_rank // micro

    def as_dict(self) -> dict[str, int | None]:
        return {"global_batch_size": self.size, "world_size": self.ranks,
                "per_rank": self.per_rank, "batch_size": self.batch_size}

    @classmethod
    def from_dict(cls, raw: dict | None) -> GlobalBatch | None:
        if not raw:
            return None
        return cls(int(raw["global_batch_size"]), int(raw.get("world_size") or 1),
                   raw.get("batch_size"))


@dataclass(frozen=True)
class Space:
    keys: tuple[Key, ...]
    global_batch: GlobalBatch | None = None  # the recipe's global batch, when one is kept

    def key(self, name: str) -> Key:
        return next(k for k in self.keys if k.name == name)

    @property
    def names(self) -> list[str]:
        return [k.name for k in self.keys]

    @property
    def batch(self) -> Key | None:
        return next((k for k in self.keys if k.role == BATCH), None)

    @property
    def checkpointing(self) -> Key | None:
        return next((k for k in self.keys if k.role == CHECKPOINT), None)

    def micro_batch(self, candidate: Candidate) -> int | None:
        """The candidate's batch_size (the global batch's fixed one when it is not searched)."""
        batch = self.batch
        if batch is not None and as_number(candidate[batch.name]) is not None:
            return int(float(candidate[batch.name]))
        return self.global_batch.batch_size if self.global_batch else None

    def accumulation(self, candidate: Candidate) -> int | None:
        """The batches per optimizer step global_batch_size makes (None: no global batch)."""
        micro = self.micro_batch(candidate)
        if self.global_batch is None or not micro:
            return None
        return self.global_batch.accumulation(micro)

    def saving(self, candidate: Candidate) -> Candidate | None:
        """The candidate with activation checkpointing on, where it is off and the space has
        it: the same batch in less memory, for one more forward pass."""
        key = self.checkpointing
        if key is None or candidate[key.name] not in OFF:
            return None
        on = [v for v in key.listed() if v not in OFF]
        return candidate.with_(key.name, on[0]) if on else None

    def plainer(self, candidate: Candidate) -> Candidate | None:
        """The candidate without activation checkpointing, where it is on."""
        key = self.checkpointing
        if key is None or candidate[key.name] in OFF:
            return None
        off = [v for v in key.listed() if v in OFF]
        return candidate.with_(key.name, off[0]) if off else None

    def grid_points(self) -> int:
        """The exhaustive grid's size (an interval counted as its listed values)."""
        return math.prod(len(k.listed()) for k in self.keys)

    def default(self) -> Candidate:
        """Every key at its config value, in or out of the space."""
        return Candidate(tuple((k.name, k.default) for k in self.keys))

    def start(self) -> Candidate:
        return Candidate(tuple((k.name, k.start()) for k in self.keys))

    def simplicity(self, candidate: Candidate) -> tuple[float, ...]:
        ordered = sorted(self.keys, key=lambda k: (_ROLE_PRIORITY[k.role], self.keys.index(k)))
        return tuple(part for k in ordered for part in k.simplicity(candidate[k.name]))

    def memory_twin(self, a: Candidate, b: Candidate) -> bool:
        """`b` needs at least `a`'s device memory at the same batch: equal but for batch and
        loader keys, and for checkpointing where `a` has it on and `b` off (checkpointing only
        frees activations; it never needs more)."""
        return all(a[k.name] == b[k.name] or (k.role == CHECKPOINT and a[k.name] not in OFF
                                              and b[k.name] in OFF)
                   for k in self.keys if k.role not in (BATCH, LOADER))

    def as_list(self) -> list[dict[str, object]]:
        return [k.as_dict() for k in self.keys]

    @classmethod
    def from_list(cls, raw: list[dict], global_batch: dict | None = None) -> Space:
        return cls(tuple(Key.from_dict(k) for k in raw), GlobalBatch.from_dict(global_batch))


def role_of(name: str, loader_keys: tuple[str, ...]) -> str:
    roles = {"batch_size": BATCH, "precision": PRECISION, "compile": COMPILE,
             CHECKPOINT_KEY: CHECKPOINT}
    return roles.get(name, LOADER if name in loader_keys else OTHER)


def check_space(space: Space) -> None:
    """Refuse a space autotune cannot search (SpaceError) before any compute."""
    for key in space.keys:
        if key.interval is not None and key.interval[0] > key.interval[1]:
            lo, hi = key.interval
            raise SpaceError(f"{key.name}=interval({lo},{hi}): the low end is above the high."
                             f" Fix: {key.name}=interval({hi},{lo})")
        if key.role == BATCH:
            bad = [v for v in key.listed() if as_number(v) is None or float(v) < 1
                   or float(v) != int(float(v))]
            if bad:
                raise SpaceError(f"batch_size={bad[0]}: batch sizes are positive integers."
                                 " Fix: batch_size=16,32,64")
    if space.grid_points() < 2:
        listed = ", ".join(f"{k.name}={k.listed()[0]}" for k in space.keys) or "no key"
        raise SpaceError(f"the space holds one point ({listed}): nothing to search. Fix: give"
                         " a key several values, e.g. batch_size=16,32,64")
