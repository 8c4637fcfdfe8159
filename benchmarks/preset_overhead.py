"""Overhead of each profiler preset against no profiler, on the built-in workload.

All runs happen in this one process, interleaved: every round runs the
baseline (profiler=none) and each preset once, all in a shuffled order, so
machine noise hits all of them alike. The figure per preset is the median over
rounds of (fit wall time with the preset / fit wall time of the same round's
baseline) - 1, with the spread (min..max of the per-round ratios) beside it.

    python benchmarks/preset_overhead.py --rounds 5 [--presets speed,system] [--out docs/...md]

Each fit is timed end to end (trainer.fit, device synchronised after it on
CUDA, then the preset's reports written) on two clocks: wall time, and the CPU
time of this process (time.process_time, all threads, so the system sampler's
thread counts). On a machine shared with other jobs the wall clock measures the
neighbours as much as the preset; CPU time is far less sensitive to them and,
for a CPU-bound run, is the better overhead figure.
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
    "data.train_batches=24",
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


def _instrument(obj: object, clock: dict[str, float]) -> None:
    """Sum the wall time spent inside the preset's own code: its hooks (callbacks), start/stop
    (Lightning profilers) and the system sampler's samples. Contention slows that code and the
    fit alike, so its share of the fit is a within-run figure the neighbours barely move."""
    from lightning.pytorch.callbacks import Callback

    from harness.profilers.system import SystemPreset, SystemSampler

    names = (
        [n for n in ("start", "stop") if hasattr(obj, n)]
        if not isinstance(obj, Callback)
        else [
            n
            for n in dir(Callback)
            if n.startswith(("on_", "setup", "teardown"))
            and getattr(type(obj), n) is not getattr(Callback, n)
        ]
    )
    for name in names:
        original = getattr(obj, name)

        def timed(*args, _original=original, **kwargs):
            begin = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                clock["in_preset"] += time.perf_counter() - begin

        setattr(obj, name, timed)
    if isinstance(obj, SystemPreset):
        original_take = SystemSampler._take

        def timed_take(self, _original=original_take):
            begin = time.perf_counter()
            _original(self)
            clock["in_preset"] += time.perf_counter() - begin

        SystemSampler._take = timed_take  # this process runs one fit at a time


def _fit_seconds(preset: str, root: Path, extra: list[str]) -> dict[str, float]:
    import lightning.pytorch as pl
    import torch

    from harness.run import build

    out_dir = Path(tempfile.mkdtemp(dir=root))
    cfg = _compose(preset, out_dir, extra)
    pl.seed_everything(0, verbose=False)
    datamodule = build.build_datamodule(cfg)
    module = build.build_module(cfg)
    presets = build.build_presets(cfg)
    clock = {"in_preset": 0.0}
    for obj in presets.by_name.values():
        _instrument(obj, clock)
    # no logger; harness's own batch observer, as a run has it (run.measure.measure_once)
    trainer = build.build_trainer(cfg, "32-true", presets, None, [presets.observer])
    start, cpu_start = time.perf_counter(), time.process_time()
    trainer.fit(module, datamodule=datamodule)
    if trainer.strategy.root_device.type == "cuda":
        torch.cuda.synchronize()
    for obj in presets.by_name.values():  # reports are part of what a preset costs
        if hasattr(obj, "write_reports"):
            obj.write_reports(out_dir / "reports")
    wall = time.perf_counter() - start
    return {
        "wall": wall,
        "cpu": time.process_time() - cpu_start,
        "share": clock["in_preset"] / wall,
    }


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
    clocks = ("cpu", "wall")
    times = {c: {name: [] for name in ("none", *presets)} for c in clocks}
    ratios = {c: {name: [] for name in presets} for c in clocks}
    shares: dict[str, list[float]] = {name: [] for name in presets}
    with (
        initialize_config_dir(str(conf_dir()), version_base="1.3"),
        tempfile.TemporaryDirectory() as tmp,
    ):
        _fit_seconds("none", Path(tmp), args.overrides)  # warm-up: imports, allocator, caches
        for round_index in range(args.rounds):
            # The baseline takes a shuffled place too: no fixed position in the round.
            order = ["none", *presets]
            rng.shuffle(order)
            measured = {name: _fit_seconds(name, Path(tmp), args.overrides) for name in order}
            baseline = measured["none"]
            for name in order:
                for c in clocks:
                    times[c][name].append(measured[name][c])
                if name != "none":
                    shares[name].append(measured[name]["share"])
                    for c in clocks:
                        ratios[c][name].append(measured[name][c] / baseline[c] - 1.0)
            print(
                f"round {round_index + 1}/{args.rounds}: baseline cpu {baseline['cpu']:.3f} s,"
                f" wall {baseline['wall']:.3f} s",
                flush=True,
            )

    lines = [
        f"Workload: built-in transformer, {' '.join(WORKLOAD + tuple(args.overrides))};"
        f" {args.rounds} interleaved rounds.",
        "",
        "| preset | time in preset's code / fit (median) | min .. max"
        " | CPU s (median) | CPU overhead (median) | CPU overhead min .. max"
        " | wall s (median) | wall overhead (median) | wall overhead min .. max |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in ("none", *presets):
        cells = [name if name != "none" else "none (baseline)"]
        if name == "none":
            cells += ["-", "-"]
        else:
            share = shares[name]
            cells += [f"{statistics.median(share):.2%}", f"{min(share):.2%} .. {max(share):.2%}"]
        for c in clocks:
            cells.append(f"{statistics.median(times[c][name]):.3f}")
            if name == "none":
                cells += ["-", f"{min(times[c][name]):.3f} .. {max(times[c][name]):.3f} s"]
            else:
                r = ratios[c][name]
                cells += [f"{statistics.median(r):+.1%}", f"{min(r):+.1%} .. {max(r):+.1%}"]
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
