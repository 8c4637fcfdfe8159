"""The scaling study (`harness -m sweep=scaling`) against a plain torch.distributed timing of the
same steps, on a model nobody here wrote (issue 35).

The model: Lightning's demo transformer (`lightning.pytorch.demos.Transformer`, 14.6 M
parameters at WikiText2's vocabulary of 33,278 tokens), in a user's own LightningModule and
DataModule that feed it random tokens of WikiText2's shape (blocks of 35) in place of the
download; the file `outside_model.py` is written into a temporary directory, as a user's own,
and harness is started from there (docs/own-model.md).

Each round runs both sides, alternating which goes first, with 1 torch thread per rank on both
(OMP_NUM_THREADS=1; harness `sweep.threads=1`, the plain ranks `torch.set_num_threads(1)`):

- harness: `harness -m sweep=scaling trainer.devices=1,2 repeat=1 mode=train
  trainer.accelerator=cpu logger=none model._target_=outside_model.OutsideTransformer
  data._target_=outside_model.RandomTokensData batch_size=B +data.batches=S
  +trainer.use_distributed_sampler=false sweep.threads=1` (each rank its S batches, as the
  plain ranks), read back from the sweep's scaling.json and each job's result.json and
  reports/speed.json;
- plain: a fresh process that starts 1 or 2 ranks with `torch.multiprocessing` (spawn), gloo, no
  harness, no Trainer (Lightning only as the library the demo model comes from): the same model,
  seed, optimizer (SGD, lr 0.1), loss and batches; 2 ranks wrap it in
  `DistributedDataParallel` with DDP's defaults (as Lightning's DDPStrategy does on a CPU), 1 rank
  runs it unwrapped (as harness runs a world size of 1). Each step is timed with
  `time.perf_counter` from the previous step's end to its own (the batch's fetch included, as the
  speed preset does), the first 5 steps left out (the speed preset's warm-up).

Figures per world size, each side:

- ex/s: every rank's examples over the slowest rank's measured time; speed-up: 2 ranks' ex/s over
  1 rank's, in the same round; on CPU: ex/s / (1 - rank 0's run delay share over the measured
  window, /proc schedstat): the rate a loaded pair is judged on (harness.judge.Sample.on_cpu);
- CPU s/step: the CPU time of every rank's process over the measured window / measured steps
  (harness: speed.json's `contention.own_cpu_s`);
- s/step: the slowest rank's measured time / measured steps; median step: per step the slowest
  rank, their median (harness: the rank timer's `step_s`);
- bytes per step: the gradient buckets handed to the allreduce;
- allreduce in flight: per step the union of the buckets' intervals from the comm hook's call to
  its future's completion, the least over ranks, the median over steps (plain: a comm hook that
  wraps `default_hooks.allreduce_hook` and times its future; harness: `comm.time_s`);
- exposed: per step the time from the last bucket's hand-over to the end of `backward()` (the
  allreduce not hidden by backward), the least over ranks (harness: `comm.exposed_s` = `comm_s`);
  "harness's definition": the same plus the earlier buckets' hook work (DDP's hook divides each
  bucket by the world size before sending it) and, with `--broadcast`, Lightning's per-batch
  broadcast, the least over ranks of that sum, as harness.profilers.rank_timer adds up `blocked`;
- allreduce alone (plain only, a separate measurement after the loop): `dist.all_reduce` of one
  flat tensor of the gradients' size, after a barrier, S times; the least over ranks, median.

Printed: every round's figures and load average, then per world size each side's median over
rounds (min-max) and the ratio harness/plain (median of the rounds' ratios, min-max).

    python benchmarks/scaling_outside.py [--rounds 3] [--batch-size 4] [--steps 30] [--json out.json]
    --broadcast: the plain ranks also make Lightning's per-batch broadcast from rank 0, timed
    --no-hook:   the plain ranks use DDP's built-in allreduce, untimed (no communication figures)
    --keep DIR:  run in DIR and keep it (the sweeps, outside_model.py, the plain ranks' records)

Measured on 2026-11-28 on the shared 2-core VM (load average 1.7-2.1 from other engineers' work;
its share of the CPUs during the harness jobs 0.00-0.01 except round 1's, 0.50 and 0.22), 5 rounds,
4.1 minutes, `python benchmarks/scaling_outside.py --rounds 5`:

    world  figure                                         harness                  plain        harness/plain
        1  ex/s                               25.77 (23.22-27.38)    25.62 (24.48-27.50)  1.028 (0.936-1.050)
        1  speed-up                                         1.000                  1.000                1.000
        1  ex/s on CPU                        25.77 (23.44-27.38)    25.62 (24.49-27.50)  1.028 (0.937-1.050)
        1  speed-up on CPU                                  1.000                  1.000                1.000
        1  run delay (rank 0)                    0.00 (0.00-0.01)       0.00 (0.00-0.00)                    -
        1  CPU s/step                         0.155 (0.146-0.170)    0.156 (0.145-0.163)  0.971 (0.953-1.067)
        1  s/step                             0.155 (0.146-0.172)    0.156 (0.145-0.163)  0.973 (0.953-1.069)
        1  median step s                      0.151 (0.141-0.172)    0.153 (0.143-0.165)  0.967 (0.943-1.057)
        2  ex/s                               33.56 (25.86-35.73)    34.99 (33.53-36.37)  0.967 (0.736-1.066)
        2  speed-up                           1.280 (1.114-1.369)    1.313 (1.272-1.486)  0.934 (0.787-1.037)
        2  ex/s on CPU                        43.51 (39.55-45.44)    43.43 (42.11-45.92)  0.991 (0.884-1.079)
        2  speed-up on CPU                    1.689 (1.548-1.727)    1.644 (1.579-1.876)  0.954 (0.921-1.069)
        2  run delay (rank 0)                    0.21 (0.21-0.35)       0.20 (0.19-0.22)                    -
        2  CPU s/step                         0.438 (0.409-0.452)    0.423 (0.407-0.437)  1.031 (0.935-1.077)
        2  s/step                             0.238 (0.224-0.309)    0.229 (0.220-0.239)  1.034 (0.938-1.358)
        2  median step s                      0.234 (0.222-0.260)    0.227 (0.225-0.239)  1.022 (0.929-1.143)
        2  bytes/step                                  58,542,712             58,542,712                1.000
        2  allreduce in flight s           0.0733 (0.0668-0.0825) 0.0696 (0.0627-0.0702)  1.076 (1.044-1.185)
        2  exposed s                       0.0424 (0.0381-0.0456) 0.0342 (0.0314-0.0368)  1.212 (1.152-1.300)
        2  allreduce alone s                                    - 0.0406 (0.0400-0.0444)                    -
        2  earlier buckets' hooks s                             - 0.0016 (0.0016-0.0016)                    -
        2  exposed, harness's definition s 0.0424 (0.0381-0.0456) 0.0384 (0.0342-0.0398)  1.114 (1.093-1.157)

Throughput, speed-up, step time and bytes agree (bytes exactly: 14,635,678 parameters x 4 B, in
2 buckets of 26.8 and 31.8 MB). harness's `exposed` is 1.21x the plain one: its definition holds
more than the allreduce not hidden by backward (above); by that definition 1.11x. The allreduce in
flight is 1.08x (1.04-1.19): unexplained here. The bandwidth harness derives from it (bytes /
in-flight time: 0.80 GB/s) is 0.55x that of the same bytes allreduced alone (1.44 GB/s): the first
bucket is handed over mid-backward, so its in-flight time holds backward's compute beside it.
docs/benchmarks.md has the analysis.
"""

