"""From a run's measured figures to why it is slow: the step's shares (data, compute,
communication, host), the bound, ranked findings and the verdict line (docs/presets/diagnose.md)."""

from __future__ import annotations

from typing import Any

from harness.measured import MAIN_PHASES
from harness.profilers.speed_flags import CONTENDED_FIX, NOISY_FIX, phase_word
from harness.result.schema import Finding

BOUNDS = ("data", "compute", "communication", "host")
MIN_SHARE = 0.25  # a share this large gets its own finding


def _finding(kind: str, score: float | None, message: str, next_step: str) -> Finding:
    return Finding(kind=kind, score=score, message=message, next_step=next_step)


def shares(step_s: float | None, between_s: float | None, loader_s: float | None,
           model_s: float | None, exposed_comm_s: float = 0.0) -> dict[str, float] | None:
    """The step's shares of data, compute, communication and host; None without a step time."""
    if not step_s or step_s <= 0:
        return None
    data = min(between_s or 0.0, loader_s if loader_s is not None else between_s or 0.0)
    compute = min(model_s or 0.0, max(step_s - data - exposed_comm_s, 0.0))
    comm = min(exposed_comm_s, max(step_s - data - compute, 0.0))
    host = max(step_s - data - compute - comm, 0.0)
    return {"data": data / step_s, "compute": compute / step_s,
            "communication": comm / step_s, "host": host / step_s}


def bound_by(found: dict[str, float] | None) -> str:
    if not found or model_missing(found):
        return "unknown"
    return max(BOUNDS, key=lambda b: found[b])


def noise_beats_gap(phase: dict[str, Any]) -> tuple[str, str] | None:
    """(largest share, runner-up) when their `noise_ranges` overlap; None when the gap stands."""
    part, ranges = phase.get("shares"), phase.get("noise_ranges")
    if not part or not ranges or model_missing(part):
        return None
    first, second = sorted(BOUNDS, key=lambda b: -part[b])[:2]
    if part[second] > 0 and ranges[second][1] >= ranges[first][0]:
        return first, second
    return None


def model_missing(found: dict[str, float]) -> bool:
    return found.get("compute", 0.0) == 0.0 and found.get("host", 0.0) > 0.99


def _pct(share: float) -> str:
    return f"{share:.0%}"


def _share(phase: dict[str, Any], bound: str) -> str:
    text = _pct(phase["shares"][bound])
    low, high = ((phase.get("share_ranges") or {}).get(bound) or [None, None])
    if low is not None and _pct(low) != _pct(high):
        text += f" ({_pct(low)}-{_pct(high)} over the model pass's steps)"
    return text


def _rate(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f} ex/s"


def _data_fix(loader: dict[str, Any], on_gpu: bool) -> str:
    steps = []
    if loader.get("num_workers") == 0:
        steps.append("give the DataLoader workers (num_workers=4 or more; it has 0)")
    if on_gpu and loader.get("pin_memory") is False:
        steps.append("pin_memory=True")
    steps.append("generate or decode on the device, or prefetch more (prefetch_factor)")
    return "; ".join(steps)


def _work(phase: str) -> str:
    return ("forward, backward and optimizer" if phase == "train"
            else "the forward of predict_step, without gradients")


