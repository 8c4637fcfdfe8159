"""Is the mission's own sweep, rows only, decided on a busy machine? (issue 34, wrong answer 1)

A user's module whose training step does the same CPU-bound work whatever the batch (`iters`
products of a 256 x 256 rotation, then a loss over the batch that costs next to nothing): so
`batch_size=18` moves 18/16 = 1.125x the examples per second of `batch_size=16`, the planted
truth. Each trial runs, as a user would,

    harness -m batch_size=16,18 repeat=auto ... hydra.sweep.dir=<trial>/sweep

beside two CPU-bound processes (`python -c "while True: pass"`, started before the first trial,
killed after the last; `--quiet` leaves them out), and reads back what the sweep decided: the
rounds it ran, comparison.json's `fastest` (the point, decided or not, and its figure's band),
and the estimate of 18 over 16 through the rounds' pairs (harness.judge.compare over the jobs'
result.json, the table's own evidence). The goal: every trial decided for batch_size=18 within
the round cap (sweep.max_rounds, 30), the estimate near 1.125.

    python benchmarks/busy_rows.py [--trials 3] [--quiet] [--dir KEEP] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULE = '''"""A training step whose time does not depend on the batch (benchmarks/busy_rows.py)."""

import lightning.pytorch as pl
import torch


class FixedStep(pl.LightningModule):
    def __init__(self, iters: int = 60, size: int = 256):
        super().__init__()
        self.iters = iters
        self.weight = torch.nn.Parameter(torch.zeros(1))
        generator = torch.Generator().manual_seed(0)
        turn = torch.linalg.qr(torch.randn(size, size, generator=generator))[0]
        self.register_buffer("turn", turn, persistent=False)

    def training_step(self, batch, batch_idx):
        x = self.turn
        with torch.no_grad():
            for _ in range(self.iters):
                x = x @ self.turn
        return (batch[0].mean() * self.weight).sum() + 0 * x[0, 0]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Batches(pl.LightningDataModule):
    def __init__(self, batch_size: int = 16, batches: int = 30):
        super().__init__()
        self.batch_size, self.batches = batch_size, batches

    def train_dataloader(self):
        data = torch.utils.data.TensorDataset(torch.randn(self.batch_size * self.batches, 4))
        return torch.utils.data.DataLoader(data, batch_size=self.batch_size)
'''
WORKLOAD = ("model._target_=fixed_step.FixedStep", "data._target_=fixed_step.Batches",
            "mode=train", "profiler=[speed]", "logger=none", "trainer.limit_val_batches=0",
            "trainer.enable_progress_bar=false", "hydra.callbacks.sweep_report.plot=false")
HOG = "while True: pass"


def trial(root: Path) -> dict:
    """One sweep in `root`; what it decided."""
    from harness.judge import compare
    from harness.result.jobs import collect
    from harness.sweep.table import build

    started = time.time()
    done = subprocess.run([sys.executable, "-m", "harness.cli", "-m", "batch_size=16,18",
                           "repeat=auto", *WORKLOAD, f"hydra.sweep.dir={root / 'sweep'}"],
                          cwd=root, capture_output=True, text=True)
    found = {"exit": done.returncode, "minutes": (time.time() - started) / 60}
    table = root / "sweep" / "comparison.json"
    if not table.is_file():
        return {**found, "error": done.stderr[-2000:]}
    fastest = json.loads(table.read_text())["fastest"].get("train", {})
    comparison = build(collect(root / "sweep"))
    points = comparison.points.set_index("row")
    verdict = compare(points.loc["16", "train_evidence"], points.loc["18", "train_evidence"],
                      comparison.tolerance, comparison.noise["train"])
    contended = int((comparison.points["train_counted"] == 0).sum())
    return {**found, "rounds": comparison.rounds, "fastest": fastest.get("point"),
            "decided": fastest.get("decided"), "why": fastest.get("why"),
            "ratio_18_over_16": verdict.ratio if verdict else None,
            "interval": [verdict.low, verdict.high] if verdict else None,
            "pairs": verdict.pairs if verdict else None,
            "points_with_no_counted_job": contended,
            "last_round_line": next((line for line in reversed(done.stderr.splitlines())
                                     if "after " in line and "round" in line), None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--quiet", action="store_true", help="no CPU hogs beside the sweeps")
    parser.add_argument("--dir", type=Path, default=None, help="keep the trials here")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="busy_rows-"))
    base.mkdir(parents=True, exist_ok=True)
    hogs = [] if args.quiet else [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2)]
    results = []
    try:
        for n in range(args.trials):
            root = base / f"trial-{n}"
            root.mkdir(exist_ok=True)
            (root / "fixed_step.py").write_text(MODULE)
            results.append(trial(root))
            print(json.dumps(results[-1]), flush=True)
    finally:
        for hog in hogs:
            hog.kill()
    decided = sum(r.get("decided") is True and r.get("fastest") == "batch_size=18" for r in results)
    print(f"{'quiet' if args.quiet else 'beside two CPU hogs'}: {decided} of {len(results)} trials"
          " decided for batch_size=18")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
