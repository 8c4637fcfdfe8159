"""autotune.json's body and the one verdict line, from a Search at any point of its life
(done, stopped by the budget, interrupted, or with nothing feasible)."""

from __future__ import annotations

from typing import Any

from harness.autotune.halving import SIMPLER
from harness.autotune.knowledge import FINAL, PROBE_STAGES, WARMUP, Knowledge, Record, stage_rank
from harness.autotune.score import Estimate
from harness.autotune.space import Candidate
from harness.measured import duration

SCHEMA_VERSION = 1
TIE_RULE = f"within spread: the simplest wins ({SIMPLER})"


def _est(e: Estimate | None) -> dict[str, Any] | None:
    return e.as_dict() if e is not None else None


def speedup(search: Knowledge) -> dict[str, Any] | None:
    """The winner over the default: from the confirm stage, else the deepest that measured both."""
    confirm, winner, default = search.confirm or {}, search.winner, search.space.default()
    if confirm.get("same_as_default"):
        return {"value": 1.0, "low": 1.0, "high": 1.0, "confirmed": True, "within_spread": True,
                "trusted": search.winner_trusted,
                "note": "the default configuration is the best"}
    w, d = confirm.get("winner"), confirm.get("default")
    confirmed = w is not None and d is not None
    if not confirmed and winner is not None and default in search.tried():
        w, d = search.latest(winner), search.latest(default)
    if w is None or d is None:
        return None
    value, low, high = w.ratio(d)
    found = {"value": value, "low": low, "high": high, "confirmed": confirmed,
             "within_spread": w.tied(d, search.settings.min_gain),
             "trusted": w.trusted and d.trusted}
    if confirm.get("default_stands") is not None:  # set only beside both confirm figures
        found.update(within_spread=True, note=f"the default stands: {confirm['default_stands'].label()}"
                     f" read {value:.2f}x it ({low:.2f}-{high:.2f}x), not beyond the noise")
    return found


def in_the_running(search: Knowledge) -> tuple[list[dict[str, Any]], str | None]:
    """Stopped early: the winner's ratio over each candidate still in the running, and 'sure'."""
    if search.status not in ("budget", "interrupted") or search.winner is None:
        return [], None
    mine, found = search.latest(search.winner), []
    for c in dict.fromkeys([*search.pool, *search.left_out]):
        if c == search.winner or search.infeasible(c):
            continue
        theirs = search.latest(c)
        if theirs is None:
            found.append({"candidate": c.as_dict(), "separated": False,
                          "note": "never measured: the budget left it out"})
        elif mine is not None:
            value, low, high = mine.ratio(theirs)
            found.append({"candidate": c.as_dict(), "winner_over_it": value, "low": low,
                          "high": high, "separated": mine.trusted and theirs.trusted
                          and not mine.tied(theirs, search.settings.min_gain)})
    unsure = [Candidate(tuple(r["candidate"].items())).label() for r in found
              if not r["separated"]]
    sure = ("sure: beyond the spread of every candidate still in the running" if not unsure
            else "not sure: " + "; ".join(unsure) + " within spread of the best so far")
    return found, sure


def points(search: Knowledge) -> list[dict[str, Any]]:
    """Every point tried, with the deepest stage that measured it and its figure there."""
    found = []
    for c in search.tried():
        records = [r for r in search.records if r.job.candidate == c]
        stages = sorted({r.job.stage for r in records}, key=stage_rank)
        figure = search.latest(c, skip=(WARMUP,))
        reason = search.infeasible(c)
        found.append({
            "candidate": c.as_dict(), "stage": stages[-1], "stages": stages, "jobs": len(records),
            "job_dirs": [r.name for r in records if r.name],
            "status": reason.split(":", 1)[0] if reason else (
                "ok" if figure is not None else records[-1].outcome.status),
            "reason": reason.split(": ", 1)[1] if reason and ": " in reason else None,
            "figure": _est(figure),
            "in_probe_stages": any(r.job.stage in PROBE_STAGES for r in records),
            "micro_batch": search.space.micro_batch(c) if search.space.global_batch else None,
            "accumulation": search.space.accumulation(c),
            **peak_memory(records),
        })
    return found