def phase_findings(phase: str, figures: dict[str, Any], context: dict[str, Any]) -> list[Finding]:
    """Findings for the bounding share and every share of at least MIN_SHARE, scored by it."""
    found: list[Finding] = []
    part = figures.get("shares")
    if not part:
        return found
    bound = bound_by(part)
    name = phase_word(phase)
    loader, model = figures.get("loader_examples_per_second"), figures.get("model_examples_per_second")
    on_gpu = context.get("accelerator") == "cuda"

    def notable(share: str) -> bool:
        return part[share] >= MIN_SHARE or bound == share

    if notable("data"):
        found.append(_finding("data-bound", part["data"], f"{_share(figures, 'data')} of each {name} step"
                              f" waits for the next batch; the loader alone delivers {_rate(loader)}, the"
                              f" model alone {_rate(model)}", _data_fix(context.get("loader", {}), on_gpu)))
    if notable("host"):
        found.append(_finding(
            "host-bound", part["host"], f"{_share(figures, 'host')} of each {name} step is outside the model"
            " and the data: Lightning's loop, callbacks, logging, host-side launch overhead (the model alone"
            f" runs {_rate(model)})", "a larger batch amortises it; compile=true"
            + (" (compile=reduce-overhead adds CUDA graphs)" if on_gpu else "")
            + "; profiler=simple shows which hook or callback takes the time"))
    if notable("communication"):
        found.append(_finding(
            "communication-bound", part["communication"], f"{_share(figures, 'communication')} of each"
            f" {name} step is collectives not hidden behind compute", "a larger batch per rank, gradient"
            " accumulation, fewer ranks per node, or DDP's bucket_cap_mb and gradient_as_bucket_view"))
    mfu = figures.get("mfu")
    if notable("compute"):
        if on_gpu and mfu is not None and mfu < 0.3:
            found.append(_finding(
                "low-mfu", part["compute"], f"{_share(figures, 'compute')} of each {name} step is the model's"
                f" own compute, at {_pct(mfu)} MFU of the device's {figures.get('peak_tflops')} TFLOP/s",
                "bf16 precision, a larger batch, compile=true, fused kernels (e.g."
                " scaled_dot_product_attention)"))
        else:
            found.append(_finding(
                "compute-bound", part["compute"], f"{_share(figures, 'compute')} of each {name} step is the"
                f" model's own compute ({_work(phase)})",
                "less work per example (precision=bf16, compile=true)" + ("" if on_gpu else ", or a GPU")))
    return found


def ranked(step_findings: list[Finding], run: list[Finding]) -> list[Finding]:
    """The step's findings, largest share first; then the run's, unscored, in their order."""
    return sorted(step_findings, key=lambda f: -(f.score or 0.0)) + run


def run_findings(context: dict[str, Any]) -> list[Finding]:
    """Findings about the run as a whole: precision, compile, memory, measurement quality."""
    found = []
    if context.get("precision_note"):
        found.append(_finding("precision", None, context["precision_note"],
                             "ask for the precision the device runs (bf16 on CPUs)"))
    if breaks := context.get("graph_breaks"):
        found.append(_finding("graph-breaks", None, f"compile met {breaks} graph break(s): parts of the model"
                              " run uncompiled", "TORCH_LOGS=graph_breaks harness ... shows where;"
                              " torch._dynamo.explain(model)(batch) lists why"))
    used, total = context.get("peak_device_reserved_bytes"), context.get("device_memory_bytes")
    if used and total:
        share = used / total
        if share < 0.4:
            found.append(_finding(
                "memory-headroom", None, f"the peak uses {used / 2**30:.1f} GiB of the device's"
                f" {total / 2**30:.0f} GiB ({_pct(share)})", f"room for a batch about"
                f" {max(1.0, 0.85 / share):.0f}x as large (sweep batch_size to find the largest that fits)"))
        elif share > 0.9:
            found.append(_finding(
                "memory-limit", None, f"the peak uses {_pct(share)} of the device's memory",
                "close to out of memory: a smaller batch, bf16, or activation checkpointing"))
    flagged = _flagged(context.get("flags", []))
    for phase in flagged.get("contended", []):
        found.append(_finding(
            "contended", None, f"other processes took the machine while {phase_word(phase)} was measured"
            f" ({contention_said(context.get('contention', {}).get(phase, {}))}): its figures and shares"
            " measure the machine as much as the run", CONTENDED_FIX))
    if thin := flagged.get("thin"):
        found.append(_finding(
            "thin", None, f"few measured steps in {', '.join(thin)}: the figures are rough",
            "more batches (data.*_batches / trainer.limit_*_batches) or fewer warm-up steps"))
    for phase in flagged.get("noisy", []):
        said = context.get("noise_said", {}).get(phase) or ["see reports/speed.json"]
        found.append(_finding("noisy", None, f"{phase_word(phase)} step times vary: " + "; ".join(said),
                              NOISY_FIX))
    return found


