"""Hand-made job directories, for testing the comparison without running jobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def metrics(train: float, inference: float, rss_mib: float = 500.0,
            batch_size: int = 4) -> dict[str, Any]:
    """The flat metrics a speed-profiled job writes, from two throughputs in examples/s."""
    return {
        "peak_rss_bytes": int(rss_mib * 2**20),
        "peak_device_allocated_bytes": None,
        "train_examples_per_second": train,
        "train_seconds_per_iteration": batch_size / train,
        "inference_examples_per_second": inference,
        "inference_seconds_per_iteration": batch_size / inference,
        "train_between_steps_share": 0.25,
        "inference_between_steps_share": 0.1,
    }


def steps(rate: float, batch_size: int = 8, phase: str = "train", cv: float = 0.03,
          measured: int = 50, mean_over_median: float = 1.02) -> dict[str, Any]:
    """A phase's speed figures as the speed preset writes them (issue #20 keys included), for
    steps whose median runs at `rate` examples/s: their robust spread `cv` (1.4826 x MAD /
    median) and the mean step `mean_over_median` x the median (a few slow steps)."""
    median = batch_size / rate
    per_iteration = median * mean_over_median
    return {
        f"{phase}_examples_per_second": batch_size / per_iteration,
        f"{phase}_seconds_per_iteration": per_iteration,
        f"{phase}_median_step_s": median,
        f"{phase}_mad_step_s": cv * median / 1.4826,
        f"{phase}_p90_step_s": median * (1 + 1.3 * cv),
        f"{phase}_measured_steps": measured,
        f"{phase}_between_steps_share": 0.05,
    }


def diagnosis(bound_by: str = "compute", **figures: float) -> dict[str, Any]:
    """A result.json `diagnosis` block (the diagnose preset's), with these per-phase figures."""
    return {"bound_by": bound_by, "verdict": f"{bound_by}-bound (hand-made)",
            "flop_convention": "hand-made", **figures}


def write_job(job_dir: Path, overrides: list[str], status: str = "ok",
              values: dict[str, Any] | None = None, reason: str | None = None,
              per_repeat: list[dict[str, Any]] | None = None, schema_version: int = 2,
              diagnosed: dict[str, Any] | None = None, flags: list[str] | None = None,
              device: dict[str, Any] | None = None, sweep_round: int | None = None) -> Path:
    """A job directory as a job leaves it. Schema 2 (the default) still copied the diagnosis's
    figures into `metrics`; from schema 3 they live only in `diagnosed` (its diagnosis).
    `flags`: result.json's (`contended:train`...); `device`: its device block; `sweep_round`:
    the round of a sweep with repeat=N (its overrides should say `+sweep_round=<r>` too)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / ".hydra").mkdir(exist_ok=True)
    (job_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    record: dict[str, Any] = {"schema_version": schema_version, "status": status,
                              "reason": reason, "overrides": overrides, "metrics": values or {}}
    if diagnosed:
        record["diagnosis"] = diagnosed
    if flags:
        record["flags"] = flags
    if device:
        record["device"] = device
    if sweep_round is not None:
        record["sweep_round"] = sweep_round
    if per_repeat:
        record["repeats"] = {"requested": len(per_repeat), "completed": len(per_repeat),
                             "what": "hand-made", "per_repeat": per_repeat}
    (job_dir / "result.json").write_text(json.dumps(record))
    return job_dir


def multirun_yaml(root: Path, **sweep_report: Any) -> Path:
    """The sweep's multirun.yaml, recording these settings of the comparison callback
    (hydra.callbacks.sweep_report: rows, baseline, repeat_keys) as Hydra writes them."""
    node = {"_target_": "harness.sweep.callbacks.ComparisonCallback", "rows": None,
            "baseline": None, "plot": True, "repeat_keys": ["seed", "sweep_round"],
            **sweep_report}
    root.mkdir(parents=True, exist_ok=True)
    path = root / "multirun.yaml"
    path.write_text(json.dumps({"hydra": {"callbacks": {"sweep_report": node}}}))  # JSON is YAML
    return path


# A physicsnemo-shaped sweep (`sweep=physicsnemo`): batch_size x precision x compile, with
# bf16 and compile each faster, and some spread from round to round.
PHYSICSNEMO_BATCHES = (1, 2, 4, 8)
PHYSICSNEMO_VARIANTS = (("fp32", "false"), ("fp32", "true"), ("bf16", "false"), ("bf16", "true"))


def physicsnemo_sweep(root: Path, rounds: int = 2, flops: float = 1.2e9) -> Path:
    """A hand-made 4-variant sweep of `rounds` rounds (ranges in every cell), diagnosed:
    its training FLOP/s are `flops` x the batch size (a CPU's, by default)."""
    n = 0
    for round_ in range(rounds):
        for bs in PHYSICSNEMO_BATCHES:
            for v, (precision, compile_) in enumerate(PHYSICSNEMO_VARIANTS):
                wobble = 1 + 0.12 * ((n * 7 + v * 3) % 5 - 2) / 2  # 0.88 .. 1.12
                rate = 50 * bs ** 0.8 * (1.9 if precision == "bf16" else 1) * (
                    1.3 if compile_ == "true" else 1) * wobble
                values = metrics(rate, 3 * rate / wobble, rss_mib=600 + 20 * bs + 10 * wobble,
                                 batch_size=bs)
                overrides = [f"batch_size={bs}", f"precision={precision}", f"compile={compile_}"]
                if rounds > 1:
                    overrides.append(f"+sweep_round={round_}")
                write_job(root / str(n), overrides, values=values, schema_version=3,
                          diagnosed=diagnosis("compute", train_flop_per_s=flops * bs * wobble),
                          sweep_round=round_ if rounds > 1 else None)
                n += 1
    multirun_yaml(root)
    return root