def peak_memory(records: list[Record]) -> dict[str, Any]:
    """A point's peak memory: the largest of its measured jobs' (memory is what runs out),
    and where it comes from (device allocated, peak RSS increase, process RSS)."""
    peaks = [(o.peak_memory_bytes, o.memory_source) for r in records
             if (o := r.outcome).measured and o.peak_memory_bytes is not None]
    peak, source = max(peaks, key=lambda p: p[0]) if peaks else (None, None)
    return {"peak_memory_bytes": peak, "memory_source": source}


def memory(search: Knowledge) -> dict[str, Any]:
    """autotune.memory_margin as it applied: on CUDA tight points are marked; elsewhere one note."""
    margin = search.settings.memory_margin
    seen = sorted({o.accelerator for r in search.records if (o := r.outcome).measured
                   and o.accelerator})
    note = None
    if margin and seen and "cuda" not in seen:
        note = (f"autotune.memory_margin={margin:g}: the jobs ran on {', '.join(seen)}, which has"
                " no device memory to keep free; no point is marked tight (it applies on CUDA)")
    tight = []
    mine = search.latest(search.winner) if search.winner is not None else None
    for c in search.tried():
        why = search.tight(c)
        if why is None or search.failed(c):
            continue
        figure = search.latest(c, skip=(WARMUP,))
        tight.append({"candidate": c.as_dict(), "why": why, "figure": _est(figure),
                      "faster_than_best": bool(figure and mine and figure.value > mine.value)})
    devices = [o.device_memory_bytes for r in search.records
               if (o := r.outcome).accelerator == "cuda" and o.device_memory_bytes]
    return {"margin": margin, "accelerators": seen, "note": note, "tight": tight,
            "device_memory_bytes": max(devices) if devices else None}


def said(values: dict[str, str], recipe: dict[str, Any] | None) -> str:
    """A point as the verdict says it; at a global batch its micro-batch x accumulation
    (`batch_size=64 x 4 = global_batch_size=256,`) first."""
    parts = [f"{k}={v}" for k, v in values.items()]
    if not recipe:
        return " ".join(parts)
    micro = next((int(v) for k, v in values.items() if k.lstrip("+") == "batch_size"
                  and v.isdigit()), recipe.get("batch_size"))
    if not micro:
        return " ".join(parts)
    ranks = f" x {recipe['world_size']} ranks" if recipe["world_size"] > 1 else ""
    head = (f"batch_size={micro} x {recipe['per_rank'] // micro}{ranks} ="
            f" global_batch_size={recipe['global_batch_size']}")
    rest = [p for p in parts if p.partition("=")[0].lstrip("+") != "batch_size"]
    return f"{head}, {' '.join(rest)}" if rest else head


