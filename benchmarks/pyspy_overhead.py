"""How much py-spy sampling slows a training loop, as a ratio to no sampling.

The loop is the built-in workload's network (forward, backward, AdamW step)
on random data, run in this process. Each round times `--steps` steps under
every setting, in turn (interleaved), and the figures are medians over rounds:

    python benchmarks/pyspy_overhead.py [--rounds 7] [--steps 30] [--rate 100]

Settings: no py-spy; one `py-spy record` at the given rate, pausing the
process per sample (py-spy's default); and what profiler=pyspy runs by
default: that plus a second, non-pausing recorder for the speedscope file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from harness.profilers.pyspy import Recorder, pyspy_command
from harness.workload.model import Block


def make_step(dim: int, depth: int, batch: int, tokens: int):
    torch.manual_seed(0)
    net = torch.nn.Sequential(*(Block(dim, 4, 4, 0.0) for _ in range(depth)))
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x, y = torch.randn(batch, tokens, dim), torch.randn(batch, tokens, dim)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(net(x), y).backward()
        optimizer.step()

    return step


def timed(step, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def recorders(setting: str, rate: int, folder: Path) -> list[Recorder]:
    formats = {
        "none": [],
        "py-spy default": ["flamegraph"],
        "profiler=pyspy default": ["flamegraph", "speedscope"],
    }[setting]
    made = []
    for index, fmt in enumerate(formats):
        output = folder / f"{setting.replace(' ', '_')}.{fmt}"
        command = pyspy_command(
            "py-spy",
            os.getpid(),
            output,
            fmt,
            rate,
            subprocesses=False,
            native=False,
            idle=False,
            gil=False,
            nonblocking=index > 0,
        )
        made.append(Recorder(fmt, output, command))
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30, help="training steps timed per setting")
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    if shutil.which("py-spy") is None:
        raise SystemExit("py-spy is not installed: pip install py-spy")

    step = make_step(args.dim, args.depth, args.batch, args.tokens)
    for _ in range(5):  # allocator and kernel warm-up
        step()
    settings = ("none", "py-spy default", "profiler=pyspy default")
    seconds: dict[str, list[float]] = {s: [] for s in settings}
    with tempfile.TemporaryDirectory() as folder:
        for round_index in range(args.rounds):
            # Rotate the order each round so no setting always runs first.
            shift = round_index % len(settings)
            for setting in settings[shift:] + settings[:shift]:
                running = recorders(setting, args.rate, Path(folder))
                for recorder in running:
                    failure = recorder.start(timeout_s=20)
                    if failure:
                        raise SystemExit(f"py-spy could not start: {failure}")
                seconds[setting].append(timed(step, args.steps))
                for recorder in running:
                    recorder.stop()

    base = statistics.median(seconds["none"])
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; {os.cpu_count()} CPUs;"
        f" {args.rounds} interleaved rounds of {args.steps} steps; py-spy at {args.rate} Hz"
    )
    print(f"{'setting':26s} {'median s/step':>14s} {'min s/step':>11s} {'x none':>8s}")
    for setting in settings:
        median = statistics.median(seconds[setting])
        print(f"{setting:26s} {median:14.5f} {min(seconds[setting]):11.5f} {median / base:8.3f}")


if __name__ == "__main__":
    main()
