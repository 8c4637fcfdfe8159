"""Does autotune find what the exhaustive grid finds, for a third of its cost?

One invocation runs both, on the built-in workload (the transformer, small, on the CPU
here; its data is made on the device, so the loader workers of the space do not matter:
the grid runs them anyway, autotune should not), over the same space:

1. the grid: `harness -m <space> repeat=2 mode=train`: every point in 2 rounds (order
   alternating), each job the data's train_batches steps;
2. autotune: `harness -m sweep=autotune <space> autotune.budget.jobs=<a third of the grid's
   jobs>` (the grid ran every point twice, so a third of its jobs is a third of its cost).

Both sweeps are read back from their job directories the same way (harness.autotune.reading:
each job's robust examples/s, compile charged its compile time over autotune.planned_steps),
so both rank alike. The grid's best is the point with the highest median; autotune's winner
passes when its grid figure is tied with the grid best (their min..max ranges over the
grid's rounds overlap) or is the best, and when autotune's job-seconds (the sum of its jobs'
duration_s) are at most a third of the grid's. Neither side assumes which setting wins (on a
CPU bf16 may well lose, and compile pays TorchInductor's compile in every job).

    python benchmarks/autotune_vs_grid.py [--space batch_size=8,16,32 ...] [--json out.json]

Recipe mode (`--global-batch N`, docs/autotune.md "A recipe's global batch"): both sweeps keep
`global_batch_size=N`, so every job's optimizer step takes N examples, and search how to run
it: micro-batch (dividing N) x accumulation, activation checkpointing, precision. The grid's
jobs all run the same optimizer steps (`trainer.max_steps`: one of warm-up and 10 measured,
in an epoch that is a whole number of steps for every micro-batch), so each point measures
as many examples; the figures compared are examples/s. It also checks, off each job's
result.json (`observed.optimizer_step.examples`), that every optimizer step of every job of
both sweeps took N examples.

    python benchmarks/autotune_vs_grid.py --global-batch 64 [--space ...] [--autotune ...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.autotune.reading import outcome_of
from harness.autotune.score import job_sample
from harness.autotune.settings import Settings
from harness.autotune.verdict import line
from harness.config.overrides import MEASUREMENT_KEYS, parse_overrides
from harness.result.jobs import read_job

WORKLOAD = ("data.seq_len=16", "data.dim=32", "model.depth=1", "data.train_batches=24",
            "logger=none", "hydra.callbacks.sweep_report.plot=false")
SPACE = ("batch_size=8,16,32,64,128", "precision=fp32,bf16", "compile=false,true",
         "data.num_workers=0,2")
# --global-batch N: two blocks (one is no repeated block, nothing to checkpoint); the
# micro-batches that divide N (from 8), checkpointing and precision
RECIPE_WORKLOAD = tuple(o.replace("model.depth=1", "model.depth=2") for o in WORKLOAD)
RECIPE_SPACE = ("activation_checkpointing=false,true", "precision=fp32,bf16")
# The lines of autotune's default space (sweeps/autotune.yaml): a key not in --space is fixed
# at its default for both sweeps, or autotune would search it and the grid would not.
DEFAULT_LINES = ("precision=fp32", "compile=false", "data.num_workers=0",
                 "activation_checkpointing=false")
MEASURED_STEPS = 10  # optimizer steps a grid job measures in recipe mode (a probe's)


def _harness() -> list[str]:
    found = shutil.which("harness", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "harness.cli"]


def _sweep(cwd: Path, overrides: list[str]) -> tuple[Path, float, str]:
    """Run one sweep in `cwd`: its directory, wall seconds and terminal output."""
    command = [*_harness(), "-m", *overrides]
    print("+ harness -m " + " ".join(overrides), flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=6 * 3600,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}):\n{done.stderr[-3000:]}")
    (found,) = cwd.glob("multirun/*/*")
    return found, wall, done.stdout + done.stderr


def _points(sweep_dir: Path, keys: list[str], settings: Settings) -> dict[tuple, list[float]]:
    """Point (values of `keys`) -> its jobs' scores (examples/s, compile charged)."""
    found: dict[tuple, list[float]] = {}
    for job_dir in sorted(p.parent for p in sweep_dir.glob("*/result.json")):
        values = parse_overrides(read_job(job_dir)[0].overrides)
        point = tuple(values.get(k) for k in keys)
        score = job_sample(outcome_of(job_dir, settings.objective), settings)
        found.setdefault(point, [])
        if score is not None:
            found[point].append(score.figure)
    return found


def _job_seconds(sweep_dir: Path) -> float:
    return sum(json.loads(p.read_text()).get("duration_s") or 0.0
               for p in sweep_dir.glob("*/result.json"))


