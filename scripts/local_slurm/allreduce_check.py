"""Allreduce bandwidth between the nodes of the local SLURM cluster: the two-node link check.

Run it on the host, with the cluster's SLURM_CONF (`source /tmp/harness-slurm-2node/env.sh`):

    python scripts/local_slurm/allreduce_check.py [--mib 8] [--iters 5] [--link-rate 100mbit] [--json]

It starts itself through `srun --nodes=N --ntasks-per-node=1` (one rank per node). Each rank
reads its place from Lightning's SLURMEnvironment (which must accept num_nodes=N), joins a
gloo process group at the first node's address (Lightning's main_address, resolved), and
times `--iters` allreduces of a float32 tensor of `--mib` MiB after `--warmup` ones. The time
of one allreduce is the slowest rank's mean; bandwidths follow nccl-tests:
algbw = bytes / time, busbw = algbw * 2 (N - 1) / N (what each rank's link carries per second).
The result of every allreduce is checked, so a fast but wrong one fails.

Output: one line per rank and the bandwidth line; `--json`: one JSON object
{"ranks": [...], "allreduce": {...}}. Exit status 1 when a rank failed or the sum was wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

RANK_MARK = "allreduce_check rank "  # starts each rank's JSON line in srun's output
RATE_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def rate_bytes(rate: str) -> float:
    """tc's RATE (100mbit, 1gbit, 512kbit) in bytes per second."""
    for unit, scale in RATE_UNITS.items():
        if rate.lower().endswith(unit):
            return float(rate[: -len(unit)]) * scale / 8
    raise SystemExit(f"allreduce_check: --link-rate {rate}: give a number and kbit, mbit or gbit")


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One rank: where SLURM and Lightning place it, and on rank 0 the timed allreduce."""
    import torch
    import torch.distributed as dist
    from lightning.fabric.plugins.environments import SLURMEnvironment

    env = SLURMEnvironment()
    env.validate_settings(num_devices=1, num_nodes=args.nodes)  # raises on a mismatch
    rank, world = env.global_rank(), env.world_size()
    host = socket.gethostname()
    fact: dict[str, Any] = {
        "rank": rank, "hostname": host, "address": socket.gethostbyname(host),
        "slurm_nodename": os.environ.get("SLURMD_NODENAME"),
        "lightning": {"detected": SLURMEnvironment.detect(), "num_nodes": args.nodes,
                      "world_size": world, "global_rank": rank, "node_rank": env.node_rank(),
                      "local_rank": env.local_rank(), "main_address": env.main_address,
                      "main_port": env.main_port},
    }
    master = socket.gethostbyname(env.main_address)  # the first node of SLURM's node list
    dist.init_process_group("gloo", init_method=f"tcp://{master}:{env.main_port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))
    tensor = torch.full((args.mib * 2**20 // 4,), float(rank + 1))
    for _ in range(args.warmup):
        dist.all_reduce(tensor)
    tensor.fill_(float(rank + 1))
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(tensor)
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    # each allreduce multiplies the sum of 1..N by N: exact in float32 for these sizes
    expected = world * (world + 1) / 2 * world ** (args.iters - 1)
    correct = torch.tensor([int(bool(torch.all(tensor == expected)))])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    dist.all_reduce(correct, op=dist.ReduceOp.MIN)
    dist.destroy_process_group()
    if rank == 0:
        size = tensor.numel() * tensor.element_size()
        seconds = float(elapsed) / args.iters
        algbw = size / seconds
        fact["allreduce"] = {"backend": "gloo", "bytes": size, "dtype": "float32", "ranks": world,
                             "iters": args.iters, "warmup": args.warmup, "seconds": seconds,
                             "algbw_Bps": algbw, "busbw_Bps": algbw * 2 * (world - 1) / world,
                             "correct": bool(correct)}
    return fact


def launch(args: argparse.Namespace) -> int:
    """srun this script once per node; gather the ranks' lines; print them and the bandwidth."""
    command = ["srun", f"--nodes={args.nodes}", "--ntasks-per-node=1", "--job-name=allreduce-check",
               f"--time={max(1, args.timeout // 60)}", sys.executable, os.path.abspath(__file__),
               "--worker", f"--nodes={args.nodes}", f"--mib={args.mib}", f"--iters={args.iters}",
               f"--warmup={args.warmup}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    ranks = sorted((json.loads(line[len(RANK_MARK):]) for line in done.stdout.splitlines()
                    if line.startswith(RANK_MARK)), key=lambda r: r["rank"])
    if done.returncode != 0 or len(ranks) != args.nodes:
        sys.stderr.write(done.stderr[-4000:])
        print(f"allreduce_check: srun exited {done.returncode} with {len(ranks)} of {args.nodes} ranks",
              file=sys.stderr)
        return 1
    result = ranks[0].pop("allreduce")
    if args.link_rate:
        result["link_rate"] = args.link_rate
        result["busbw_of_link"] = result["busbw_Bps"] / rate_bytes(args.link_rate)
    if args.json:
        print(json.dumps({"ranks": ranks, "allreduce": result}))
    else:
        for r in ranks:
            light = r["lightning"]
            print(f"rank {r['rank']} on {r['hostname']} ({r['address']}): SLURM node {r['slurm_nodename']},"
                  f" Lightning SLURMEnvironment node_rank {light['node_rank']} of num_nodes"
                  f" {light['num_nodes']}, world_size {light['world_size']}")
        share = (f" = {result['busbw_of_link']:.0%} of {args.link_rate}"
                 f" ({rate_bytes(args.link_rate) / 1e6:.1f} MB/s)" if args.link_rate else "")
        print(f"allreduce of {args.mib} MiB float32 over {result['ranks']} nodes (gloo, {args.iters} timed"
              f" after {args.warmup} warm-up): {result['seconds']:.3f} s each, algbw"
              f" {result['algbw_Bps'] / 1e6:.2f} MB/s, busbw {result['busbw_Bps'] / 1e6:.2f} MB/s{share}"
              + ("" if result["correct"] else "; WRONG SUM"))
    return 0 if result["correct"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--mib", type=int, default=8, help="tensor size in MiB (float32)")
    parser.add_argument("--iters", type=int, default=5, help="timed allreduces")
    parser.add_argument("--warmup", type=int, default=1, help="allreduces before the timed ones")
    parser.add_argument("--link-rate", help="the shaped rate (tc's 100mbit, 1gbit): busbw as a share of it")
    parser.add_argument("--timeout", type=int, default=300, help="seconds for the whole srun")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(RANK_MARK + json.dumps(worker(args)), flush=True)
        return 0
    if args.link_rate:
        rate_bytes(args.link_rate)  # a bad rate stops here, before srun
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
