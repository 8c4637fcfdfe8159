"""Overhead of each profiler preset against no profiler, on the built-in workload.

All runs happen in this one process, interleaved: every round runs the
baseline (profiler=none) and then each preset once, in a shuffled order, so
machine noise hits all of them alike. The figure per preset is the median over
rounds of (fit wall time with the preset / fit wall time of the same round's
baseline) - 1, with the spread (min..max of the per-round ratios) beside it.

    python benchmarks/preset_overhead.py --rounds 5 [--presets speed,system] [--out docs/...md]

Each fit is timed end to end (trainer.fit, wall clock, device synchronised
after it on CUDA), so a preset's set-up and report-building inside the fit count.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

PRESETS = ("speed", "system", "summary", "simple", "advanced", "pytorch", "memory", "snapshot")
WORKLOAD = (
    "data.train_batches=40",
    "data.seq_len=32",
    "data.dim=64",
    "batch_size=16",
    "trainer.limit_val_batches=0",
    "trainer.enable_progress_bar=false",
    "mode=train",
)


def _compose(preset: str, out_dir: Path, extra: list[str]):
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    overrides = [
        f"profiler={preset}" if preset == "none" else f"profiler=[{preset}]",
        *WORKLOAD,
        *extra,
    ]
    cfg = compose("config", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(out_dir)
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    return cfg


def _fit_seconds(preset: str, root: Path, extra: list[str]) -> float:
    import lightning.pytorch as pl
    import torch

    from harness.run import build

    out_dir = Path(tempfile.mkdtemp(dir=root))
    cfg = _compose(preset, out_dir, extra)
    pl.seed_everything(0, verbose=False)
    datamodule = build.build_datamodule(cfg)
    module = build.build_module(cfg)
    presets = build.build_presets(cfg)
    trainer = build.build_trainer(cfg, "32-true", presets, False)
    start = time.perf_counter()
    trainer.fit(module, datamodule=datamodule)
    if trainer.strategy.root_device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    for obj in presets.by_name.values():  # reports are part of what a preset costs
        if hasattr(obj, "write_reports"):
            obj.write_reports(out_dir / "reports")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    parser.add_argument("overrides", nargs="*", help="extra config overrides, e.g. batch_size=8")
    args = parser.parse_args()

    import logging
    import warnings

    from hydra import initialize_config_dir

    from harness.config.locations import conf_dir

    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    presets = args.presets.split(",")
    rng = random.Random(0)
    times: dict[str, list[float]] = {name: [] for name in ("none", *presets)}
    ratios: dict[str, list[float]] = {name: [] for name in presets}
    with (
        initialize_config_dir(str(conf_dir()), version_base="1.3"),
        tempfile.TemporaryDirectory() as tmp,
    ):
        _fit_seconds("none", Path(tmp), args.overrides)  # warm-up: imports, allocator, caches
        for round_index in range(args.rounds):
            order = presets[:]
            rng.shuffle(order)
            baseline = _fit_seconds("none", Path(tmp), args.overrides)
            times["none"].append(baseline)
            for name in order:
                seconds = _fit_seconds(name, Path(tmp), args.overrides)
                times[name].append(seconds)
                ratios[name].append(seconds / baseline - 1.0)
            print(f"round {round_index + 1}/{args.rounds}: baseline {baseline:.3f} s", flush=True)

    lines = [
        f"Workload: built-in transformer, {' '.join(WORKLOAD + tuple(args.overrides))};"
        f" {args.rounds} interleaved rounds.",
        "",
        "| preset | median fit s | median overhead | min .. max overhead over rounds |",
        "|---|---:|---:|---:|",
        f"| none (baseline) | {statistics.median(times['none']):.3f} | - |"
        f" fit s min .. max: {min(times['none']):.3f} .. {max(times['none']):.3f} |",
    ]
    for name in presets:
        r = ratios[name]
        lines.append(
            f"| {name} | {statistics.median(times[name]):.3f} |"
            f" {statistics.median(r):+.1%} | {min(r):+.1%} .. {max(r):+.1%} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
