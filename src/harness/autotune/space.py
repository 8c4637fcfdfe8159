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
COMPILE_ORDER = ("false", "true", "default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
ABSENT = "(default)"  # a `+key`'s value in the default configuration: not set at all
OFF = ("false",)  # activation_checkpointing's value that wraps nothing (normal() lower-cases)
# Which key's simplicity counts first when two candidates are tied: compile, then precision
# (it changes the numbers), then checkpointing (the same numbers, recomputed), then the rest.
_ROLE_PRIORITY = {COMPILE: 0, PRECISION: 1, CHECKPOINT: 2, LOADER: 3, BATCH: 4, OTHER: 5}
_ORDERS = {COMPILE: COMPILE_ORDER, PRECISION: PRECISION_ORDER, LOADER: ("false", "true"),
           CHECKPOINT: ("false", "true")}


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
        """The values a grid would run (an interval's lo, the powers of two between, hi)."""
        if self.interval is None:
            return self.values
        lo, hi = self.interval
        powers = (2**i for i in range(hi.bit_length()) if lo < 2**i < hi)
        return tuple(str(v) for v in dict.fromkeys([lo, *powers, hi]))

    def sorted_numbers(self) -> list[int]:
        return sorted({int(float(v)) for v in self.listed()})

    def between(self, low: int, high: int) -> list[int]:
        """Batch sizes of the space strictly between two (every integer of an interval)."""
        if self.interval is not None:
            return list(range(max(low + 1, self.interval[0]), min(high, self.interval[1] + 1)))
        return [v for v in self.sorted_numbers() if low < v < high]

    def rung(self, b: int, up: bool) -> int | None:
        """The batch size next up (2b or more, else the top) or down (b // 2 or less); None past the end."""
        if self.interval is not None:
            lo, hi = self.interval
            return (None if b >= hi else min(2 * b, hi)) if up else (None if b <= lo else max(b // 2, lo))
        if up:
            above = [v for v in self.sorted_numbers() if v > b]
            return next((v for v in above if v >= 2 * b), above[-1] if above else None)
        below = [v for v in self.sorted_numbers() if v < b]
        return next((v for v in reversed(below) if v <= b / 2), below[0] if below else None)

    def start(self) -> str:
        """The default if the space holds it, else the nearest value (in log space), else the first."""
        number = as_number(self.default)
        if self.interval is None and self.default in self.values:
            return self.default
        if self.interval is not None and number is not None and number == int(number) and (
                self.interval[0] <= number <= self.interval[1]):
            return str(int(number))
        if number is not None and all(as_number(v) is not None for v in self.listed()):
            target = math.log(max(number, 1e-9))
            nearest = min(self.sorted_numbers(), key=lambda v: (abs(math.log(max(v, 1e-9)) - target), v))
            return str(nearest) if self.interval is not None else next(
                v for v in self.listed() if int(float(v)) == nearest)
        return self.listed()[0]

    def simplicity(self, value: str) -> float:
        """Smaller is simpler: no compile, fp32, no checkpointing, fewer workers, smaller batch, default."""
        if self.role in (LOADER, BATCH) and as_number(value) is not None:
            return float(value)
        if self.role in _ORDERS:  # loader, checkpointing: off before on; a class list after true
            return _rank(value.lower(), _ORDERS[self.role], self.listed())
        return -1.0 if value == self.default else _rank(value, (), self.listed())

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "role": self.role, "default": self.default, "values": list(self.values),
                "interval": list(self.interval) if self.interval else None}

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
    """global_batch_size: an optimizer step takes `size` examples: micro-batch x accumulation x `ranks`."""

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

    def as_dict(self) -> dict[str, int | None]:
        return {"global_batch_size": self.size, "world_size": self.ranks,
                "per_rank": self.per_rank, "batch_size": self.batch_size}

    @classmethod
    def from_dict(cls, raw: dict | None) -> GlobalBatch | None:
        if not raw:
            return None
        return cls(int(raw["global_batch_size"]), int(raw.get("world_size") or 1), raw.get("batch_size"))


@dataclass(frozen=True)
class Space:
    keys: tuple[Key, ...]
    global_batch: GlobalBatch | None = None  # the recipe's global batch, when one is kept

    def key(self, name: str) -> Key:
        return next(k for k in self.keys if k.name == name)

    @property
    def batch(self) -> Key | None:
        return next((k for k in self.keys if k.role == BATCH), None)

    def micro_batch(self, candidate: Candidate) -> int | None:
        """The candidate's batch_size (the global batch's fixed one when it is not searched)."""
        batch = self.batch
        if batch is not None and as_number(candidate[batch.name]) is not None:
            return int(float(candidate[batch.name]))
        return self.global_batch.batch_size if self.global_batch else None

    def accumulation(self, candidate: Candidate) -> int | None:
        """The batches per optimizer step global_batch_size makes (None: no global batch)."""
        micro = self.micro_batch(candidate)
        return self.global_batch.per_rank // micro if self.global_batch and micro else None

    def checkpointed(self, candidate: Candidate, on: bool = True) -> Candidate | None:
        """The candidate with activation checkpointing switched on (the same batch in less memory,
        for one more forward pass) or off, where the space has it and it is the other way now."""
        key = next((k for k in self.keys if k.role == CHECKPOINT), None)
        if key is None or (candidate[key.name] in OFF) != on:
            return None
        found = [v for v in key.listed() if (v in OFF) != on]
        return candidate.with_(key.name, found[0]) if found else None

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
        return tuple(k.simplicity(candidate[k.name]) for k in ordered)

    def memory_twin(self, a: Candidate, b: Candidate) -> bool:
        """`b` needs at least `a`'s device memory at the same batch: equal but for batch and
        loader keys, and for checkpointing where `a` has it on and `b` off (checkpointing only
        frees activations; it never needs more)."""
        return all(a[k.name] == b[k.name] or (k.role == CHECKPOINT and a[k.name] not in OFF
                                              and b[k.name] in OFF)
                   for k in self.keys if k.role not in (BATCH, LOADER))


def role_of(name: str, loader_keys: tuple[str, ...]) -> str:
    roles = {"batch_size": BATCH, "precision": PRECISION, "compile": COMPILE, CHECKPOINT_KEY: CHECKPOINT}
    return roles.get(name, LOADER if name in loader_keys else OTHER)


def check_space(space: Space) -> None:
    """Refuse a space autotune cannot search (SpaceError) before any compute."""
    for key in space.keys:
        if key.interval is not None and key.interval[0] > key.interval[1]:
            lo, hi = key.interval
            raise SpaceError(f"{key.name}=interval({lo},{hi}): the low end is above the high."
                             f" Fix: {key.name}=interval({hi},{lo})")
        if key.role == BATCH:
            bad = [v for v in key.listed() if (n := as_number(v)) is None or n < 1 or not n.is_integer()]
            if bad:
                raise SpaceError(f"batch_size={bad[0]}: batch sizes are positive integers."
                                 " Fix: batch_size=16,32,64")
    if space.grid_points() < 2:
        listed = ", ".join(f"{k.name}={k.listed()[0]}" for k in space.keys) or "no key"
        raise SpaceError(f"the space holds one point ({listed}): nothing to search. Fix: give"
                         " a key several values, e.g. batch_size=16,32,64")
