"""What the diagnose preset costs, as a share of the default run's wall time.

The default run (`harness`, built-in workload, MLflow on, profiler=[speed,diagnose]) is
timed end to end as a subprocess against the same run without diagnose
(profiler=[speed]), the two alternating round by round so that drift and noisy
neighbours hit both alike. Two figures per round:

- A/B: wall time of the whole command with diagnose / without, minus 1;
- self-reported: the preset's own `diagnosis.passes.cost_s` (its passes, state copy and
  restore, timed inside the run) / the run's `duration_s`, both from result.json.

The A/B is what a user pays; the self-reported share is far less sensitive to the
neighbours and says where the cost is. Goal: under 5 % of the default run.

    python benchmarks/diagnose_cost.py --rounds 5 [--extra data.train_batches=32]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _harness() -> list[str]:
    found = shutil.which("harness", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "harness.cli"]


def _run(profilers: str, extra: list[str]) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        command = [*_harness(), f"profiler={profilers}", "trainer.enable_progress_bar=false",
                   *extra]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=tmp, capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
        result = json.loads(next(Path(tmp).rglob("result.json")).read_text())
    return wall, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides for both runs")
    args = parser.parse_args()
    ab, own = [], []
    for round_index in range(args.rounds):
        order = ["[speed]", "[speed,diagnose]"]
        if round_index % 2:
            order.reverse()
        walls, results = {}, {}
        for profilers in order:
            walls[profilers], results[profilers] = _run(profilers, args.extra)
        with_diagnose = results["[speed,diagnose]"]
        ab.append(walls["[speed,diagnose]"] / walls["[speed]"] - 1)
        own.append(with_diagnose["diagnosis"]["passes"]["cost_s"] / with_diagnose["duration_s"])
        print(f"round {round_index}: without {walls['[speed]']:.2f} s, with"
              f" {walls['[speed,diagnose]']:.2f} s, passes"
              f" {with_diagnose['diagnosis']['passes']['cost_s']:.3f} s", flush=True)
    print(f"{'rounds':40} {args.rounds}")
    print(f"{'a_b_wall_overhead_median':40} {statistics.median(ab):.4f}")
    print(f"{'a_b_wall_overhead_per_round':40} {' '.join(f'{x:.3f}' for x in ab)}")
    print(f"{'self_reported_cost_share_median':40} {statistics.median(own):.4f}")
    print(f"{'self_reported_cost_share_per_round':40} {' '.join(f'{x:.4f}' for x in own)}")


if __name__ == "__main__":
    main()