def _flagged(flags: list[str]) -> dict[str, list[str]]:
    """`<kind>:<phase>` flags as kind -> phases (main phases only, but for thin)."""
    found: dict[str, list[str]] = {}
    for flag in flags:
        kind, _, phase = flag.partition(":")
        if phase and (kind == "thin" or phase in MAIN_PHASES):
            found.setdefault(kind, []).append(phase)
    return found


def contention_said(c: dict[str, Any]) -> str:
    said = []
    if c.get("other_cpu_share") is not None:
        said.append(f"others used {_pct(c['other_cpu_share'])} of its CPUs")
    if c.get("run_delay_share") is not None:
        said.append(f"its threads waited for a CPU {_pct(c['run_delay_share'])} of the time")
    if c.get("gpu_other_sm_share"):
        said.append(f"others used {_pct(c['gpu_other_sm_share'])} of the GPU's SM time")
    return ", ".join(said) or "see reports/speed.json"


def verdict(bound: str, phase: dict[str, Any], phase_name: str = "train",
            contended: str | None = None) -> str:
    """One line on the phase's bound, its evidence and close calls; `contended` said first."""
    line = _verdict(bound, phase, phase_name)
    if contended:
        line = (f"contended ({contended}; result.json flags: contended:{phase_name}), so the"
                f" shares measure the machine as much as the run: {line}")
    ranges = phase.get("share_ranges") or {}
    if bound not in ranges:
        return line
    close = [b for b in BOUNDS if b != bound and b in ranges
             and ranges[b][1] >= ranges[bound][0] and phase["shares"][b] >= MIN_SHARE]
    for other in close:
        line += (f"; too close to call against {other} ({_pct(ranges[other][0])}-"
                 f"{_pct(ranges[other][1])} over the model pass's steps)")
    return line


def _verdict(bound: str, phase: dict[str, Any], phase_name: str) -> str:
    loader, model = phase.get("loader_examples_per_second"), phase.get("model_examples_per_second")
    name = phase_word(phase_name)
    if bound == "data":
        return (f"bound by data loading: {_share(phase, 'data')} of each {name} step waits for the next"
                f" batch; the loader alone delivers {_rate(loader)}, the model alone {_rate(model)}")
    if bound == "compute":
        mfu = phase.get("mfu")
        tail = f"; MFU {_pct(mfu)} of {phase.get('peak_tflops')} TFLOP/s" if mfu is not None else ""
        return (f"bound by the model's compute: {_share(phase, 'compute')} of each {name} step"
                f" is {_work(phase_name)} (the model alone: {_rate(model)}){tail}")
    if bound == "host":
        return (f"bound by the host: {_share(phase, 'host')} of each {name} step is Lightning's loop,"
                f" callbacks, logging and launch overhead (the model alone runs {_rate(model)})")
    if bound == "communication":
        return (f"bound by communication: {_share(phase, 'communication')} of each {name} step"
                " is collectives not hidden behind compute")
    gap = noise_beats_gap(phase)
    if gap:
        first, second = gap
        return (f"no verdict: noisy: the {name} step varies by {_pct(phase['step_noise'])} (1.4826 x MAD"
                f" / median of its steps), more than the gap between {first} ({_pct(phase['shares'][first])})"
                f" and {second} ({_pct(phase['shares'][second])}). Next: rerun on a quieter machine (the"
                " run's contention figures say who else ran) or with more steps; repeat=3 shows the spread")
    return "no verdict: " + (phase.get("note") or f"the {name} step was not measured")
