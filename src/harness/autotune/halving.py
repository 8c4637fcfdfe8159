"""Successive halving over the incumbent and its alternates, the winner (the simplest of those
tied with the best), and the confirm stage: the winner against the default, alternating."""

from __future__ import annotations

import math

from harness.autotune.knowledge import CONFIRM, FINAL, SCREEN, Job, Knowledge, Plan, Stop, Wave
from harness.autotune.space import Candidate
from harness.judge import fastest

CROSS_LIMIT = 4  # alternates are crossed while that makes at most this many candidates
SIMPLER = "no compile, fp32, no checkpointing, fewer workers, smaller batch"


def halving_pool(search: Knowledge, incumbent: Candidate, alternates: list[tuple[str, str]]
                  ) -> list[Candidate]:
    """The incumbent and its alternates, crossed up to CROSS_LIMIT candidates, else one at a time."""
    values: dict[str, list[str]] = {}
    for k, v in alternates:
        values.setdefault(k, [incumbent[k]]).append(v)
    combos = [incumbent]
    for k, vs in values.items():
        combos = [c.with_(k, v) for c in combos for v in dict.fromkeys(vs)]
    if len(combos) > CROSS_LIMIT:
        corner = incumbent
        for k, vs in values.items():
            corner = corner.with_(k, min(vs, key=search.space.key(k).simplicity))
        combos = [incumbent, *(incumbent.with_(k, v) for k, v in alternates), corner]
    combos += search.kept  # alternates that moved several keys (a batch with checkpointing)
    pool = [c for c in dict.fromkeys(combos) if c == incumbent
            or (not search.infeasible(c) and not search.above_known_oom(c))]
    for c in pool[search.settings.max_candidates:]:
        search.decide(SCREEN, c, "dropped", "beyond autotune.max_candidates"
                      f"={search.settings.max_candidates}")
    return pool[:search.settings.max_candidates]


def halving(search: Knowledge, incumbent: Candidate, alternates: list[tuple[str, str]]) -> Plan:
    """Halving stages s1, s2, ... over the pool until one is left, the rest tie or the budget stops."""
    search.pool = halving_pool(search, incumbent, alternates)
    base = search.estimate(incumbent)
    retries: dict[Candidate, int] = {}

    def predicted(c: Candidate) -> float:
        """Unmeasured (crossed) candidates: the incumbent x each swapped value's gain."""
        known = search.latest(c)
        if known is not None:
            return known.value
        value = base.value if base else 0.0
        for k, v in c.items:
            if v != incumbent[k]:
                value *= search.gains.get((k, v), 1.0)
        return value

    for k in range(1, search.settings.max_stages + 1):
        if len(search.pool) == 1 and (only := search.latest(search.pool[0])) and only.trusted:
            break
        stage = f"s{k}"
        steps = search.settings.probe_steps * search.settings.growth ** k
        # about as many jobs as the confirm stage: a small pool gets more rounds
        rounds = min(search.settings.max_rounds, max(1 + k, math.ceil(
            2 * search.settings.confirm_rounds / len(search.pool))))
        order = sorted(search.pool, key=lambda c: -predicted(c))
        while search.room(jobs := alternating(search, order, stage, rounds, steps)) < len(jobs):
            if rounds > 2:
                rounds -= 1
            elif len(order) > 2:
                dropped = order.pop()
                search.decide(stage, dropped, "budget", "left out: the budget holds fewer jobs")
                search.stop_reason = search.stop_reason or search.budget_words(
                    f"at stage {stage}: candidates left out")
                search.left_out.append(dropped)
            else:  # the halving ends here; the confirm stage keeps its reserve
                search.stop_reason = search.budget_words(f"before stage {stage}")
                search.decide(stage, "*", "budget", search.stop_reason)
                search.pool = order
                return
        search.pool = order
        yield Wave(stage, tuple(jobs))
        search.pool, settled = halving_verdict(search, stage, order, rounds, retries)
        if settled or not search.pool:
            break


