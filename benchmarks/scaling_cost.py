"""The cost of the scaling study's per-rank timing (issue 35): the measured ranks' step time with
and without `harness.profilers.rank_timer.RankTimer`, in one run.

What the study adds to a DDP step is RankTimer's: its callback hooks (a host clock read, after a
device synchronise on CUDA, at each batch's start, before and after backward, before the
optimizer and at the batch's end), its DDP communication hook (a Python hook that times every
gradient bucket's call, return and completion around DDP's allreduce, in place of DDP's built-in
C++ allreduce) and its wrap of Lightning's per-batch broadcast. This runs both sides in the same
ranks and process group: `--rounds` rounds of two fits each, one with a RankTimer among the
callbacks and one without, their order alternating by round; each fit a fresh model (so a fresh
DDP wrap: the timer's hook registered, or DDP's own allreduce) and `--steps` optimizer steps of
an MLP on random data. Both sides carry the same minimal step clock (a `time.perf_counter` read
at each batch's end), so its own cost cancels.
A fit's figures are its steps after `--warmup`, each rank's median, then the mean over ranks
(the allreduce keeps them in step): the wall time of a step, and the CPU time the rank's
process (all its threads) spent in it, which another process's load does not stretch. Per
round: ratio = with / without; printed: each round, then each ratio's median over the rounds
with its interquartile range, min and max. 1.00 is no cost.

    python benchmarks/scaling_cost.py [--devices 2] [--accelerator cpu] [--rounds 10]
        [--steps 60] [--warmup 10] [--width 512] [--depth 4] [--batch-size 32]

Lightning starts the ranks > 0 by re-running this command (its DDP launcher); they run the same
fits in the same order, and rank 0 prints.

Measured on 2026-11-28 on the shared 2-core VM (other engineers' tests running: load average
3-7), gloo, 2 CPU ranks of 1 torch thread, the defaults (an MLP 512 wide with 4 hidden
layers: 3.31 MB of gradients, 2 buckets; batch 32), `--rounds 30 --steps 40` (and
`--rounds 20 --steps 40` the run before; a step about 10 ms of wall time, 8.5 ms of CPU):

    step time with / without the timer, wall: median 1.0602 (interquartile 0.9242-1.2119,
        min 0.6272, max 1.5866; 30 rounds)           [before: 1.1035, 0.9284-1.2405]
    CPU time of a step with / without the timer: median 1.0731 (interquartile 1.0113-1.1242,
        min 0.8926, max 1.1962; 30 rounds)           [before: 1.0735, 1.0355-1.1483]

The wall times are the load's more than the timer's (pairs of fits seconds apart differ by a
factor of 2 either way); the CPU time says what the timer costs: about 7 % of this small
step, 0.6 ms of CPU a step, all parts together (a Python hook in place of DDP's built-in
allreduce with one more future callback per bucket, five callback hooks, about a dozen clock
reads; this does not split them): a smaller share of a longer step.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import DDPStrategy
from torch.nn import functional as F

from harness.profilers.rank_timer import RankTimer


class Mlp(pl.LightningModule):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        layers: list[torch.nn.Module] = [torch.nn.Linear(64, width), torch.nn.ReLU()]
        for _ in range(depth - 1):
            layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        self.net = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class StepClock(Callback):
    """Each optimizer step's wall time and this process's CPU time (all its threads), batch end
    to batch end (the same on both sides)."""

    def __init__(self) -> None:
        self.ends: list[tuple[float, float]] = []

    def on_train_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize(trainer.strategy.root_device)
        self.ends.append((time.perf_counter(), time.process_time()))


def fit_once(args: argparse.Namespace, timed: bool) -> tuple[float, float]:
    """One fit: (wall, CPU) seconds of a step, each this rank's median after the warm-up, then
    the mean over the ranks."""
    clock = StepClock()
    callbacks: list[Callback] = [clock, *([RankTimer()] if timed else [])]
    trainer = pl.Trainer(
        accelerator=args.accelerator, devices=args.devices, strategy=DDPStrategy(),
        max_steps=args.steps, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False,
        callbacks=callbacks, num_sanity_val_steps=0)
    generator, examples = torch.Generator().manual_seed(0), args.batch_size * args.steps
    data = torch.utils.data.TensorDataset(torch.randn(examples, 64, generator=generator),
                                          torch.randint(0, 10, (examples,), generator=generator))
    trainer.fit(Mlp(args.width, args.depth), torch.utils.data.DataLoader(data, batch_size=args.batch_size))
    steps = list(zip(clock.ends, clock.ends[1:], strict=False))[args.warmup:]
    mine = tuple(statistics.median(b[k] - a[k] for a, b in steps) for k in (0, 1))
    every: list[tuple[float, float]] = [(0.0, 0.0)] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    return statistics.mean(w for w, _ in every), statistics.mean(c for _, c in every)


def spread(ratios: list[float]) -> str:
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return (f"median {statistics.median(ratios):.4f} (interquartile {quartiles[0]:.4f}-{quartiles[2]:.4f},"
            f" min {min(ratios):.4f}, max {max(ratios):.4f}; {len(ratios)} rounds)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    pl.seed_everything(0, verbose=False)
    rows = []
    for round_ in range(args.rounds):
        order = (True, False) if round_ % 2 == 0 else (False, True)
        seconds = {timed: fit_once(args, timed) for timed in order}
        rows.append((seconds[True], seconds[False]))
    if dist.get_rank() != 0:
        return
    mlp = Mlp(args.width, args.depth)
    grads = sum(p.numel() * p.element_size() for p in mlp.parameters())
    print(f"{args.devices} ranks ({args.accelerator}, {dist.get_backend()}), MLP {args.width} wide, "
          f"{args.depth} hidden layers: {grads / 1e6:.2f} MB of gradients; batch {args.batch_size}, "
          f"median of {args.steps - args.warmup - 1} steps a fit")
    print("round  wall ms: with timer  without  ratio   CPU ms: with timer  without  ratio")
    for n, ((wall_on, cpu_on), (wall_off, cpu_off)) in enumerate(rows):
        print(f"{n:5d}  {wall_on * 1e3:19.3f}  {wall_off * 1e3:7.3f}  {wall_on / wall_off:.3f}"
              f"  {cpu_on * 1e3:18.3f}  {cpu_off * 1e3:7.3f}  {cpu_on / cpu_off:.3f}")
    print("step time with / without the timer, wall:", spread([on[0] / off[0] for on, off in rows]))
    print("CPU time of a step with / without the timer:", spread([on[1] / off[1] for on, off in rows]))

if __name__ == "__main__":
    main()
