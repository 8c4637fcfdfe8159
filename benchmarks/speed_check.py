"""Is the speed report cheap and right? Three measurements, each a ratio against a baseline
measured in the same process, interleaved so drift and noise hit both sides alike.

(a) overhead: Trainer.fit wall time with the speed preset vs the same fit with no callback
    (A/B; on a busy VM whole-fit times swing by more than the effect), and
(a2) the share of the fit's wall time spent inside the preset's own hooks, timed directly.
(b) agreement: the speed report's training examples/s vs
    (b1) an outside clock around Trainer.fit, differential: (T(W+N) - T(W)) for N steady steps,
    (b2) a plain PyTorch loop (no Lightning) over the same network and batches; the gap here
         is Lightning's own per-step cost, which the speed report rightly includes.
(c) start-up: wall time of `harness --help` and `harness --cfg job` (subprocesses).

Usage: python benchmarks/speed_check.py [--rounds 5] [--steps 60] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch.nn import functional as F

from harness.profilers.speed import SpeedPreset
from harness.workload.data import DeviceBatches, SyntheticDataModule
from harness.workload.model import TransformerModule

BATCH, SEQ, DIM, WARMUP = 32, 64, 128, 5


class HookTimedSpeedPreset(SpeedPreset):
    """SpeedPreset whose every Lightning hook adds its own wall time to `hook_s`."""

    hook_s = 0.0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name in dir(SpeedPreset):
            if name.startswith("on_") or name == "setup":
                setattr(self, name, self._timed(getattr(self, name)))

    def _timed(self, hook):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return hook(*args, **kwargs)
            finally:
                self.hook_s += time.perf_counter() - start

        return timed


def _trainer(steps: int, callbacks: list) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, limit_train_batches=steps, limit_val_batches=0,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, callbacks=callbacks,
    )


def timed_fit(steps: int, with_speed: bool) -> tuple[float, SpeedPreset | None]:
    """Wall time of Trainer.fit over `steps` training batches, and the monitor if used."""
    pl.seed_everything(0, verbose=False)
    model = TransformerModule(dim=DIM)
    data = SyntheticDataModule(batch_size=BATCH, seq_len=SEQ, dim=DIM, train_batches=steps)
    monitor = HookTimedSpeedPreset(warmup_steps=WARMUP, log_rates=False) if with_speed else None
    trainer = _trainer(steps, [monitor] if monitor else [])
    start = time.perf_counter()
    trainer.fit(model, datamodule=data)
    return time.perf_counter() - start, monitor


def plain_loop_examples_per_s(steps: int) -> float:
    """The same network and batches in a bare PyTorch loop, timed per step after warm-up."""
    torch.manual_seed(0)
    model = TransformerModule(dim=DIM)
    optimizer = model.configure_optimizers()
    batches = DeviceBatches(steps, BATCH, SEQ, DIM, torch.device("cpu"), seed=1)
    times = []
    last = time.perf_counter()
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model.net(x), y)
        loss.backward()
        optimizer.step()
        now = time.perf_counter()
        times.append(now - last)
        last = now
    measured = times[WARMUP:]
    return BATCH * len(measured) / sum(measured)


def cli_seconds(*args: str, repeats: int = 5) -> float:
    exe = Path(sys.executable).with_name("harness")
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([str(exe), *args], capture_output=True, check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)

    timed_fit(10, True)  # warm caches and the allocator before anything is measured
    bare, speed, reported, outside, plain, hook_share = [], [], [], [], [], []
    for _ in range(args.rounds):
        bare.append(timed_fit(args.steps, with_speed=False)[0])
        t_speed, monitor = timed_fit(args.steps, with_speed=True)
        speed.append(t_speed)
        reported.append(monitor.phase_summaries()["train"]["examples_per_second"])
        hook_share.append(monitor.hook_s / t_speed)
        t_warm = timed_fit(WARMUP, with_speed=False)[0]
        t_full = timed_fit(WARMUP + args.steps, with_speed=False)[0]
        outside.append(BATCH * args.steps / (t_full - t_warm))
        plain.append(plain_loop_examples_per_s(WARMUP + args.steps))

    overheads = [s / b - 1 for s, b in zip(speed, bare, strict=True)]
    to_outside = [r / o for r, o in zip(reported, outside, strict=True)]
    to_plain = [r / p for r, p in zip(reported, plain, strict=True)]
    results = {
        "rounds": args.rounds,
        "steps": args.steps,
        "workload": f"TransformerModule dim={DIM} depth=2, batch {BATCH} x {SEQ} tokens, CPU",
        "torch_threads": torch.get_num_threads(),
        "a_overhead_median": statistics.median(overheads),
        "a_overhead_per_round": overheads,
        "a2_hook_time_share_median": statistics.median(hook_share),
        "b_reported_examples_per_s_median": statistics.median(reported),
        "b1_outside_clock_examples_per_s_median": statistics.median(outside),
        "b1_ratio_reported_to_outside_median": statistics.median(to_outside),
        "b1_ratio_per_round": to_outside,
        "b2_plain_loop_examples_per_s_median": statistics.median(plain),
        "b2_ratio_reported_to_plain_loop_median": statistics.median(to_plain),
        "b2_ratio_per_round": to_plain,
        "c_help_s": cli_seconds("--help"),
        "c_cfg_job_s": cli_seconds("--cfg", "job"),
    }
    for key, value in results.items():
        if isinstance(value, list):
            value = " ".join(f"{v:.3f}" for v in value)
        print(f"{key:42s} {value:.4f}" if isinstance(value, float) else f"{key:42s} {value}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
