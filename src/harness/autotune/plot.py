"""autotune_memory.png: each point's examples/s against its peak memory and the fastest point under
each memory level (what headroom costs); a point as the table labels it. matplotlib only to draw."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from harness.autotune.knowledge import GIB
from harness.autotune.space import CHECKPOINT_KEY
from harness.measured import MIB

MEMORY_PNG = "autotune_memory.png"
LABEL_ALL = 8  # up to this many points, each is labelled
SHORT = {CHECKPOINT_KEY: "ckpt"}  # the table's point names (the verdict and autotune.json keep the keys)


def point_label(values: dict[str, str], recipe: dict[str, Any] | None) -> str:
    """A point as the table says it: `bs=64 bf16 ...`; at a global batch `64 x 2 bf16 ...`
    (micro-batch x accumulation)."""
    from harness.config.sweep_keys import short_key, short_setting

    parts, micro = [], recipe.get("batch_size") if recipe else None
    for key, value in values.items():
        bare = key.lstrip("+")
        if recipe and bare == "batch_size" and value.isdigit():
            micro = int(value)
        else:
            parts.append(short_setting(SHORT.get(bare, short_key(bare)), value))
    if micro:  # first, however the keys were typed: the micro-batch is the recipe's answer
        parts.insert(0, f"{micro} x {recipe['per_rank'] // micro}")  # type: ignore[index]
    return " ".join(parts)


def front(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fastest point under each memory level: from the least memory up, each faster than all before."""
    found: list[dict[str, Any]] = []
    for point in sorted(points, key=lambda p: (p["peak_memory_bytes"], -p["figure"]["examples_per_second"])):
        if not found or point["figure"]["examples_per_second"] > found[-1]["figure"]["examples_per_second"]:
            found.append(point)
    return found


def write_memory_png(body: dict[str, Any], path: Path) -> Path | None:
    """autotune_memory.png; None when no point has both a figure and a peak memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recipe = body.get("global_batch")
    measured = [p for p in body["points"] if p.get("figure") and p.get("peak_memory_bytes")
                is not None and p["status"] in ("ok", "tight")]
    if not measured:
        return None
    memory = body.get("memory") or {}
    device = memory.get("device_memory_bytes")
    largest = max([p["peak_memory_bytes"] for p in measured] + [device or 0])
    scale, unit = (GIB, "GiB") if largest >= 8 * GIB else (MIB, "MiB")
    fig, ax = plt.subplots(figsize=(9.5, 6.0))

    def xy(p: dict[str, Any]) -> tuple[float, float]:
        return p["peak_memory_bytes"] / scale, p["figure"]["examples_per_second"]

    drawn: set[str] = set()
    for p in measured:
        (x, y), f, tight = xy(p), p["figure"], p["status"] == "tight"
        kind = "tight: above 1 - memory_margin, never best" if tight else (
            "point (bars: its range over its jobs)" if f["trusted"] else "untrusted (noisy or contended)")
        color = "tab:orange" if tight else "tab:blue"
        ax.errorbar([x], [y], yerr=[[y - f["low"]], [f["high"] - y]], fmt="o", capsize=3,
                    color=color, markerfacecolor=color if f["trusted"] else "white",
                    label=None if kind in drawn else kind, zorder=3)
        drawn.add(kind)
    # of the points that may be named best (not tight), on trusted figures as every decision
    best = front([p for p in measured if p["status"] == "ok" and p["figure"]["trusted"]])
    if best:
        xs, ys = zip(*(xy(p) for p in best), strict=True)
        ax.step([*xs, max(xy(p)[0] for p in measured) * 1.04], [*ys, ys[-1]], where="post",
                color="tab:green", linewidth=1.5, label="fastest under each memory level", zorder=2)
    for name, marker, color, size in (("best", "*", "tab:red", 16), ("default", "s", "black", 10)):
        chosen = next((p for p in measured if p["candidate"] == body.get(name)), None)
        if chosen is not None:
            x, y = xy(chosen)
            ax.plot([x], [y], marker=marker, markersize=size, color=color, linestyle="none",
                    markerfacecolor="none" if name == "default" else color, label=name, zorder=4)
    # labelled: every point of a few; of many, what a user weighs (front, best, default, tight)
    named = {id(p): p for p in (measured if len(measured) <= LABEL_ALL else [
        *best, *(p for p in measured if p["status"] == "tight"
                 or p["candidate"] in (body.get("best"), body.get("default")))])}
    for p in named.values():
        tight = " (tight)" if p["status"] == "tight" else ""
        ax.annotate(point_label(p["candidate"], recipe) + tight, xy(p), textcoords="offset points",
                    xytext=(6, 6), fontsize="small")
    if device:
        limit = 1 - memory.get("margin", 0.0)
        ax.axvline(device / scale, color="tab:red", linewidth=1, label="the device's memory")
        ax.axvline(limit * device / scale, color="tab:red", linestyle="--", linewidth=1,
                   label=f"{limit:.0%} of it (1 - autotune.memory_margin)")
    failed = [p for p in body["points"] if p["status"] not in ("ok", "tight")]
    footnote = ""
    if failed:  # below the axes: a point without figures has no place on them
        more = f"; {len(failed) - 8} more" if len(failed) > 8 else ""
        words = "; ".join(f"{point_label(p['candidate'], recipe)} ({p['status']})" for p in failed[:8]) + more
        footnote = textwrap.fill(f"not plotted (no figures): {words}", 140)
        fig.text(0.01, 0.01, footnote, fontsize="small", color="tab:red", va="bottom")
    sources = sorted({p["memory_source"] for p in measured if p.get("memory_source")})
    ax.set_xlabel(f"peak memory, {' / '.join(sources)} ({unit}; the largest of a point's jobs)")
    ax.set_ylabel(f"{body['objective']} throughput (examples/s)")
    ax.set_xlim(0, max([xy(p)[0] for p in measured] + [device / scale if device else 0]) * 1.12)
    ax.set_ylim(0, max(p["figure"]["high"] for p in measured) * 1.15)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize="small", framealpha=0.9)
    root = Path(str(body.get("sweep_dir") or "."))
    at = (f", global_batch_size={recipe['global_batch_size']} (points: micro-batch x"
          " accumulation)" if recipe else "")
    ax.set_title(f"autotune: speed against memory, {root.parent.name}/{root.name}{at}\n"
                 f"{len(body['points'])} points tried, {len(measured)} with figures; compile"
                 f" charged over {body['settings']['planned_steps']} planned steps", fontsize="medium")
    fig.tight_layout(rect=(0, 0.025 * (footnote.count("\n") + 1) if footnote else 0, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
