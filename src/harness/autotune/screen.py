"""The screen stage, one key at a time around the incumbent (loader keys first, unless the
diagnosis shows the input pipeline is not in the way), and the recheck of the batch size
once the incumbent's step changed shape. Values within spread stay as alternates for the
halving stages; values slower beyond the spread are dropped, each with why."""

from __future__ import annotations

from collections.abc import Generator

from harness.autotune.knowledge import PROBE_STAGES, RECHECK, SCREEN, Knowledge, Wave
from harness.autotune.outcome import Outcome
from harness.autotune.space import BATCH, COMPILE, LOADER, OTHER, PRECISION, Candidate
from harness.autotune.stats import Estimate


def loader_irrelevant(search: Knowledge, incumbent: Candidate) -> str | None:
    """Why the loader keys do not matter here (the diagnosis of the incumbent's probes),
    or None."""
    probes = search.outcomes(incumbent, PROBE_STAGES)
    shares = [o.data_share for o in probes if o.data_share is not None]
    bounds = [o.bound_by for o in probes if o.bound_by]
    if not shares or "data" in bounds:
        return None
    share = max(shares)
    if share < search.settings.data_share_floor:
        return (f"the input pipeline is {share:.0%} of a step (bound by"
                f" {bounds[0] if bounds else 'unknown'}; below autotune.data_share_floor"
                f" {search.settings.data_share_floor:.0%})")
    return None


def screen_order(search: Knowledge) -> list[str]:
    """Loader keys first (a data-bound step hides every other gain), then precision,
    compile, then the other keys as typed."""
    rank = {LOADER: 0, PRECISION: 1, COMPILE: 2, OTHER: 3}
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
    """The incumbent moves to the fastest value; the others within spread stay as
    alternates (the halving stages settle them); values beaten beyond spread drop."""
    key = search.space.key(name)
    points = {v: incumbent.with_(name, v) for v in key.listed()}
    points[incumbent[name]] = incumbent
    est: dict[str, Estimate] = {}
    for v, c in points.items():
        reason = search.infeasible(c)
        e = search.probe_estimate(c)
        if reason or e is None:
            if c in search.tried() and not reason:
                search.decide(SCREEN, c, "dropped", f"{name}={v}: no figures")
            continue
        est[v] = e
    if not est:
        return incumbent
    trusted = {v: e for v, e in est.items() if e.trusted} or est
    # the search goes on from the best (a knob's gain can hide behind another's, e.g.
    # bf16's behind a data-bound step); the final tie rule gives the simplest its due
    chosen = max(trusted, key=lambda v: trusted[v].value)
    for v, e in est.items():
        if v == chosen:
            continue
        if not e.trusted or e.tied(est[chosen], search.settings.min_gain):
            alternates.append((name, v))
            why = (f"untrusted probe ({', '.join(e.why)}): measured again, longer"
                   if not e.trusted else
                   f"within spread of {name}={chosen} ({e.describe()} vs"
                   f" {est[chosen].describe()})")
            search.decide(SCREEN, points[v], "kept", f"an alternate: {why}")
        else:
            search.decide(SCREEN, points[v], "dropped",
                          f"{name}={v}: {e.describe()}, slower than {name}={chosen}"
                          f" ({est[chosen].describe()}) beyond the spread")
    for v, e in est.items():  # what each value does to the step, to rank crossed candidates
        search.gains[(name, v)] = e.value / est[chosen].value
    if chosen != incumbent[name]:
        search.decide(SCREEN, points[chosen], "kept", f"{name}={chosen} goes on:"
                      f" {est[chosen].describe()}")
    return points[chosen]


def recheck(search: Knowledge, incumbent: Candidate, start: Candidate, alternates: list[tuple[str, str]]
             ) -> Generator[Wave, list[Outcome], Candidate]:
    """Sequential probes: up to two rungs each way while they pay; stage mode: the next
    rung each way, in one wave."""
    batch = search.space.batch
    others = [k.name for k in search.space.keys if k.role != BATCH]
    if batch is None or all(incumbent[n] == start[n] for n in others):
        return incumbent
    numbers = batch.sorted_numbers()

    def neighbour(c: Candidate, direction: int) -> Candidate | None:
        b = int(c[batch.name])
        side = [v for v in numbers if (v > b if direction > 0 else v < b)]
        return c.with_(batch.name, str(side[0] if direction > 0 else side[-1])) if side else None

    if not search.settings.sequential_probes:
        found = [c for d in (+1, -1) if (c := neighbour(incumbent, d)) is not None]
        yield from search.probe(RECHECK, found)
        verdicts = {c: judge_rung(search, incumbent, c, alternates) for c in found}
        faster = [c for c, v in verdicts.items() if v == "faster"]
        return max(faster, key=lambda c: search.probe_estimate(c).value) if faster else incumbent  # type: ignore[union-attr]
    for direction in (+1, -1):
        current = incumbent
        for _ in range(2):
            nxt = neighbour(current, direction)
            if nxt is None:
                break
            yield from search.probe(RECHECK, [nxt])
            if judge_rung(search, incumbent, nxt, alternates) != "faster":
                break
            incumbent = current = nxt
    return incumbent


def judge_rung(search: Knowledge, incumbent: Candidate, rung: Candidate,
               alternates: list[tuple[str, str]]) -> str | None:
    """A batch neighbour of the incumbent: 'faster' (beyond spread), 'tie' (an alternate),
    'slower' (dropped), or None (not measured, infeasible)."""
    name = search.space.batch.name  # type: ignore[union-attr]
    mine, theirs = search.probe_estimate(incumbent), search.probe_estimate(rung)
    if theirs is None or mine is None or search.infeasible(rung):
        return None
    search.gains[(name, rung[name])] = theirs.value / mine.value
    here = f"{name}={incumbent[name]} ({mine.describe()})"
    if not theirs.trusted or theirs.tied(mine, search.settings.min_gain):
        alternates.append((name, rung[name]))
        search.decide(RECHECK, rung, "kept", "an alternate: " + (
            f"untrusted probe ({', '.join(theirs.why)}): measured again, longer"
            if not theirs.trusted else f"{theirs.describe()}: within spread of {here}"))
        return "tie"
    if theirs.value < mine.value:
        search.decide(RECHECK, rung, "dropped",
                      f"{theirs.describe()}: slower than {here} beyond the spread")
        return "slower"
    search.decide(RECHECK, rung, "kept",
                  f"{theirs.describe()}: faster than {here} beyond the spread; goes on")
    return "faster"