def summary(search: Knowledge, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """autotune.json's body; `extra`: what the driver adds (its fixed overrides as `fixed`)."""
    extra = dict(extra or {})
    space, winner, default = search.space, search.winner, search.space.default()
    confirm = search.confirm or {}
    running, sure = in_the_running(search)
    failures = {c.label(): why for c in search.tried() if (why := search.infeasible(c))}
    # a stage the budget stopped before it ran has decisions but no jobs
    unlaunched = [name for name in dict.fromkeys(d.stage for d in search.decisions)
                  if name not in {s["name"] for s in search.stages} and name != FINAL]
    stages = [{**s, "job_dirs": [r.name for r in search.records if r.job.stage == s["name"] and r.name],
               "decisions": [d.__dict__ for d in search.decisions if d.stage == s["name"]]}
              for s in [*search.stages, *({"name": n, "jobs": 0} for n in unlaunched),
                        {"name": FINAL, "jobs": 0}]]
    return {
        "schema_version": SCHEMA_VERSION,
        "status": search.status,  # running, done, budget, interrupted, infeasible
        "stopped": search.stop_reason,
        "objective": search.settings.objective,
        "best": winner.as_dict() if winner else None,
        "best_trusted": search.winner_trusted if winner else None,
        "default": default.as_dict(),
        "speedup": speedup(search),
        "tie": {"with": [c.as_dict() for c in search.tied_with], "rule": TIE_RULE}
        if search.tied_with else None,
        "confirm": {"winner": _est(confirm.get("winner")), "default": _est(confirm.get("default")),
                    "default_failed": confirm.get("default_failed"),
                    "measured_steps": confirm.get("steps"), "rounds": confirm.get("rounds")}
        if confirm and not confirm.get("same_as_default") else None,
        "default_stands": confirm["default_stands"].as_dict()
        if confirm.get("default_stands") is not None else None,
        "largest_batch_that_fits": search.largest_fit,
        "first_oom_batch": search.first_oom,
        "fit_ladders": list(search.ladders),
        "global_batch": recipe(search),
        "memory": memory(search),
        "jobs": search.jobs_launched,
        "job_budget": search.job_cap,
        "points_tried": len(search.tried()),
        "grid_points": space.grid_points(),
        "job_seconds": sum(r.outcome.job_seconds for r in search.records),
        "wall_seconds": search.elapsed_s,
        "noise": search.sigma(),
        "in_the_running": running,
        "sure": sure,
        "command": run_command(winner, default, extra.get("fixed", []),
                               keep=(space.batch.name,) if space.batch and space.global_batch
                               else ()) if winner else None,
        "space": space.as_list(),
        "settings": search.settings.as_dict(),
        "infeasible": failures,
        "points": points(search),
        "stages": stages,
        **{k: v for k, v in extra.items() if k != "fixed"},
    }


def run_command(winner: Candidate, default: Candidate, fixed: list[str],
                keep: tuple[str, ...] = ()) -> str:
    """The run to do next: the command's own overrides and the winner's values that differ
    (and those of `keep` always, first: at a global batch the micro-batch is the answer)."""
    changed = [f"{k}={v}" for k, v in sorted(winner.items, key=lambda kv: kv[0] not in keep)
               if default.get(k) != v or k in keep]
    return " ".join(["harness", *fixed, *changed])


def recipe(search: Knowledge) -> dict[str, Any] | None:
    """The global batch kept, and the micro-batch x accumulation of the best and the default."""
    space = search.space
    if space.global_batch is None:
        return None

    def split(c: Candidate | None) -> dict[str, int | None] | None:
        return None if c is None else {"micro_batch": space.micro_batch(c),
                                       "accumulation": space.accumulation(c)}

    return {**space.global_batch.as_dict(), "best": split(search.winner),
            "default": split(space.default())}


def line(body: dict[str, Any]) -> str:
    """The terminal verdict."""
    where = (f"in {body['jobs']} jobs ({body['points_tried']} of {body['grid_points']} points),"
             f" {duration(body['wall_seconds'] or body['job_seconds'])}")
    if body["best"] is None:
        if body["status"] == "interrupted":
            return f"autotune: interrupted {where} before any candidate was measured"
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
        ratio = f"{s['value']:.2f}x the default ({s['low']:.2f}-{s['high']:.2f}x)"
        if s["within_spread"]:
            ratio += ", within noise"
        if not s["confirmed"]:
            ratio += ", not confirmed"
    notes = []
    if body["tie"]:
        notes.append("a tie: the simplest of the ones within spread")
    if not body.get("best_trusted", True):
        notes.append("on untrusted figures only (noisy or contended jobs): not a verdict")
    elif s is not None and not s.get("trusted", True):
        notes.append("the confirm stage's figures are untrusted")
    faster = [" ".join(f"{k}={v}" for k, v in t["candidate"].items())
              for t in (body.get("memory") or {}).get("tight", []) if t["faster_than_best"]]
    if faster:
        notes.append(f"faster but tight (autotune.memory_margin): {'; '.join(faster)}")
    note = f" ({'; '.join(notes)})" if notes else ""
    stopped = f" [{body['stopped']}; {body['sure']}]" if body["status"] in ("budget", "interrupted") else ""
    head = "best so far" if body["status"] == "interrupted" else "best"
    return f"{head}: {best}: {ratio}{note} {where}{stopped}; run it: {body['command']}"
