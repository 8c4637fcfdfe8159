"""The scaling study of a sweep over world sizes (`harness -m sweep=scaling`, docs/scaling.md):
per world size the global examples/s, the speed-up over the smallest world size and the
efficiency with the judge's intervals, the Karp-Flatt serial fraction, and from each job's
scaling preset where the step goes per rank, the late rank and the allreduce. scaling.json's
shape is an interface: its names are kept."""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from harness.judge import ONE_JOB, compare
from harness.measured import RANK_PARTS, USABLE, is_finite_number
from harness.reports.files import write_json, write_text
from harness.sweep.render import significant
from harness.sweep.table import Comparison
from harness.terminal import size

STEM = "scaling"
DOC = "docs/scaling.md#scalingjson"


def _world(point: Any, comparison: Comparison) -> tuple[int, int, int] | None:
    """(world size, nodes, devices per node) of a point, from its jobs' result.json."""
    for job in comparison.jobs:
        if job.name in str(point["jobs"]).split() and job.result and job.result.device:
            facts = job.result.distributed or {}
            world = job.result.device.world_size
            return world, int(facts.get("num_nodes") or 1), int(facts.get("devices_per_node") or world)
    return None


def _median_ranks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rank, the median of each part over the point's jobs ([] when none has a block)."""
    found = []
    for n in range(min((len(b["ranks"]) for b in blocks), default=0)):
        ranks = [b["ranks"][n] for b in blocks]
        found.append({"rank": n, "node": ranks[0]["node"],
                      **{part: statistics.median(r[part] for r in ranks) for part in RANK_PARTS}})
    return found


def _straggler(blocks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rank most of the point's jobs name late, with its median wait; None otherwise."""
    named = [b["straggler"] for b in blocks if b.get("straggler")]
    if 2 * len(named) <= len(blocks):
        return None
    rank, _ = Counter(s["rank"] for s in named).most_common(1)[0]
    same = [s for s in named if s["rank"] == rank]
    return {"rank": rank, "node": same[0]["node"],
            "wait_s": statistics.median(s["wait_s"] for s in same),
            "late_in": Counter(s["late_in"] for s in same).most_common(1)[0][0]}


def _comm(blocks: list[dict[str, Any]]) -> dict[str, Any] | None:
    found = [b["comm"] for b in blocks if b.get("comm")]
    if not found:
        return None
    return {key: statistics.median(c[key] for c in found) for key in found[0]
            if all(is_finite_number(c.get(key)) for c in found)}


def study(comparison: Comparison, mode: str) -> dict[str, Any]:
    """scaling.json's body: each world size against the smallest (the baseline)."""
    frame = comparison.points
    measured = [(world, p) for _, p in frame.iterrows() if p["status"] in USABLE
                and is_finite_number(p["train_examples_per_second"])
                and (world := _world(p, comparison)) is not None]
    measured.sort(key=lambda item: item[0][0])
    if not measured:
        return {"mode": mode, "baseline_world_size": None, "points": [], "doc": DOC}
    (base_n, _, _), base = measured[0]
    noise = comparison.noise.get("train", 0.0)
    points = []
    for (world, nodes, devices), p in measured:
        verdict = compare(base["train_evidence"], p["train_evidence"], comparison.tolerance,
                          noise) if world != base_n else None
        speedup = verdict.ratio if verdict else 1.0
        # one job a side with no noise between runs known: its interval is one run's own spread
        interval = ([verdict.low, verdict.high] if verdict and verdict.low is not None
                    and verdict.reason != ONE_JOB else None)
        factor = base_n / world
        serial = (1 / speedup - factor) / (1 - factor) if world > base_n and speedup else None  # Karp-Flatt
        blocks = [j.result.scaling for j in comparison.jobs
                  if j.name in str(p["jobs"]).split() and j.result and j.result.scaling]
        points.append({
            "world_size": world, "nodes": nodes, "devices": devices,
            "examples_per_second": p["train_examples_per_second"],
            "per_device_examples_per_second": p["train_examples_per_second"] / world,
            "speedup": speedup, "speedup_ci": interval, "efficiency": speedup * factor,
            "efficiency_ci": [v * factor for v in interval] if interval else None, "serial_fraction": serial,
            "verdict": verdict and verdict.kind, "verdict_reason": verdict and verdict.reason,
            "straggler": _straggler(blocks), "comm": _comm(blocks), "ranks": _median_ranks(blocks),
            "jobs": len(str(p["jobs"]).split()), "contended": bool(p["train_contended"]),
        })
    return {"doc": DOC, "mode": mode, "baseline_world_size": base_n,
            "tolerance": comparison.tolerance, "points": points}


def lines(body: dict[str, Any]) -> list[str]:
    """One line per world size, as the terminal and scaling.md say them."""
    said = []
    for point in body["points"]:
        n, ci = point["world_size"], point["speedup_ci"]
        text = (f"{n} rank(s) ({point['nodes']} node(s) x {point['devices']}):"
                f" {point['examples_per_second']:,.1f} ex/s")
        if n != body["baseline_world_size"]:
            text += f", speed-up {point['speedup']:.2f}x" + (
                f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else f" (no interval: {point['verdict_reason']})")
            text += f", efficiency {point['efficiency']:.0%}"
            if point["serial_fraction"] is not None:
                text += f", serial fraction {point['serial_fraction']:.3f}"
        late, comm = point["straggler"], point["comm"]
        if late:
            text += (f"; rank {late['rank']} ({late['node']}) late by {late['wait_s'] * 1e3:.0f} ms"
                     f" a step, in its {late['late_in']}" + (
                         " (contended: others' load may be what makes it late)"
                         if point["contended"] else ""))
        if comm and comm.get("busbw_bytes_per_s"):
            text += (f"; allreduce {size(comm['bytes_per_step'])} a step, bus"
                     f" {significant(comm['busbw_bytes_per_s'] / 1e6)} MB/s,"
                     f" {comm['share']:.0%} of the step exposed")
        said.append(text)
    return said


def write(comparison: Comparison, directory: Path, mode: str) -> list[Path]:
    """scaling.json, scaling.md and scaling.png in `directory`; the lines on the terminal."""
    from harness.terminal import show

    body = study(comparison, mode)
    said = lines(body)
    show(f"[bold]scaling ({mode}):[/bold] " + (f"baseline {body['baseline_world_size']} rank(s)"
                                                if body["points"] else "no world size measured"))
    for line in said:
        show(line)
    md = [f"# Scaling ({mode})", "", *[f"- {line}" for line in said], ""]
    for point in body["points"]:
        if point["ranks"]:
            md += [f"## {point['world_size']} rank(s): seconds per optimizer step", "",
                   "| rank | node | " + " | ".join(RANK_PARTS.values()) + " |",
                   "| --- | --- |" + " ---: |" * len(RANK_PARTS),
                   *(f"| {r['rank']} | {r['node']} | " + " | ".join(f"{r[k]:.4f}" for k in RANK_PARTS)
                     + " |" for r in point["ranks"]), ""]
    written = [write_json(directory / f"{STEM}.json", body),
               write_text(directory / f"{STEM}.md", "\n".join(md))]
    from harness.sweep.plot import write_scaling_png

    png = write_scaling_png(body, directory / f"{STEM}.png")
    return written + ([png] if png else [])