def halving_verdict(search: Knowledge, stage: str, pool: list[Candidate], rounds: int,
                    retries: dict[Candidate, int]) -> tuple[list[Candidate], bool]:
    """Who goes on after a halving stage, and whether the stage settled it."""
    # a candidate whose job of this stage ran out of memory or was tight is out of the running
    est = {c: e for c in pool if not search.infeasible(c)
           and (e := search.estimate(c, (stage,))) is not None}
    for c in pool:
        if c not in est:
            search.decide(stage, c, "infeasible", search.infeasible(c) or "no figures")
    carried = []
    for c in (c for c in est if not est[c].trusted):
        retries[c] = retries.get(c, 0) + 1
        if retries[c] > search.settings.retries:
            search.decide(stage, c, "dropped", f"untrusted in {retries[c]} stages"
                          f" ({', '.join(est[c].cautions)}): no verdict can rest on it")
        else:
            carried.append(c)
            search.decide(stage, c, "retry", f"{', '.join(est[c].cautions)}: measured again,"
                          " longer; never ranked on this")
    trusted = sorted((c for c in est if est[c].trusted), key=lambda c: -est[c].value)
    if not trusted:
        return carried, False
    best, gain = trusted[0], search.settings.min_gain
    n_keep = max(1, math.ceil(len(trusted) * search.settings.keep))
    ties = [c for c in trusted[n_keep:] if est[c].tied(est[best], gain)]
    # a big pool must shrink (ties kept up to half of it); a small one keeps every tie
    cap = max(n_keep, math.ceil(len(trusted) / 2)) if len(trusted) > 3 else len(trusted)
    kept = [c for c in (trusted[:n_keep] + ties)[:cap]
            if c == best or est[c].tied(est[best], gain)]
    simplest = min([best, *ties], key=search.space.simplicity)
    if simplest not in kept:  # the tie rule's answer is never dropped by rank
        kept.append(simplest)
    for i, c in enumerate(trusted):
        place = f"rank {i + 1} of {len(trusted)}"
        if c in kept:
            search.decide(stage, c, "kept", f"{est[c].describe()}, {place}")
        elif est[c].tied(est[best], gain):
            search.decide(stage, c, "dropped", f"{est[c].describe()}: within spread of the"
                          f" best ({est[best].describe()}) but {place}; a stage keeps the"
                          f" best {search.settings.keep:.0%} and the ties, at most half")
        else:
            search.decide(stage, c, "dropped", f"{est[c].describe()}: slower than the best"
                          f" ({est[best].describe()}) beyond the spread")
    # settled: one left, or every one left tied with the best on a measured spread (2+ rounds)
    settled = not carried and (len(kept) == 1 or (
        rounds >= 2 and all(est[c].tied(est[best], gain) for c in kept)))
    return kept + carried, settled


def alternating(search: Knowledge, order: list[Candidate], stage: str, rounds: int, steps: int,
                first: int = 0) -> list[Job]:
    """Every candidate once per round from round `first`, forward then reversed (drift hits all alike)."""
    return [search.job(c, stage, first + r, steps) for r in range(rounds)
            for c in (order if r % 2 == 0 else order[::-1])]


def settle_leader(search: Knowledge) -> None:
    """The winner among the pool (judge.fastest's tie rule), on trusted figures while any has them."""
    # the budget's left-outs were measured before it cut them: still in the running
    running = [*search.pool, *search.left_out] or search.tried()
    pool = [c for c in dict.fromkeys(running) if not search.infeasible(c)]
    est = {c: e for c in pool if (e := search.latest(c)) is not None}
    trusted = {c: e for c, e in est.items() if e.trusted}
    ranked = trusted or est
    found = fastest(ranked, search.settings.min_gain, search.space.simplicity)
    if found is not None and (search.winner is None or search.status in ("budget", "interrupted")):
        search.winner, search.winner_trusted = found.key, bool(trusted)  # type: ignore[assignment]
        search.tied_with = [c for c in ranked if c in found.ties]
        if search.tied_with and search.status == "running":
            search.decide(FINAL, search.winner, "tie", "within spread of " + "; ".join(
                f"{c.label()} ({ranked[c].describe()})" for c in search.tied_with)
                + f": the simplest wins ({SIMPLER})")


def confirm(search: Knowledge) -> Plan:
    """The winner against the default in fresh jobs; an untrusted side again, longer (autotune.retries)."""
    winner, default = search.winner, search.space.default()
    if winner is None:
        return
    search.decide(FINAL, winner, "winner", "fastest" + (" (a tie)" if search.tied_with else "")
                  + ("" if search.winner_trusted else "; on untrusted figures only"))
    if winner == default:
        search.confirm = {"same_as_default": True}
        return
    failed = search.failed(default)  # a tight default still runs: the ratio is over it
    if failed:  # measured already (the start point): no figure to confirm against
        search.confirm = {"default_failed": failed}
        return
    steps, rounds = search.confirm_steps(), search.settings.confirm_rounds
    jobs = alternating(search, [winner, default], CONFIRM, rounds, steps)
    room = search.room(jobs, reserve=False)
    if room < 4:
        raise Stop(search.budget_words("before the confirm stage"))
    search.confirm = {"steps": steps, "rounds": rounds}
    yield Wave(CONFIRM, tuple(jobs[:room - room % 2]))
    for retry in range(search.settings.retries + 1):  # a side with no trusted job: measured again
        w, d = search.estimate(winner, (CONFIRM,)), search.estimate(default, (CONFIRM,))
        if retry == search.settings.retries or w is None or d is None or (w.trusted and d.trusted):
            break
        steps *= search.settings.growth
        more = alternating(search, [winner, default], CONFIRM, 2, steps, first=rounds)
        if search.room(more, reserve=False) < len(more):
            break
        why = ", ".join(dict.fromkeys(e for side in (w, d) if not side.trusted for e in side.cautions))
        search.decide(CONFIRM, winner, "retry", f"{why}: both measured again, longer")
        rounds += 2
        search.confirm["rounds"] = rounds
        yield Wave(CONFIRM, tuple(more))
    search.confirm.update(winner=w, default=d, default_failed=search.failed(default))
    if w is not None and d is not None and not search.confirm["default_failed"] and w.tied(
            d, search.settings.min_gain):
        # the judge cannot tell the winner from the default: nothing to change, so it stands
        search.confirm["default_stands"] = winner
        search.tied_with = [winner, *(c for c in search.tied_with if c != default)]
        search.winner = default
        search.decide(CONFIRM, default, "winner", f"the default stands: {winner.label()}"
                      f" ({w.describe()}) is not beyond its noise ({d.describe()})")
