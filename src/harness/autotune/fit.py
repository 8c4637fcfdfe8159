"""The fit stage (docs/autotune.md, "How it searches"): the warm-up job, the batch ladder to the
first OOM (and on from it with checkpointing), bisection, smaller batches while they pay."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator

from harness.autotune.knowledge import FIT, WARMUP, Knowledge, Plan, Wave
from harness.autotune.outcome import Outcome
from harness.autotune.space import Candidate, Key


def fit(search: Knowledge, start: Candidate) -> Plan:
    if search.settings.warmup_job is True and (yield from lone(search, WARMUP, start, 0)):
        # a process's first job pays its cold start: a slower start and a large job-to-job noise
        search.decide(WARMUP, start, "probed", "warm-up: the process's first job, its figures not"
                      " used (a cold start)")
    batch = search.space.batch
    if batch is None:
        yield from search.probe(FIT, [start])
        yield from calibrate(search, start)
        return
    _, first_oom = yield from ladder(search, batch, start, int(start[batch.name]), first=True)
    saving = search.space.checkpointed(start)
    if saving is not None and first_oom is not None:
        # per checkpointing setting: from the batch that ran out of memory (or was tight) without
        # it, up: what fits only with it (below, the same batch fits without the recompute)
        largest, _ = yield from ladder(search, batch, saving, first_oom, first=False)
        if largest is None:
            search.decide(FIT, saving.with_(batch.name, str(first_oom)), "kept",
                          "nothing fits only with checkpointing: it ran out of memory too")


def ladder(search: Knowledge, batch: Key, start: Candidate, b0: int, first: bool
           ) -> Generator[Wave, list[Outcome], tuple[int | None, int | None]]:
    """(the largest batch that fits, the first OOM above it) of the ladder at `start` from `b0`: up,
    bisection; the first also walks down (b0 does not fit; while smaller is faster), calibrates."""

    def at(b: int) -> Candidate:
        return start.with_(batch.name, str(b))

    def rate(b: int) -> float | None:
        return found.value if (found := search.estimate(at(b), (FIT,))) is not None else None

    rungs: list[int] = []
    if search.settings.sequential_probes:
        b: int | None = b0
        while b is not None:
            yield from search.probe(FIT, [at(b)])
            rungs.append(b)
            if search.infeasible(at(b)) or not search.outcomes(at(b)):
                break  # the first OOM (or tight, or skipped): nothing above it is launched
            last = [rate(r) or 0.0 for r in rungs[-3:]]
            if not search.settings.find_max_batch and len(last) == 3 and last[2] < last[1] < last[0]:
                search.decide(FIT, at(b), "kept", "ladder stopped: two doublings slower"
                              " (autotune.find_max_batch=false)")
                break
            b = batch.rung(b, up=True)
    else:  # one wave: every rung from the start up, and the start twice (the calibration)
        rungs = [b0]
        while (nxt := batch.rung(rungs[-1], up=True)) is not None:
            rungs.append(nxt)
        yield from search.probe(FIT, [at(r) for r in rungs],
                                again=at(b0) if first and search.settings.calibrate else None)
    b = b0  # the start does not fit: down until a batch does
    while first and search.ran_oom(at(b)) and (b := batch.rung(b, up=False)) is not None:
        yield from search.probe(FIT, [at(b)])
        rungs.append(b)
    yield from bisect(search, batch, at, rungs)
    if first:
        measured = sorted({r for r in rungs if rate(r) is not None})
        # down while it pays: the fastest so far is the smallest batch probed
        while measured and max(measured, key=lambda r: rate(r) or 0.0) == measured[0] and (
                lower := batch.rung(measured[0], up=False)) is not None:
            yield from search.probe(FIT, [at(lower)])
            rungs.append(lower)
            if rate(lower) is None:
                break
            measured.insert(0, lower)
        tried = [at(r) for r in rungs if rate(r) is not None]
        yield from calibrate(search, at(b0) if at(b0) in tried else search.best(tried, (FIT,)))
    largest, ceiling = limits(search, at, rungs)
    search.ladders.append({"point": {k: v for k, v in start.items if k != batch.name},
                           "from": b0, "largest_fit": largest, "first_oom": ceiling})
    if largest is not None:
        said = "tight" if ceiling is not None and not search.ran_oom(at(ceiling)) else "OOM"
        search.decide(FIT, at(largest), "kept", f"largest batch that fits: {largest}" + (
            f" (first {said}: {ceiling})" if ceiling else " (no OOM up to the top of the space)"))
    return largest, ceiling


def limits(search: Knowledge, at: Callable[[int], Candidate], probed: list[int]
           ) -> tuple[int | None, int | None]:
    """(the largest batch probed that fits, not tight; the first above it: out of memory, or tight)"""
    largest = max((b for b in probed if not search.infeasible(at(b))), default=None)
    ceiling = min((b for b in probed if (search.ran_oom(at(b)) or search.tight(at(b)))
                   and (largest is None or b > largest)), default=None)
    return largest, ceiling


def bisect(search: Knowledge, batch: Key, at: Callable[[int], Candidate], ladder: list[int]) -> Plan:
    """Probes between the largest batch that fit and the first OOM, added to `ladder`."""
    sequential = search.settings.sequential_probes
    for _ in range(search.settings.bisect_steps if sequential else min(1, search.settings.bisect_steps)):
        lo, hi = limits(search, at, ladder)
        middle = batch.between(lo, hi) if lo is not None and hi is not None else []
        if not middle:
            break
        n = 1 if sequential else search.settings.bisect_steps
        targets = [lo * (hi / lo) ** ((i + 1) / (n + 1)) for i in range(n)]  # type: ignore[operator]
        sizes = sorted({min(middle, key=lambda v, t=t: (abs(math.log(v / t)), v)) for t in targets})
        yield from search.probe(FIT, [at(m) for m in sizes])
        ladder += sizes
        if any(search.infeasible(at(m)) and not search.ran_oom(at(m)) for m in sizes):
            break  # a failure other than memory: no more bisection


def calibrate(search: Knowledge, point: Candidate | None) -> Plan:
    """A probed point once more: the job-to-job noise (a drift since the first job shows in it)."""
    if (point is not None and search.settings.calibrate and not search.infeasible(point)
            and len(search.outcomes(point)) == 1 and (yield from lone(search, FIT, point, 1))):
        search.decide(FIT, point, "probed", f"calibration: job-to-job noise {search.sigma():.1%}")


def lone(search: Knowledge, stage: str, point: Candidate, round_: int
         ) -> Generator[Wave, list[Outcome], bool]:
    """One probe of `point`, where the budget has room for it; whether it ran."""
    jobs = [search.job(point, stage, round_, search.settings.probe_steps)]
    if search.room(jobs) < 1:
        return False
    yield Wave(stage, tuple(jobs))
    return True