def recipe_grid(global_batch: int, space: list[str]) -> list[str]:
    """The grid's own overrides at a global batch: every job the same optimizer steps (one of
    warm-up, then MEASURED_STEPS), its epoch a whole number of them at every micro-batch."""
    (batches,) = [s.partition("=")[2] for s in space if s.startswith("batch_size=")]
    steps = [global_batch // int(b) for b in batches.split(",")]
    epoch = math.lcm(*steps) * (1 + MEASURED_STEPS)
    return [f"global_batch_size={global_batch}", f"trainer.max_steps={1 + MEASURED_STEPS}",
            f"data.train_batches={epoch}", "profiler.speed.warmup_steps=1"]


def steps_off(sweep_dir: Path, global_batch: int) -> list[str]:
    """The jobs whose optimizer steps did not take `global_batch` examples each (result.json's
    observed.optimizer_step, counted off the fit)."""
    wrong = []
    for path in sorted(sweep_dir.glob("*/result.json")):
        result = json.loads(path.read_text())
        step = (result.get("observed") or {}).get("optimizer_step") or {}
        if result.get("status") in ("ok", "partial") and (
                step.get("examples") != global_batch or step.get("other_steps")):
            wrong.append(f"{path.parent.name}: {step}")
    return wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", nargs="*", default=None,
                        help=f"the swept keys (default: {' '.join(SPACE)}; with --global-batch N:"
                        f" batch_size=<its divisors from 8> {' '.join(RECIPE_SPACE)})")
    parser.add_argument("--workload", nargs="*", default=None,
                        help=f"the workload's overrides (default: {' '.join(WORKLOAD)}; with"
                        " --global-batch: model.depth=2)")
    parser.add_argument("--global-batch", type=int, default=None, metavar="N",
                        help="recipe mode: both sweeps at global_batch_size=N (module docstring)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--dir", type=Path, default=None,
                        help="run the two sweeps in DIR/grid and DIR/autotune and keep them"
                        " (default: a temporary directory, removed)")
    parser.add_argument("--autotune", nargs="*", default=[],
                        help="autotune.* settings for the autotune sweep (default:"
                        " autotune.budget.jobs=<a third of the grid's jobs>)")
    args = parser.parse_args()
    recipe = args.global_batch
    if args.workload is None:
        args.workload = list(RECIPE_WORKLOAD if recipe else WORKLOAD)
    if args.space is None:
        divisors = [str(b) for b in range(8, (recipe or 0) + 1) if recipe % b == 0]
        args.space = ([f"batch_size={','.join(divisors)}", *RECIPE_SPACE] if recipe
                      else list(SPACE))
    keys = [s.partition("=")[0] for s in args.space]
    assert not set(keys) & set(MEASUREMENT_KEYS)
    settings = Settings(objective="training")
    fixed = [o for o in DEFAULT_LINES if o.partition("=")[0] not in keys]
    # recipe mode: the global batch kept by both
    at = [f"global_batch_size={recipe}"] if recipe else []
    with tempfile.TemporaryDirectory() as tmp:
        where = args.dir or Path(tmp)
        grid_cwd, tune_cwd = where / "grid", where / "autotune"
        grid_cwd.mkdir(parents=True), tune_cwd.mkdir(parents=True)
        grid_dir, grid_wall, _ = _sweep(grid_cwd, [
            *args.workload, *fixed, *args.space, "repeat=2", "mode=train",
            "trainer.limit_val_batches=0", *(recipe_grid(recipe, args.space) if recipe else [])])
        budget = args.autotune or [f"autotune.budget.jobs={len(list(grid_dir.glob('*/result.json'))) // 3}"]
        tune_dir, tune_wall, _ = _sweep(tune_cwd, ["sweep=autotune", *args.workload, *fixed, *at,
                                                   *args.space, *budget])
        grid = {p: s for p, s in _points(grid_dir, keys, settings).items() if s}
        body = json.loads((tune_dir / "autotune.json").read_text())
        grid_seconds, tune_seconds = _job_seconds(grid_dir), _job_seconds(tune_dir)
        off = [*steps_off(grid_dir, recipe), *steps_off(tune_dir, recipe)] if recipe else []
    best = max(grid, key=lambda p: statistics.median(grid[p]))
    winner = tuple(body["best"].get(k) for k in keys) if body["best"] else None
    mine = grid.get(winner, [])
    tied = bool(mine) and min(mine) <= max(grid[best]) and min(grid[best]) <= max(mine)
    figures = {
        "space": args.space, "workload": args.workload, "grid_points": len(grid),
        "grid_jobs": sum(len(s) for s in grid.values()),
        "grid_best": dict(zip(keys, best, strict=True)),
        "grid_best_examples_per_s": statistics.median(grid[best]),
        "grid_best_range": [min(grid[best]), max(grid[best])],
        "autotune_best": body["best"],
        "autotune_best_in_grid_examples_per_s": statistics.median(mine) if mine else None,
        "autotune_best_in_grid_range": [min(mine), max(mine)] if mine else None,
        "autotune_verdict": line(body),
        "autotune_jobs": body["jobs"], "grid_job_seconds": grid_seconds,
        "autotune_job_seconds": tune_seconds, "job_seconds_ratio": tune_seconds / grid_seconds,
        "grid_wall_s": grid_wall, "autotune_wall_s": tune_wall,
        "winner_within_grid_best_spread": winner == best or tied,
        "load_average": os.getloadavg(),
    }
    if recipe:
        figures.update({
            "global_batch_size": recipe,
            "grid_best_micro_x_accumulation": f"{best[keys.index('batch_size')]} x"
            f" {recipe // int(best[keys.index('batch_size')])}" if "batch_size" in keys else None,
            "autotune_best_micro_x_accumulation": (body.get("global_batch") or {}).get("best"),
            "every_optimizer_step_took_the_global_batch": not off,
            "steps_off": off,
        })
    for key, value in figures.items():
        print(f"{key:38} {value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    ok = (figures["winner_within_grid_best_spread"] and figures["job_seconds_ratio"] <= 1 / 3
          and not off)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
