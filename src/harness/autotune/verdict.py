"""autotune.json's body and the one verdict line, from a Search at any point of its life
(done, stopped by the budget, interrupted, or with nothing feasible)."""

from __future__ import annotations

from typing import Any

from harness.autotune.halving import SIMPLER, stood
from harness.autotune.knowledge import FINAL, Knowledge, stage_rank
from harness.autotune.space import Candidate
from harness.judge import faster
from harness.measured import duration

SCHEMA_VERSION = 1
TIE_RULE = (f"not beyond the noise of the fastest: the simplest of those within autotune.min_gain of it"
            f" by the judge's estimate wins ({SIMPLER})")


def speedup(search: Knowledge) -> dict[str, Any] | None:
    """The winner over the default by the judge: on the confirm stage's rounds, else the search's figures."""
    confirm, winner, default = search.confirm or {}, search.winner, search.space.default()
    if confirm.get("same_as_default"):
        return {"value": 1.0, "low": 1.0, "high": 1.0, "confirmed": True, "within_spread": True,
                "trusted": search.winner_trusted, "note": "the default configuration is the best"}
    verdict, w, d = confirm.get("verdict"), confirm.get("winner"), confirm.get("default")
    confirmed = verdict is not None
    if not confirmed and winner is not None and default in search.tried():
        w, d = search.evidence(winner), search.evidence(default)
        verdict, w, d = search.compare(d, w), w and w.band, d and d.band
    if verdict is None:
        return None
    found = {"value": verdict.ratio, "low": verdict.low, "high": verdict.high, "pairs": verdict.pairs,
             "confirmed": confirmed, "within_spread": not faster(verdict), "trusted": w.trusted and d.trusted}
    if (stands := confirm.get("default_stands")) is not None:  # set only beside both confirm figures
        found.update(within_spread=True, note=f"the default stands: {stood(stands, verdict)}")
    return found


def in_the_running(search: Knowledge) -> tuple[list[dict[str, Any]], str | None]:
    """Stopped early: the winner's ratio over each candidate still in the running, and 'sure'."""
    if search.status not in ("budget", "interrupted") or search.winner is None:
        return [], None
    mine, found = search.evidence(search.winner), []
    for c in dict.fromkeys([*search.pool, *search.left_out]):
        if c == search.winner or search.infeasible(c):
            continue
        theirs = search.evidence(c)
        verdict = search.compare(theirs, mine)  # the winner over it
        if theirs is None:
            found.append({"candidate": c.as_dict(), "separated": False,
                          "note": "never measured: the budget left it out"})
        elif verdict is not None:
            found.append({"candidate": c.as_dict(), "winner_over_it": verdict.ratio,
                          "low": verdict.low, "high": verdict.high, "separated":
                          mine.band.trusted and theirs.band.trusted and faster(verdict)})
    unsure = [Candidate(tuple(r["candidate"].items())).label() for r in found if not r["separated"]]
    sure = ("sure: beyond the spread of every candidate still in the running" if not unsure
            else "not sure: " + "; ".join(unsure) + " within spread of the best so far")
    return found, sure


def points(search: Knowledge) -> list[dict[str, Any]]:
    """Every point tried, with the deepest stage that ranked it and its figure there (the one
    its verdicts rest on; the confirm stage's figures are the speed-up's, in `confirm`)."""
    found = []
    for c in search.tried():
        records = [r for r in search.records if r.job.candidate == c]
        stages = sorted({r.job.stage for r in records}, key=stage_rank)
        stage, figure = search.figure(c) or (stages[-1], None)
        status, _, reason = (search.infeasible(c) or "").partition(": ")
        # the largest of its measured jobs' (memory is what runs out), and where it comes from
        peaks = [(o.peak_memory_bytes, o.memory_source) for r in records
                 if (o := r.outcome).measured and o.peak_memory_bytes is not None]
        peak, source = max(peaks, key=lambda p: p[0]) if peaks else (None, None)
        found.append({
            "candidate": c.as_dict(), "stage": stage, "stages": stages, "jobs": len(records),
            "job_dirs": [r.name for r in records if r.name],
            "status": status or ("ok" if figure is not None else records[-1].outcome.status),
            "reason": reason or None, "figure": figure and figure.as_dict(),
            "micro_batch": search.space.micro_batch(c) if search.space.global_batch else None,
            "accumulation": search.space.accumulation(c), "peak_memory_bytes": peak, "memory_source": source,
        })
    return found


