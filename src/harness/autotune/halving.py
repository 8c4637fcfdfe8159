"""Successive halving over the incumbent and its alternates, the winner (the simplest of those
tied with the best), and the confirm stage: the winner against the default, alternating."""

from __future__ import annotations

import math

from harness.autotune.knowledge import CONFIRM, FINAL, SCREEN, Job, Knowledge, Plan, Wave
from harness.autotune.score import ahead, in_words
from harness.autotune.space import Candidate
from harness.judge import Verdict, faster, fastest

CROSS_LIMIT = 4  # alternates are crossed while that makes at most this many candidates
MIN_CONFIRM = 4  # the fewest jobs the confirm stage runs on: two rounds of the winner and the default
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
    cap = search.settings.max_candidates
    for c in pool[cap:]:
        search.decide(SCREEN, c, "dropped", f"beyond autotune.max_candidates={cap}")
    return pool[:cap]


def halving(search: Knowledge, incumbent: Candidate, alternates: list[tuple[str, str]]) -> Plan:
    """Halving stages s1, s2, ... over the pool until one is left, the rest tie or the budget stops."""
    search.pool = halving_pool(search, incumbent, alternates)
    base = search.estimate(incumbent)
    retries: dict[Candidate, int] = {}

    def predicted(c: Candidate) -> float:
        """Unmeasured (crossed) candidates: the incumbent x each swapped value's gain."""
        if (known := search.evidence(c)) is not None:
            return known.band.value
        gains = (search.gains.get((k, v), 1.0) for k, v in c.items if v != incumbent[k])
        return math.prod(gains, start=base.value if base else 0.0)

    for k in range(1, search.settings.max_stages + 1):
        if len(search.pool) == 1 and (only := search.evidence(search.pool[0])) and only.band.trusted:
            break
        stage, steps = f"s{k}", search.settings.probe_steps * search.settings.growth ** k
        # about as many jobs as the confirm stage: a small pool gets more rounds
        rounds = min(search.settings.max_rounds, max(1 + k, math.ceil(
            2 * search.settings.confirm_rounds / len(search.pool))))
        search.pool = order = sorted(search.pool, key=lambda c: -predicted(c))
        kept: int | None = None  # the confirm stage's whole reserve, until the halving would end for it
        while search.room(jobs := alternating(search, order, stage, rounds, steps), kept) < len(jobs):
            if rounds > 2:
                rounds -= 1
            elif len(order) > 2:
                search.left_out.append(dropped := order.pop())
                search.decide(stage, dropped, "budget", "left out: the budget holds fewer jobs")
                search.stop_reason = search.stop_reason or search.budget_words(
                    f"at stage {stage}: candidates left out")
            elif kept is None:  # the confirm stage keeps the least it runs on: two rounds
                kept = MIN_CONFIRM
            else:  # the halving ends here; the confirm stage keeps its reserve
                search.stop_reason = search.budget_words(f"before stage {stage}")
                search.decide(stage, "*", "budget", search.stop_reason)
                return
        yield Wave(stage, tuple(jobs))
        search.pool, settled = halving_verdict(search, stage, order, retries)
        if settled or not search.pool:
            break


def halving_verdict(search: Knowledge, stage: str, pool: list[Candidate],
                    retries: dict[Candidate, int]) -> tuple[list[Candidate], bool]:
    """Who goes on after a halving stage, and whether it settled: each candidate against the
    stage's fastest by the judge, on their pairs of every halving stage so far."""
    # a candidate whose job of this stage ran out of memory or was tight is out of the running
    ev = {c: e for c in pool if not search.infeasible(c) and (e := search.evidence(c, stage)) is not None}
    for c in [c for c in pool if c not in ev]:
        search.decide(stage, c, "infeasible", search.infeasible(c) or "no figures")
    carried = []
    for c in (c for c in ev if not ev[c].band.trusted):
        retries[c] = retries.get(c, 0) + 1
        cautions = ", ".join(ev[c].band.cautions)
        if retries[c] > search.settings.retries:
            search.decide(stage, c, "dropped", f"untrusted in {retries[c]} stages ({cautions}):"
                          " no verdict can rest on it")
        else:
            carried.append(c)
            search.decide(stage, c, "retry", f"{cautions}: measured again, longer; never ranked on this")
    trusted = sorted((c for c in ev if ev[c].band.trusted), key=lambda c: -ev[c].band.value)
    if not trusted:
        return carried, False
    best = trusted[0]
    verdicts = {c: search.compare(ev[c], ev[best]) for c in trusted[1:]}  # the best over c
    ties = [c for c in trusted[1:] if not faster(verdicts[c])]
    # a big pool must shrink (ties kept up to half of it); a small one keeps every tie
    n = len(trusted)
    cap = max(math.ceil(n * search.settings.keep), math.ceil(n / 2)) if n > 3 else n
    kept = [best, *ties][:cap]
    simplest = min([best, *ties], key=search.space.simplicity)
    if simplest not in kept:  # the tie rule's answer is never dropped by rank
        kept.append(simplest)
    for i, c in enumerate(trusted):
        place = f"rank {i + 1} of {n}"
        versus = f"the best {in_words(verdicts[c])} it" if c in verdicts and verdicts[c] else ""
        if c in kept:
            search.decide(stage, c, "kept", ", ".join(filter(None, (ev[c].band.describe(), place, versus))))
        elif c in ties:
            search.decide(stage, c, "dropped", f"{ev[c].band.describe()}: within spread of the best"
                          f" ({versus}) but {place}; a stage keeps the best"
                          f" {search.settings.keep:.0%} and the ties, at most half")
        else:
            search.decide(stage, c, "dropped", f"{ev[c].band.describe()}: slower than the best"
                          f" ({ev[best].band.describe()}) beyond the spread: {versus}")
    # settled (judge.fastest's sense): one left, or every one left the same as the best within
    # autotune.min_gain; else the next stage measures them longer, its pairs added to these
    settled = not carried and all(verdicts[c] and verdicts[c].kind == "same" for c in kept if c != best)
    return kept + carried, settled


