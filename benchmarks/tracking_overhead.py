"""What MLflow tracking costs a timed training step.

1. Per call: the time `logger.log_metrics({"training_rate": x}, step)` takes on
   the training loop's thread, for harness's buffered logger and for Lightning's
   stock MLFlowLogger (one store write per call), interleaved call by call into
   the same local sqlite store. This time lands inside the next step the speed
   report measures.
2. End to end (--cli-runs N): the harness CLI's median training step with
   logger=none and logger=mlflow, alternated run by run.

    python benchmarks/tracking_overhead.py [--calls 400] [--cli-runs 0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI_WORKLOAD = ("data.train_batches=40", "data.val_batches=2", "data.seq_len=16", "data.dim=32",
                "batch_size=4", "mode=train", "trainer.enable_progress_bar=false")


def per_call(calls: int, workdir: Path) -> dict[str, float]:
    os.chdir(workdir)
    from lightning.pytorch.loggers import MLFlowLogger

    from harness.tracking.mlflow_logger import HarnessMLFlowLogger

    uri = f"sqlite:///{workdir / 'bench.db'}"
    ours = HarnessMLFlowLogger(tracking_uri=uri, experiment_name="bench")
    stock = MLFlowLogger(tracking_uri=uri, experiment_name="bench")
    _ = stock.experiment  # create its run before timing
    timings: dict[str, list[float]] = {"harness (buffered)": [], "lightning stock (sync)": []}
    for step in range(calls):
        for name, logger in (("harness (buffered)", ours), ("lightning stock (sync)", stock)):
            start = time.perf_counter()
            logger.log_metrics({"training_rate": 1.0 + step}, step=step)
            timings[name].append(time.perf_counter() - start)
    ours.flush()
    got = len(ours.experiment.get_metric_history(ours.run_id, "training_rate"))
    assert got == calls, f"buffered logger stored {got} of {calls} points"
    return {
        f"{name} {stat} ms": round(fn(values) * 1e3, 4)
        for name, values in timings.items()
        for stat, fn in (("median", statistics.median), ("max", max),
                         ("mean", statistics.fmean))
    }


def cli(runs: int, workdir: Path) -> dict[str, object]:
    harness = Path(sys.executable).parent / "harness"
    medians: dict[str, list[float]] = {"logger=none": [], "logger=mlflow": []}
    for _ in range(runs):
        for choice in medians:
            done = subprocess.run([str(harness), *CLI_WORKLOAD, choice], cwd=workdir,
                                  capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-2000:]
            newest = max(workdir.glob("outputs/*/*/result.json"), key=lambda p: p.stat().st_mtime)
            medians[choice].append(json.loads(newest.read_text())["metrics"]["train_median_step_s"])
            time.sleep(1.1)  # distinct output directories (one per second)
    none, tracked = (statistics.median(v) for v in medians.values())
    return {"median train step s": medians, "ratio mlflow/none": round(tracked / none, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--cli-runs", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = {"per log_metrics call": per_call(args.calls, Path(tmp))}
        if args.cli_runs:
            report["harness CLI"] = cli(args.cli_runs, Path(tmp))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