def memory(search: Knowledge) -> dict[str, Any]:
    """autotune.memory_margin as it applied: on CUDA tight points are marked; elsewhere one note."""
    margin = search.settings.memory_margin
    seen = sorted({o.accelerator for r in search.records if (o := r.outcome).measured and o.accelerator})
    note = (f"autotune.memory_margin={margin:g}: the jobs ran on {', '.join(seen)}, which has no device"
            " memory to keep free; no point is marked tight (it applies on CUDA)"
            if margin and seen and "cuda" not in seen else None)
    tight = []
    mine = search.evidence(search.winner) if search.winner is not None else None
    for c in search.tried():
        if (why := search.tight(c)) is not None and not search.failed(c):
            theirs = search.evidence(c)
            tight.append({"candidate": c.as_dict(), "why": why, "figure": theirs and theirs.band.as_dict(),
                          "faster_than_best": faster(search.compare(mine, theirs))})
    devices = [o.device_memory_bytes for r in search.records
               if (o := r.outcome).accelerator == "cuda" and o.device_memory_bytes]
    return {"margin": margin, "accelerators": seen, "note": note, "tight": tight,
            "device_memory_bytes": max(devices) if devices else None}


def said(values: dict[str, str], recipe: dict[str, Any] | None) -> str:
    """A point as the verdict says it; at a global batch led by `batch_size=64 x 4 = global_batch_size=256`"""
    micro = recipe and next((int(v) for k, v in values.items() if k.lstrip("+") == "batch_size"
                             and v.isdigit()), recipe.get("batch_size"))
    parts = [f"{k}={v}" for k, v in values.items() if not micro or k.lstrip("+") != "batch_size"]
    if not micro:
        return " ".join(parts)
    ranks = f" x {recipe['world_size']} ranks" if recipe["world_size"] > 1 else ""
    head = (f"batch_size={micro} x {recipe['per_rank'] // micro}{ranks} ="
            f" global_batch_size={recipe['global_batch_size']}")
    return f"{head}, {' '.join(parts)}" if parts else head


