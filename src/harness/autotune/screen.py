"""The screen stage, one key at a time around the incumbent, and the recheck of the batch
size once the incumbent's step changed shape (docs/autotune.md, "How it searches")."""

from __future__ import annotations

from collections.abc import Generator

from harness.autotune.knowledge import PROBE_STAGES, RECHECK, SCREEN, Knowledge, Wave
from harness.autotune.outcome import Outcome
from harness.autotune.score import Estimate
from harness.autotune.space import BATCH, CHECKPOINT, COMPILE, LOADER, OTHER, PRECISION, Candidate


def loader_irrelevant(search: Knowledge, incumbent: Candidate) -> str | None:
    """Why the loader keys do not matter here (the diagnosis of the incumbent's probes), or None."""
    probes = search.outcomes(incumbent, PROBE_STAGES)
    shares = [o.data_share for o in probes if o.data_share is not None]
    bounds = [o.bound_by for o in probes if o.bound_by]
    if not shares or "data" in bounds or max(shares) >= search.settings.data_share_floor:
        return None
    return (f"the input pipeline is {max(shares):.0%} of a step (bound by"
            f" {bounds[0] if bounds else 'unknown'}; below autotune.data_share_floor"
            f" {search.settings.data_share_floor:.0%})")


def screen_order(search: Knowledge) -> list[str]:
    """Loader keys first (a data-bound step hides every other gain), precision, checkpointing
    (both change what fits), compile, the rest."""
    rank = {LOADER: 0, PRECISION: 1, CHECKPOINT: 2, COMPILE: 3, OTHER: 4}
    keys = [k for k in search.space.keys if k.role != BATCH]
    return [k.name for k in sorted(keys, key=lambda k: (rank[k.role], search.space.keys.index(k)))]


def screen(search: Knowledge, incumbent: Candidate, alternates: list[tuple[str, str]]
            ) -> Generator[Wave, list[Outcome], Candidate]:
    """Each key in screen order, probed at the incumbent; the incumbent as it ends."""
    skip_loaders = loader_irrelevant(search, incumbent)
    for name in screen_order(search):
        key = search.space.key(name)
        if key.role == LOADER and skip_loaders:
            search.decide(SCREEN, f"{name}=*", "collapsed",
                          f"does not matter: {skip_loaders}; kept at {incumbent[name]}")
            continue
        others = [incumbent.with_(name, v) for v in key.listed() if v != incumbent[name]]
        yield from search.probe(SCREEN, others)
        incumbent = screen_key(search, name, incumbent, alternates)
    return incumbent


def screen_key(search: Knowledge, name: str, incumbent: Candidate, alternates: list[tuple[str, str]]
               ) -> Candidate:
    """The incumbent moves to the fastest value, even within spread; the others are weighed."""
    points = {v: incumbent.with_(name, v) for v in search.space.key(name).listed()}
    points[incumbent[name]] = incumbent
    est: dict[str, Estimate] = {}
    for v, c in points.items():
        reason, e = search.infeasible(c), search.estimate(c)
        if not reason and e is not None:
            est[v] = e
        elif not reason and c in search.tried():
            search.decide(SCREEN, c, "dropped", f"{name}={v}: no figures")
    if not est:
        return incumbent
    chosen = search.best(list(points.values()))[name]  # type: ignore[index]
    for v, e in est.items():
        if v != chosen:  # never faster: the chosen is the fastest trusted
            weigh(search, SCREEN, name, points[v], e, points[chosen], est[chosen], alternates)
    if chosen != incumbent[name]:
        search.decide(SCREEN, points[chosen], "kept", f"{name}={chosen} goes on: {est[chosen].describe()}")
    return points[chosen]


def recheck(search: Knowledge, incumbent: Candidate, start: Candidate, alternates: list[tuple[str, str]]
            ) -> Generator[Wave, list[Outcome], Candidate]:
    """Up to two batch rungs each way while they pay (stage mode: one each way, in one wave),
    per checkpointing setting: a rung up that runs out of memory is tried with checkpointing,
    a rung down without it (the smaller batch may fit without the recompute)."""
    batch, space = search.space.batch, search.space
    if batch is None or all(incumbent[k.name] == start[k.name] for k in search.space.keys if k.role != BATCH):
        return incumbent
    numbers = batch.sorted_numbers()

    def neighbour(c: Candidate, direction: int) -> Candidate | None:
        b = int(c[batch.name])
        side = [v for v in numbers if (v > b if direction > 0 else v < b)]
        if not side:
            return None
        rung = c.with_(batch.name, str(side[0] if direction > 0 else side[-1]))
        return (space.plainer(rung) or rung) if direction < 0 else rung

    def out_of_memory(c: Candidate) -> bool:
        return search.ran_oom(c) or search.above_known_oom(c) is not None

    def faster(rung: Candidate) -> bool:
        mine, theirs = search.estimate(incumbent), search.estimate(rung)
        if theirs is None or mine is None or search.infeasible(rung):
            return False
        return weigh(search, RECHECK, batch.name, rung, theirs, incumbent, mine, alternates)

    if not search.settings.sequential_probes:
        found = [c for d in (+1, -1) if (c := neighbour(incumbent, d)) is not None]
        up = neighbour(incumbent, +1)
        if up is not None and (saving := space.saving(up)) is not None:
            found.append(saving)  # the rung up may fit only with checkpointing
        yield from search.probe(RECHECK, found)
        wins = [c for c in found if faster(c)]
        return search.best(wins) or incumbent  # each trusted and feasible: the fastest
    for direction in (+1, -1):
        current = incumbent
        for _ in range(2):
            nxt = neighbour(current, direction)
            if nxt is None:
                break
            yield from search.probe(RECHECK, [nxt])
            other = space.saving(nxt) if out_of_memory(nxt) else None
            if other is not None:  # what fits only with checkpointing, at these settings
                yield from search.probe(RECHECK, [other])
                nxt = other
            if not faster(nxt):
                break
            incumbent = current = nxt
    return incumbent


def weigh(search: Knowledge, stage: str, name: str, point: Candidate, theirs: Estimate,
          incumbent: Candidate, mine: Estimate, alternates: list[tuple[str, str]]) -> bool:
    """`point` against the incumbent: kept as an alternate, dropped, or faster beyond spread (True)."""
    # a point may differ in more than `name`: a batch up with checkpointing (the recheck)
    single = all(v == incumbent[k] for k, v in point.items if k != name)
    if single:
        search.gains[(name, point[name])] = theirs.value / mine.value  # to rank crossed candidates
    here = f"{name}={incumbent[name]} ({mine.describe()})"
    if not theirs.trusted or theirs.tied(mine, search.settings.min_gain):
        if single:
            alternates.append((name, point[name]))
        else:  # kept whole: its batch alone swapped into the incumbent might not fit
            search.kept.append(point)
        search.decide(stage, point, "kept", "an alternate: " + (
            f"untrusted probe ({', '.join(theirs.cautions)}): measured again, longer"
            if not theirs.trusted else f"{theirs.describe()}: within spread of {here}"))
        return False
    slower = theirs.value < mine.value
    search.decide(stage, point, "dropped" if slower else "kept", f"{theirs.describe()}: "
                  + ("slower" if slower else "faster") + f" than {here} beyond the spread"
                  + ("" if slower else "; goes on"))
    return not slower
