"""The fit stage: (in this process, a warm-up job first, its figures not used) the batch
ladder at the start point, up to the first OOM and never above
it (down first when the start does not fit), bisection below that OOM (the largest batch
that fits, a side result), smaller batches while smaller is faster, and one probe measured
twice (the calibration: the job-to-job noise every one-job figure is read with)."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator

from harness.autotune.knowledge import FIT, WARMUP, Knowledge, Plan, Wave
from harness.autotune.outcome import Outcome
from harness.autotune.space import Candidate
from harness.autotune.stats import Estimate


def fit(search: Knowledge, start: Candidate) -> Plan:
    """The fit stage from the start point (module docstring)."""
    if search.settings.warmup_job is True:
        yield from warm_up(search, start)
    batch = search.space.batch
    if batch is None:
        yield from search.probe(FIT, [start])
        yield from calibrate(search, start)
        return
    b0 = int(start[batch.name])

    def at(b: int) -> Candidate:
        return start.with_(batch.name, str(b))

    def rate(b: int) -> Estimate | None:
        return search.estimate(at(b), (FIT,))

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
            b = up(search, b)
    else:  # one wave: every rung from the start up (no OOM is known when it is launched),
        # and the start twice (the calibration)
        rungs = [b0]
        while (nxt := up(search, rungs[-1])) is not None:
            rungs.append(nxt)
        yield from search.probe(FIT, [at(r) for r in rungs],
                                again=at(b0) if search.settings.calibrate else None)
        ladder = rungs
    if search.ran_oom(at(b0)):  # the start does not fit: down until a batch does
        b = down(search, b0)
        while b is not None:
            yield from search.probe(FIT, [at(b)])
            ladder.append(b)
            if not search.ran_oom(at(b)):
                break
            b = down(search, b)
    fits = [r for r in ladder if not search.infeasible(at(r))]
    ooms = [r for r in ladder if search.ran_oom(at(r))]
    search.largest_fit = max(fits) if fits else None
    search.first_oom = min((r for r in ooms if search.largest_fit is None or r > search.largest_fit),
                           default=None)
    ladder += yield from bisect(search, at)
    while True:  # down while it pays: the fastest so far is the smallest batch probed
        measured = [r for r in sorted(set(ladder)) if rate(r) is not None]
        if not measured:
            break
        best = max(measured, key=lambda r: rate(r).value)  # type: ignore[union-attr]
        lower = down(search, min(measured))
        if best != min(measured) or lower is None:
            break
        yield from search.probe(FIT, [at(lower)])
        ladder.append(lower)
        if rate(lower) is None:
            break
    measured = [at(r) for r in ladder if rate(r) is not None]
    yield from calibrate(search, at(b0) if at(b0) in measured else search.best(measured, (FIT,)))
    if search.largest_fit is not None:
        search.decide(FIT, at(search.largest_fit), "kept",
                      f"largest batch that fits: {search.largest_fit}"
                      + (f" (first OOM: {search.first_oom})" if search.first_oom else
                         " (no OOM up to the top of the space)"))


def bisect(search: Knowledge, at: Callable[[int], Candidate]) -> Generator[Wave, list[Outcome], list[int]]:
    """The largest batch that fits, between the largest that fit and the first OOM: one
    probe at a time nearest their geometric middle (bisect_steps of them), or in stage
    mode bisect_steps sizes spread evenly (log scale) in one wave."""
    batch, probed = search.space.batch, []
    assert batch is not None
    sequential = search.settings.sequential_probes
    steps = search.settings.bisect_steps if sequential else min(1, search.settings.bisect_steps)
    for _ in range(steps):
        if search.largest_fit is None or search.first_oom is None:
            break
        lo, hi = search.largest_fit, search.first_oom
        middle = batch.between(lo, hi)
        if not middle:
            break
        n = 1 if sequential else search.settings.bisect_steps
        targets = [lo * (hi / lo) ** ((i + 1) / (n + 1)) for i in range(n)]
        sizes = sorted({min(middle, key=lambda v, t=t: (abs(math.log(v / t)), v))
                        for t in targets})
        yield from search.probe(FIT, [at(m) for m in sizes])
        probed += sizes
        fits = [m for m in sizes if not search.infeasible(at(m))]
        ooms = [m for m in sizes if search.ran_oom(at(m))]
        if fits:
            search.largest_fit = max(search.largest_fit, *fits)
        above = [m for m in ooms if m > search.largest_fit]
        if above:
            search.first_oom = min(search.first_oom, *above)
        if len(fits) + len(ooms) < len(sizes):
            break  # a failure other than memory: no more bisection
    return probed


def up(search: Knowledge, b: int) -> int | None:
    """The next rung up: the first batch of the space at least twice b (an interval: 2b, at
    most its top)."""
    batch = search.space.batch
    assert batch is not None
    if batch.interval is not None:
        hi = batch.interval[1]
        return None if b >= hi else min(2 * b, hi)
    above = [v for v in batch.sorted_numbers() if v > b]
    return next((v for v in above if v >= 2 * b), above[-1] if above else None)


def down(search: Knowledge, b: int) -> int | None:
    """The next rung down: the largest batch of the space at most half b (an interval: b // 2,
    at least its bottom)."""
    batch = search.space.batch
    assert batch is not None
    if batch.interval is not None:
        lo = batch.interval[0]
        return None if b <= lo else max(b // 2, lo)
    below = [v for v in batch.sorted_numbers() if v < b]
    return next((v for v in reversed(below) if v <= b / 2), below[0] if below else None)


def calibrate(search: Knowledge, point: Candidate | None) -> Plan:
    """A probed point once more, last in the fit stage: the job-to-job noise every one-job
    figure is read with (and a drift since the first job shows in it)."""
    if (point is None or not search.settings.calibrate or search.infeasible(point)
            or len(search.outcomes(point)) != 1):
        return
    jobs = [search.job(point, FIT, 1, search.settings.probe_steps)]
    if search.room(jobs) < 1:
        return
    yield Wave(FIT, tuple(jobs))
    search.decide(FIT, point, "probed", f"calibration: job-to-job noise {search.sigma():.1%}")


def falling(ladder: list[int], rate: Callable[[int], Estimate | None]) -> bool:
    """Slower at each of the last two rungs."""
    values = [e.value if (e := rate(b)) else 0.0 for b in ladder]
    return len(values) >= 3 and values[-1] < values[-2] < values[-3]


def warm_up(search: Knowledge, start: Candidate) -> Plan:
    """One job of the start point whose figures are not used: the first job of a process
    pays its cold start (thread pools, allocator, kernels chosen on first use), which would
    read as a slower start point and a large job-to-job noise. An OOM still counts."""
    jobs = [search.job(start, WARMUP, 0, search.settings.probe_steps)]
    if search.room(jobs) < 1:
        return
    yield Wave(WARMUP, tuple(jobs))
    search.decide(WARMUP, start, "probed", "warm-up: the process's first job, its figures not"
                  " used (a cold start)")