def summary(search: Knowledge, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """autotune.json's body; `extra`: what the driver adds (its fixed overrides as `fixed`)."""
    extra = dict(extra or {})
    fixed = extra.pop("fixed", [])
    space, winner, default = search.space, search.winner, search.space.default()
    confirm = search.confirm or {}
    stands = confirm.get("default_stands")
    running, sure = in_the_running(search)
    ladder = search.ladders[0] if search.ladders else {}  # the start point's
    # `run it:` the command's own overrides, the winner's changes (a global batch's micro-batch always, first)
    keep = (space.batch.name,) if space.batch and space.global_batch else ()
    changed = [f"{k}={v}" for k, v in sorted(winner.items, key=lambda kv: kv[0] not in keep)
               if default.get(k) != v or k in keep] if winner else []
    # at a global batch: it, and the micro-batch x accumulation of the best and the default
    recipe = {**space.global_batch.as_dict(), **{
        name: {"micro_batch": space.micro_batch(c), "accumulation": space.accumulation(c)} if c else None
        for name, c in (("best", winner), ("default", default))}} if space.global_batch else None
    # a stage the budget stopped before it ran has decisions but no jobs
    unlaunched = [name for name in dict.fromkeys(d.stage for d in search.decisions)
                  if name not in {s["name"] for s in search.stages} and name != FINAL]
    stages = [{**s, "jobs": sum(r.job.stage == s["name"] for r in search.records),
               "job_dirs": [r.name for r in search.records if r.job.stage == s["name"] and r.name],
               "decisions": [d.__dict__ for d in search.decisions if d.stage == s["name"]]}
              for s in [*search.stages, *({"name": n} for n in unlaunched), {"name": FINAL}]]
    return {
        "schema_version": SCHEMA_VERSION, "status": search.status, "stopped": search.stop_reason,
        "objective": search.settings.objective, "best": winner.as_dict() if winner else None,
        "best_trusted": search.winner_trusted if winner else None, "default": default.as_dict(),
        "speedup": speedup(search),
        "tie": {"with": [c.as_dict() for c in search.tied_with], "rule": TIE_RULE,
                "simplest": stands is not None  # else: the faster won it
                or winner == min([winner, *search.tied_with], key=space.simplicity)}
        if search.tied_with else None,
        "confirm": {"winner": (w := confirm.get("winner")) and w.as_dict(),
                    "default": (d := confirm.get("default")) and d.as_dict(),
                    "default_failed": confirm.get("default_failed"),
                    "measured_steps": confirm.get("steps"), "rounds": confirm.get("rounds")}
        if confirm and not confirm.get("same_as_default") else None,
        "default_stands": stands and stands.as_dict(),
        "largest_batch_that_fits": ladder.get("largest_fit"), "first_oom_batch": ladder.get("first_oom"),
        "fit_ladders": list(search.ladders), "global_batch": recipe, "memory": memory(search),
        "jobs": len(search.records), "job_budget": search.job_cap,
        "points_tried": len(search.tried()), "grid_points": space.grid_points(),
        "job_seconds": sum(r.outcome.job_seconds for r in search.records), "wall_seconds": search.elapsed_s,
        "noise": search.sigma(), "in_the_running": running, "sure": sure,
        "command": " ".join(["harness", *fixed, *changed]) if winner else None,
        "space": [k.as_dict() for k in space.keys], "settings": search.settings.as_dict(),
        "infeasible": {c.label(): why for c in search.tried() if (why := search.infeasible(c))},
        "points": points(search), "stages": stages, **extra,
    }


def line(body: dict[str, Any]) -> str:
    """The terminal verdict."""
    where = (f"in {body['jobs']} jobs ({body['points_tried']} of {body['grid_points']} points),"
             f" {duration(body['wall_seconds'])}")
    if body["best"] is None:
        if body["status"] in ("interrupted", "budget"):
            stopped = "interrupted" if body["status"] == "interrupted" else f"stopped: {body['stopped']}"
            return f"autotune: {stopped} {where} before any candidate was measured"
        why = "; ".join(f"{k}: {v}" for k, v in body["infeasible"].items()) or "no job measured"
        untried = (" (the start point failed at every batch size tried, so no other value was:"
                   " fix that failure, or search without it)"
                   if body["points_tried"] < body["grid_points"] else "")
        return f"autotune: no candidate is feasible {where}: {why}{untried}"
    best = said(body["best"], body.get("global_batch"))
    s = body["speedup"]
    failed = (body.get("confirm") or {}).get("default_failed")
    if s is None:
        ratio = (f"the default configuration fails ({failed})" if failed
                 else "no speed-up: the default configuration was not measured")
    elif s.get("note"):
        ratio = s["note"]
    else:
        ratio = f"{s['value']:.2f}x the default" + (f" ({s['low']:.2f}-{s['high']:.2f}x)"
                                                     if s["low"] is not None else " (no interval)")
        if s["within_spread"]:
            ratio += ", within noise"
        if not s["confirmed"]:
            ratio += ", not confirmed"
    notes = []
    if body["tie"]:
        notes.append("a tie: the simplest of the ones within spread" if body["tie"].get("simplest", True)
                     else "a tie: ahead of the simpler ones within spread by more than autotune.min_gain")
    if not body.get("best_trusted", True):
        notes.append("on untrusted figures only (noisy or contended jobs): not a verdict")
    elif s is not None and not s.get("trusted", True):
        notes.append("the confirm stage's figures are untrusted")
    tight = [" ".join(f"{k}={v}" for k, v in t["candidate"].items())
             for t in (body.get("memory") or {}).get("tight", []) if t["faster_than_best"]]
    if tight:
        notes.append(f"faster but tight (autotune.memory_margin): {'; '.join(tight)}")
    note = f" ({'; '.join(notes)})" if notes else ""
    stopped = f" [{body['stopped']}; {body['sure']}]" if body["status"] in ("budget", "interrupted") else ""
    head = "best so far" if body["status"] == "interrupted" else "best"
    return f"{head}: {best}: {ratio}{note} {where}{stopped}; run it: {body['command']}"