# No `from __future__ import annotations`: DDP checks a comm hook's annotations as objects.
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WARMUP = 5  # conf/profiler/speed.yaml warmup_steps: the steps the speed preset leaves out
HARNESS = Path(sys.executable).with_name("harness")

# The user's own module, written into the benchmark's temporary directory (docs/own-model.md).
OUTSIDE_MODEL = '''"""A user's LightningModule and DataModule around Lightning's demo transformer, fed random
tokens of WikiText2's shape (the demo's WikiText2 downloads its text)."""
import lightning.pytorch as pl
import torch
from lightning.pytorch.demos import Transformer
from torch.utils.data import DataLoader, Dataset

VOCAB = 33278  # WikiText2's vocabulary: the demo's default
BLOCK = 35  # the demo's block_size


class OutsideTransformer(pl.LightningModule):
    """lightning.pytorch.demos.LightningTransformer's step, without its WikiText2 download."""

    def __init__(self, vocab_size: int = VOCAB) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size)

    def forward(self, inputs, target):
        return self.model(inputs, target)

    def training_step(self, batch, batch_idx):
        inputs, target = batch
        return torch.nn.functional.nll_loss(self(inputs, target), target.view(-1))

    def configure_optimizers(self):
        return torch.optim.SGD(self.model.parameters(), lr=0.1)


class RandomTokens(Dataset):
    """WikiText2's items (35 tokens, and the 35 after each), of random token ids."""

    def __init__(self, examples: int, vocab_size: int = VOCAB, block: int = BLOCK) -> None:
        generator = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, vocab_size, (examples * block + 1,), generator=generator)
        self.examples, self.block = examples, block

    def __len__(self):
        return self.examples

    def __getitem__(self, index):
        start = index * self.block
        return self.data[start:start + self.block], self.data[start + 1:start + 1 + self.block]


class RandomTokensData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 8, batches: int = 30) -> None:
        super().__init__()
        self.batch_size, self.batches = batch_size, batches

    def setup(self, stage):
        self.dataset = RandomTokens(self.batch_size * self.batches)

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)
'''


