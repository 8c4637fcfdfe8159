"""The screen stage, one key at a time around the incumbent, and the recheck of the batch
size once the incumbent's step changed shape (docs/autotune.md, "How it searches")."""

from __future__ import annotations

from collections.abc import Generator

from harness.autotune.knowledge import PROBE_STAGES, RECHECK, SCREEN, Knowledge, Wave
from harness.autotune.outcome import Outcome
from harness.autotune.score import Estimate, in_words
from harness.autotune.space import BATCH, CHECKPOINT, COMPILE, LOADER, OTHER, PRECISION, Candidate
from harness.judge import Evidence, faster


def screen(search: Knowledge, incumbent: Candidate, alternates: list[tuple[str, str]]
            ) -> Generator[Wave, list[Outcome], Candidate]:
    """Each key but the batch, probed at the incumbent: loader keys first (a data-bound step hides
    every other gain), precision, checkpointing (both change what fits), compile, the rest; the
    incumbent as it ends."""
    # the loader keys do not matter where the incumbent's probes wait little for data, not bound by it
    probes, floor = search.outcomes(incumbent, PROBE_STAGES), search.settings.data_share_floor
    shares = [o.data_share for o in probes if o.data_share is not None]
    bounds = [o.bound_by for o in probes if o.bound_by]
    skip_loaders = shares and "data" not in bounds and max(shares) < floor
    rank, keys = {LOADER: 0, PRECISION: 1, CHECKPOINT: 2, COMPILE: 3, OTHER: 4}, search.space.keys
    for key in sorted((k for k in keys if k.role != BATCH), key=lambda k: (rank[k.role], keys.index(k))):
        name = key.name
        if key.role == LOADER and skip_loaders:
            search.decide(SCREEN, f"{name}=*", "collapsed", f"does not matter: the input pipeline is"
                          f" {max(shares):.0%} of a step (bound by {bounds[0] if bounds else 'unknown'};"
                          f" below autotune.data_share_floor {floor:.0%}); kept at {incumbent[name]}")
            continue
        points = {v: incumbent.with_(name, v) for v in key.listed()}
        yield from search.probe(SCREEN, [c for v, c in points.items() if v != incumbent[name]])
        # the incumbent moves to the fastest value, even within spread; the others are weighed
        points[incumbent[name]] = incumbent
        est: dict[str, Estimate] = {}
        for v, c in points.items():
            reason, e = search.infeasible(c), search.estimate(c)
            if not reason and e is not None:
                est[v] = e
            elif not reason and c in search.tried():
                search.decide(SCREEN, c, "dropped", f"{name}={v}: no figures")
        if not est:
            continue
        chosen = search.best(list(points.values()))[name]  # type: ignore[index]
        for v, e in est.items():
            if v != chosen:  # never faster: the chosen is the fastest trusted
                weigh(search, SCREEN, name, points[v], e, points[chosen], est[chosen], alternates)
        if chosen != incumbent[name]:
            incumbent = points[chosen]
            search.decide(SCREEN, incumbent, "kept", f"{name}={chosen} goes on: {est[chosen].describe()}")
    return incumbent


def recheck(search: Knowledge, incumbent: Candidate, start: Candidate, alternates: list[tuple[str, str]]
            ) -> Generator[Wave, list[Outcome], Candidate]:
    """Up to two batch rungs each way while they pay (stage mode: one each way, in one wave),
    per checkpointing setting: a rung up that runs out of memory is tried with checkpointing,
    a rung down without it (the smaller batch may fit without the recompute)."""
    batch, space = search.space.batch, search.space
    if batch is None or all(incumbent[k.name] == start[k.name] for k in space.keys if k.role != BATCH):
        return incumbent
    numbers = batch.sorted_numbers()

    def neighbour(c: Candidate, direction: int) -> Candidate | None:
        b = int(c[batch.name])
        side = [v for v in numbers if (v > b if direction > 0 else v < b)]
        if not side:
            return None
        rung = c.with_(batch.name, str(side[0] if direction > 0 else side[-1]))
        return (space.checkpointed(rung, on=False) or rung) if direction < 0 else rung

    def wins(rung: Candidate) -> bool:
        mine, theirs = search.estimate(incumbent), search.estimate(rung)
        return (mine is not None and theirs is not None and not search.infeasible(rung)
                and weigh(search, RECHECK, batch.name, rung, theirs, incumbent, mine, alternates))

    if not search.settings.sequential_probes:
        up, down = neighbour(incumbent, +1), neighbour(incumbent, -1)
        # the rung up may fit only with checkpointing
        found = [c for c in (up, down, up and space.checkpointed(up)) if c is not None]
        yield from search.probe(RECHECK, found)
        return search.best([c for c in found if wins(c)]) or incumbent  # each trusted and feasible
    for direction in (+1, -1):
        current = incumbent
        for _ in range(2):
            nxt = neighbour(current, direction)
            if nxt is None:
                break
            yield from search.probe(RECHECK, [nxt])
            # out of memory (it or a twin below it): does it fit with checkpointing?
            if search.above_known_oom(nxt) and (other := space.checkpointed(nxt)) is not None:
                yield from search.probe(RECHECK, [other])
                nxt = other
            if not wins(nxt):
                break
            incumbent = current = nxt
    return incumbent


def weigh(search: Knowledge, stage: str, name: str, point: Candidate, theirs: Estimate,
          incumbent: Candidate, mine: Estimate, alternates: list[tuple[str, str]]) -> bool:
    """`point` against the incumbent by the judge (their probes' bands: a probe runs alone):
    kept as an alternate, dropped, or faster beyond the noise (True)."""
    # a point may differ in more than `name`: a batch up with checkpointing (the recheck)
    single = all(v == incumbent[k] for k, v in point.items if k != name)
    verdict = search.compare(Evidence(mine), Evidence(theirs))  # point / incumbent
    if single and verdict is not None and verdict.ratio:
        search.gains[(name, point[name])] = verdict.ratio  # to rank crossed candidates
    here = f"{name}={incumbent[name]} ({mine.describe()})"
    if not theirs.trusted or verdict is None or not verdict.real:
        if single:
            alternates.append((name, point[name]))
        else:  # kept whole: its batch alone swapped into the incumbent might not fit
            search.kept.append(point)
        search.decide(stage, point, "kept", "an alternate: " + (
            f"untrusted probe ({', '.join(theirs.cautions)}): measured again, longer"
            if not theirs.trusted else f"{theirs.describe()}: within spread of {here},"
            f" {in_words(verdict)} it"))
        return False
    search.decide(stage, point, "kept" if faster(verdict) else "dropped", f"{theirs.describe()}: "
                  + ("faster" if faster(verdict) else "slower") + f" than {here} beyond the spread,"
                  f" {in_words(verdict)} it" + ("; goes on" if faster(verdict) else ""))
    return faster(verdict)
