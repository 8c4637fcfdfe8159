"""The fit stage (docs/autotune.md, "How it searches"): the warm-up job, the batch ladder to
the first OOM, bisection below it, smaller batches while they pay, and the calibration."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator

from harness.autotune.knowledge import FIT, WARMUP, Knowledge, Plan, Wave
from harness.autotune.outcome import Outcome
from harness.autotune.space import Candidate


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
    b0 = int(start[batch.name])

    def at(b: int) -> Candidate:
        return start.with_(batch.name, str(b))

    def rate(b: int) -> float | None:
        found = search.estimate(at(b), (FIT,))
        return found.value if found is not None else None

    ladder: list[int] = []
    if search.settings.sequential_probes:
        b: int | None = b0
        while b is not None:
            yield from search.probe(FIT, [at(b)])
            ladder.append(b)
            if search.infeasible(at(b)):
                break  # the first OOM: nothing above it is launched
            if not search.settings.find_max_batch and falling(ladder, rate):
                search.decide(FIT, at(b), "kept", "ladder stopped: two doublings slower"
                              " (autotune.find_max_batch=false)")
                break
            b = rung(search, b, up=True)
    else:  # one wave: every rung from the start up, and the start twice (the calibration)
        ladder = [b0]
        while (nxt := rung(search, ladder[-1], up=True)) is not None:
            ladder.append(nxt)
        yield from search.probe(FIT, [at(r) for r in ladder],
                                again=at(b0) if search.settings.calibrate else None)
    b = rung(search, b0, up=False) if search.ran_oom(at(b0)) else None
    while b is not None:  # the start does not fit: down until a batch does
        yield from search.probe(FIT, [at(b)])
        ladder.append(b)
        b = rung(search, b, up=False) if search.ran_oom(at(b)) else None
    yield from bisect(search, at, ladder)
    measured = sorted({r for r in ladder if rate(r) is not None})
    # down while it pays: the fastest so far is the smallest batch probed
    while measured and max(measured, key=lambda r: rate(r) or 0.0) == measured[0] and (
            lower := rung(search, measured[0], up=False)) is not None:
        yield from search.probe(FIT, [at(lower)])
        ladder.append(lower)
        if rate(lower) is None:
            break
        measured.insert(0, lower)
    measured = [at(r) for r in ladder if rate(r) is not None]
    yield from calibrate(search, at(b0) if at(b0) in measured else search.best(measured, (FIT,)))
    if search.largest_fit is not None:
        search.decide(FIT, at(search.largest_fit), "kept",
                      f"largest batch that fits: {search.largest_fit}"
                      + (f" (first OOM: {search.first_oom})" if search.first_oom else
                         " (no OOM up to the top of the space)"))


def limits(search: Knowledge, at: Callable[[int], Candidate], probed: list[int]) -> None:
    """The largest batch that fits, and the first OOM above it, among those probed."""
    search.largest_fit = max((b for b in probed if not search.infeasible(at(b))), default=None)
    search.first_oom = min((b for b in probed if search.ran_oom(at(b)) and (
        search.largest_fit is None or b > search.largest_fit)), default=None)


def bisect(search: Knowledge, at: Callable[[int], Candidate], ladder: list[int]) -> Plan:
    """Probes between the largest batch that fit and the first OOM, added to `ladder`."""
    batch, sequential = search.space.batch, search.settings.sequential_probes
    assert batch is not None
    for _ in range(search.settings.bisect_steps if sequential else min(1, search.settings.bisect_steps)):
        limits(search, at, ladder)
        lo, hi = search.largest_fit, search.first_oom
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
    limits(search, at, ladder)


def rung(search: Knowledge, b: int, up: bool) -> int | None:
    """The space's next batch up (2b or more, else its top) or down (b // 2 or less); None past its end."""
    batch = search.space.batch
    assert batch is not None
    if batch.interval is not None:
        lo, hi = batch.interval
        return (None if b >= hi else min(2 * b, hi)) if up else (None if b <= lo else max(b // 2, lo))
    if up:
        above = [v for v in batch.sorted_numbers() if v > b]
        return next((v for v in above if v >= 2 * b), above[-1] if above else None)
    below = [v for v in batch.sorted_numbers() if v < b]
    return next((v for v in reversed(below) if v <= b / 2), below[0] if below else None)


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


def falling(ladder: list[int], rate: Callable[[int], float | None]) -> bool:
    """Slower at each of the last two rungs."""
    values = [rate(b) or 0.0 for b in ladder]
    return len(values) >= 3 and values[-1] < values[-2] < values[-3]