def median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def run_delay() -> tuple[int, int]:
    """(ns run, ns waited while runnable) over this process's threads (/proc schedstat), as
    harness.contention reads them."""
    ran = waited = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
        except OSError:
            continue
        ran, waited = ran + int(fields[0]), waited + int(fields[1])
    return ran, waited


def in_flight(calls: list[tuple[float, float]]) -> float:
    """Seconds some bucket was in flight: the union of their (call, completion) intervals."""
    total, reached = 0.0, float("-inf")
    for start, end in sorted(calls):
        total += max(0.0, end - max(start, reached))
        reached = max(reached, end)
    return total


# ---- the plain side: no harness, no Trainer --------------------------------------------------

def rank_main(rank: int, world: int, directory: str, batch_size: int, steps: int, broadcast: bool,
              hook: bool) -> None:
    """One rank of the plain timing: its records into rank<N>.json. `broadcast`: each step starts
    with Lightning's per-batch broadcast from rank 0 (`_broadcast_sigterm_tensor`), timed; `hook`:
    the timing comm hook (else DDP's built-in allreduce, untimed)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader

    sys.path.insert(0, directory)
    from lightning.pytorch.demos import Transformer
    from outside_model import VOCAB, RandomTokens  # the user's file: the same batches

    torch.set_num_threads(1)
    torch.manual_seed(0)  # harness's seed_everything(0): the same initial weights
    model = Transformer(vocab_size=VOCAB)
    model.train()
    calls: list[list[float]] = []  # [called, completed, bytes, returned] per bucket, this step
    net: torch.nn.Module = model
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        net = DistributedDataParallel(model)  # DDP's defaults, as Lightning's DDPStrategy on CPU

        def timed_allreduce(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
            buffer = bucket.buffer()
            call = [time.perf_counter(), 0.0, float(buffer.numel() * buffer.element_size()), 0.0]
            calls.append(call)

            def done(future: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
                call[1] = time.perf_counter()
                return future.value()

            future = default_hooks.allreduce_hook(state, bucket)
            call[3] = time.perf_counter()  # the hook's own work ends (DDP's: the bucket's div_)
            return future.then(done)

        if hook:
            net.register_comm_hook(None, timed_allreduce)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(RandomTokens(batch_size * steps), batch_size=batch_size)
    records = []
    window: dict[str, Any] = {}
    flag, batches = torch.tensor([0]), iter(loader)
    origin = time.perf_counter()
    for index in range(len(loader)):
        if index == WARMUP:  # the measured window opens: the process's CPU time and run delay
            window.update(cpu_s=-time.process_time(), delay=[-v for v in run_delay()])
        if broadcast and world > 1:
            dist.broadcast(flag, src=0)
            broadcast_s = time.perf_counter() - origin  # the step's start to the broadcast's end
        inputs, target = next(batches)
        fetched = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.nll_loss(net(inputs, target), target.view(-1))
        backward_start = time.perf_counter()
        loss.backward()
        backward_end = time.perf_counter()
        optimizer.step()
        end = time.perf_counter()
        step = {"step_s": end - origin, "examples": len(inputs), "fetch_s": fetched - origin,
                "forward_s": backward_start - fetched, "backward_s": backward_end - backward_start,
                "optimizer_s": end - backward_end}
        if calls:
            last = max(c[0] for c in calls)
            step.update(bytes=sum(c[2] for c in calls), in_flight_s=in_flight([(c[0], c[1]) for c in calls]),
                        exposed_s=backward_end - last,
                        in_hooks_s=sum(c[3] - c[0] for c in calls if c[0] < last),
                        broadcast_s=broadcast_s if broadcast else 0.0,
                        buckets=[c[2] for c in calls])
        calls.clear()
        records.append(step)
        origin = end
    ran, waited = (after + before for after, before in zip(run_delay(), window.pop("delay"), strict=True))
    window.update(cpu_s=window["cpu_s"] + time.process_time(), delay_share=waited / (ran + waited))
    alone = []
    if world > 1:  # the allreduce of the gradients' size by itself, after the timed steps
        flat = torch.zeros(sum(p.numel() for p in model.parameters()))
        for _ in range(steps):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(flat)
            alone.append(time.perf_counter() - start)
        dist.destroy_process_group()
    Path(directory, f"rank{rank}.json").write_text(json.dumps({"steps": records, "alone_s": alone, **window}))
    # Leave without destructors: DDP's reducer, freed with the GIL held, joins gloo's threads while
    # one of them waits for the GIL to free the comm hook's tensors (seen here once in 5 runs).
    os._exit(0)


def plain_main(world: int, directory: str, batch_size: int, steps: int, broadcast: bool, hook: bool
               ) -> None:
    """Start `world` ranks (spawn) and wait for them."""
    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    mp.start_processes(rank_main, args=(world, directory, batch_size, steps, broadcast, hook), nprocs=world,
                       start_method="spawn")


def plain_figures(directory: Path, world: int) -> dict[str, Any]:
    ranks = [json.loads((directory / f"rank{n}.json").read_text()) for n in range(world)]
    measured = [r["steps"][WARMUP:] for r in ranks]
    times = [sum(s["step_s"] for s in steps) for steps in measured]
    examples = sum(s["examples"] for steps in measured for s in steps)
    count = min(len(steps) for steps in measured)
    per_step = list(zip(*measured, strict=True))
    figures: dict[str, Any] = {
        "examples_per_second": examples / max(times), "measured_steps": count,
        "seconds_per_step": max(times) / count,
        "median_step_s": median([max(s["step_s"] for s in row) for row in per_step]),
        "cpu_s_per_step": sum(r["cpu_s"] for r in ranks) / count,
        "run_delay_share": ranks[0]["delay_share"],
    }
    if world > 1 and "bytes" in measured[0][0]:  # the timing hook ran
        figures.update(
            bytes_per_step=median([row[0]["bytes"] for row in per_step]),
            comm_time_s=median([min(s["in_flight_s"] for s in row) for row in per_step]),
            exposed_s=median([min(s["exposed_s"] for s in row) for row in per_step]),
            in_hooks_s=median([min(s["in_hooks_s"] for s in row) for row in per_step]),
            blocked_s=median([min(s["exposed_s"] + s["in_hooks_s"] + s["broadcast_s"] for s in row)
                              for row in per_step]))
        if measured[0][0]["broadcast_s"]:
            figures["broadcast_s"] = median([min(s["broadcast_s"] for s in row) for row in per_step])
    if world > 1:
        alone = zip(*(r["alone_s"] for r in ranks), strict=True)
        figures["alone_s"] = median([min(times) for times in alone])
    return figures


def run_plain(work: Path, world: int, batch_size: int, steps: int, env: dict[str, str], broadcast: bool,
              hook: bool) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix=f"plain{world}_", dir=work))
    (directory / "outside_model.py").write_text(OUTSIDE_MODEL)
    subprocess.run([sys.executable, __file__, "--plain", str(world), "--dir", str(directory),
                    "--batch-size", str(batch_size), "--steps", str(steps)] + ["--broadcast"] * broadcast
                   + ["--no-hook"] * (not hook),
                   check=True, env=env)
    return plain_figures(directory, world)


# ---- the harness side --------------------------------------------------------------------------

def harness_command(batch_size: int, steps: int, sweep_dir: Path) -> list[str]:
    return [str(HARNESS), "-m", "sweep=scaling", "trainer.devices=1,2", "repeat=1", "mode=train",
            "trainer.accelerator=cpu", "logger=none", "model._target_=outside_model.OutsideTransformer",
            "data._target_=outside_model.RandomTokensData", f"batch_size={batch_size}",
            f"+data.batches={steps}", "+trainer.use_distributed_sampler=false", "sweep.threads=1",
            f"hydra.sweep.dir={sweep_dir}"]


def run_harness(work: Path, sweep_dir: Path, batch_size: int, steps: int, env: dict[str, str]
                ) -> dict[int, dict[str, Any]]:
    done = subprocess.run(harness_command(batch_size, steps, sweep_dir), cwd=work, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"harness failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    study = json.loads((sweep_dir / "scaling.json").read_text())
    found: dict[int, dict[str, Any]] = {}
    for result_path in sorted(sweep_dir.glob("*/result.json")):
        result = json.loads(result_path.read_text())
        world = result["device"]["world_size"]
        speed = json.loads((result_path.parent / "reports" / "speed.json").read_text())["phases"]["train"]
        per_rank = speed.get("per_rank") or [{"measured_time_s": speed["measured_time_s"],
                                              "measured_steps": speed["measured_steps"]}]
        point = next(p for p in study["points"] if p["world_size"] == world)
        comm = point.get("comm") or {}
        found[world] = {
            "examples_per_second": point["examples_per_second"],
            "measured_steps": speed["measured_steps"],
            "seconds_per_step": max(r["measured_time_s"] / r["measured_steps"] for r in per_rank),
            "median_step_s": result["scaling"]["step_s"],
            "bytes_per_step": comm.get("bytes_per_step"), "comm_time_s": comm.get("time_s"),
            "exposed_s": comm.get("exposed_s"),
            "cpu_s_per_step": speed["contention"]["own_cpu_s"] / speed["measured_steps"],
            "run_delay_share": result["metrics"].get("train_run_delay_share"),
            "other_cpu_share": result["metrics"].get("train_other_cpu_share"),
            "threads": result.get("threads"), "status": result["status"],
        }
    return found


# ---- rounds and the table ----------------------------------------------------------------------

FIGURES = [  # (key, label, format)
    ("examples_per_second", "ex/s", "{:.2f}"), ("speedup", "speed-up", "{:.3f}"),
    ("on_cpu_examples_per_second", "ex/s on CPU", "{:.2f}"), ("on_cpu_speedup", "speed-up on CPU", "{:.3f}"),
    ("run_delay_share", "run delay (rank 0)", "{:.2f}"), ("cpu_s_per_step", "CPU s/step", "{:.3f}"),
    ("seconds_per_step", "s/step", "{:.3f}"), ("median_step_s", "median step s", "{:.3f}"),
    ("bytes_per_step", "bytes/step", "{:,.0f}"), ("comm_time_s", "allreduce in flight s", "{:.4f}"),
    ("exposed_s", "exposed s", "{:.4f}"), ("alone_s", "allreduce alone s", "{:.4f}"),
    ("in_hooks_s", "earlier buckets' hooks s", "{:.4f}"), ("broadcast_s", "broadcast s", "{:.4f}"),
    ("blocked_s", "exposed, harness's definition s", "{:.4f}")]
# The table's harness column for a plain-only figure that harness reports under another name; no
# ratio for the run delay (a share near 0 on one rank).
HARNESS_KEY = {"blocked_s": "exposed_s"}
NO_RATIO = {"run_delay_share"}


def spread(values: list[float], form: str) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    text = form.format(statistics.median(values))
    return text if len(values) == 1 or min(values) == max(values) else (
        f"{text} ({form.format(min(values))}-{form.format(max(values))})")


def table(rounds: list[dict[str, Any]], worlds: list[int]) -> list[str]:
    lines = [f"{'world':>5}  {'figure':<31}{'harness':>23}{'plain':>23}{'harness/plain':>21}"]
    for world in worlds:
        for key, label, form in FIGURES:
            sides = {"harness": [r["harness"][world].get(HARNESS_KEY.get(key, key)) for r in rounds],
                     "plain": [r["plain"][world].get(key) for r in rounds]}
            if all(v is None for v in sides["plain"]):
                continue
            ratios = [] if key in NO_RATIO else [
                h / p for h, p in zip(sides["harness"], sides["plain"], strict=True) if h is not None and p]
            lines.append(f"{world:>5}  {label:<31}{spread(sides['harness'], form):>23}"
                         f"{spread(sides['plain'], form):>23}{spread(ratios, '{:.3f}'):>21}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30, help="batches per rank, 5 of them warm-up")
    parser.add_argument("--broadcast", action="store_true",
                        help="the plain ranks also broadcast Lightning's per-batch flag, timed")
    parser.add_argument("--no-hook", action="store_true",
                        help="the plain ranks use DDP's built-in allreduce, untimed (no comm figures)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="run in this directory and keep it")
    parser.add_argument("--plain", type=int, help=argparse.SUPPRESS)  # a plain run's own process
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain:
        plain_main(args.plain, args.dir, args.batch_size, args.steps, args.broadcast, not args.no_hook)
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # harness finds outside_model.py in its start directory
    work = args.keep or Path(tempfile.mkdtemp(prefix="scaling_outside_"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "outside_model.py").write_text(OUTSIDE_MODEL)
    print("harness side, each round:", " ".join(harness_command(args.batch_size, args.steps,
                                                                 Path("<sweep dir>"))[1:]), flush=True)
    worlds, rounds = [1, 2], []
    for n in range(args.rounds):
        found: dict[str, Any] = {"load_start": os.getloadavg()[0]}
        order = ("harness", "plain") if n % 2 == 0 else ("plain", "harness")
        for side in order:
            start = time.perf_counter()
            if side == "harness":
                found["harness"] = run_harness(work, work / f"sweep{n}", args.batch_size, args.steps, env)
            else:
                found["plain"] = {w: run_plain(work, w, args.batch_size, args.steps, env, args.broadcast,
                                                 not args.no_hook)
                                  for w in worlds}
            found[f"{side}_wall_s"] = time.perf_counter() - start
        found["load_end"] = os.getloadavg()[0]
        for side in ("harness", "plain"):
            point = found[side]
            for world in worlds:  # harness's figure for a loaded pair (harness.judge.Sample.on_cpu)
                point[world]["on_cpu_examples_per_second"] = (
                    point[world]["examples_per_second"] / (1 - point[world]["run_delay_share"]))
            for world in worlds:
                for rate in ("", "on_cpu_"):
                    point[world][f"{rate}speedup"] = (point[world][f"{rate}examples_per_second"]
                                                      / point[worlds[0]][f"{rate}examples_per_second"])
        rounds.append(found)
        print(f"round {n + 1} ({' then '.join(order)}; load average {found['load_start']:.1f} -> "
              f"{found['load_end']:.1f}; harness {found['harness_wall_s']:.0f} s, plain "
              f"{found['plain_wall_s']:.0f} s):", flush=True)
        for world in worlds:
            for side in ("harness", "plain"):
                f = found[side][world]
                other = f.get("other_cpu_share")
                print(f"  {world} rank(s) {side:<7}" + "".join(
                    f"  {label} {form.format(f[key])}" for key, label, form in FIGURES
                    if f.get(key) is not None) + (f"  others' CPU share {other:.2f}" if other is not None
                                                   else ""), flush=True)
    print(f"\nMedian over {args.rounds} rounds (min-max); harness/plain: the median of the rounds' ratios")
    print("\n".join(table(rounds, worlds)))
    if args.json:
        args.json.write_text(json.dumps(rounds, indent=1, default=str))


if __name__ == "__main__":
    main()