def alternating(search: Knowledge, order: list[Candidate], stage: str, rounds: int, steps: int,
                first: int = 0) -> list[Job]:
    """Every candidate once per round from round `first`, forward then reversed (drift hits all alike)."""
    return [search.job(c, stage, first + r, steps) for r in range(rounds)
            for c in (order if r % 2 == 0 else order[::-1])]


def settle_leader(search: Knowledge) -> None:
    """The winner of the pool (trusted figures first): of the fastest and its ties (judge.fastest),
    the simplest the fastest's estimate is not ahead of by autotune.min_gain. An unproven gain past
    min_gain goes to the faster: two searches then name one winner, or each one's tie holds the other."""
    # the budget's left-outs were measured before it cut them: still in the running
    running = [*search.pool, *search.left_out] or search.tried()
    pool = [c for c in dict.fromkeys(running) if not search.infeasible(c)]
    ev = {c: e for c in pool if (e := search.evidence(c)) is not None}
    trusted = {c: e for c, e in ev.items() if e.band.trusted}
    ranked = trusted or ev
    found = fastest(ranked, search.settings.min_gain, noise=search.sigma())
    if found is None or not (search.winner is None or search.status in ("budget", "interrupted")):
        return
    tied = [found.key, *found.ties]
    close = [c for c in tied if c == found.key or not ahead(
        search.compare(ranked[c], ranked[found.key]), search.settings.min_gain)]
    search.winner = min(close, key=search.space.simplicity)
    search.winner_trusted = bool(trusted)
    search.tied_with = [c for c in tied if c != search.winner]
    if search.tied_with and search.status == "running":
        search.decide(FINAL, search.winner, "tie", "within spread of " + "; ".join(
            f"{c.label()} ({ranked[c].band.describe()})" for c in search.tied_with)
            + f": the simplest of those within autotune.min_gain of the fastest wins ({SIMPLER})")


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
    # a tight default still runs (the ratio is over it); a failed one (the start point) cannot
    if failed := search.failed(default):
        search.confirm = {"default_failed": failed}
        return
    steps, rounds = search.confirm_steps(), search.settings.confirm_rounds
    jobs = alternating(search, [winner, default], CONFIRM, rounds, steps)
    room = search.room(jobs, confirm_kept=0)
    if room < MIN_CONFIRM:
        search.stop_reason = search.budget_words("before the confirm stage")
        return
    search.confirm = {"steps": steps, "rounds": rounds}
    yield Wave(CONFIRM, tuple(jobs[:room - room % 2]))
    for retry in range(search.settings.retries + 1):  # a side with no trusted job: measured again
        w, d = search.evidence(winner, CONFIRM), search.evidence(default, CONFIRM)
        if retry == search.settings.retries or w is None or d is None or (w.band.trusted and d.band.trusted):
            break
        steps *= search.settings.growth
        more = alternating(search, [winner, default], CONFIRM, 2, steps, first=rounds)
        if search.room(more, confirm_kept=0) < len(more):
            break
        why = ", ".join(dict.fromkeys(e for side in (w, d) if not side.band.trusted
                                      for e in side.band.cautions))
        search.decide(CONFIRM, winner, "retry", f"{why}: both measured again, longer")
        search.confirm["rounds"] = rounds = rounds + 2
        yield Wave(CONFIRM, tuple(more))
    verdict = search.compare(d, w)  # the winner over the default, paired by round
    search.confirm.update(winner=w and w.band, default=d and d.band, verdict=verdict,
                          default_failed=search.failed(default))
    if verdict is not None and not search.confirm["default_failed"] and not faster(verdict):
        # the judge does not find the winner faster: nothing to change, so the default stands
        search.confirm["default_stands"] = winner
        search.tied_with = [*([] if verdict.real else [winner]),  # slower beyond the noise: no tie
                            *(c for c in search.tied_with if c != default)]
        search.winner = default
        search.decide(CONFIRM, default, "winner", f"the default stands: {stood(winner, verdict)}")


def stood(winner: Candidate, verdict: Verdict) -> str:
    """Why the default stands against the winner the confirm stage measured."""
    return f"{winner.label()} read {in_words(verdict)} it, " + (
        "slower" if verdict.real else "not beyond the noise")
