"""Memory that means something on a CPU: a step holding 1 MiB per example reads a peak increase
over the phase's starting resident set that grows with the batch by the planted size."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FAST, run_harness

pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(),
                                reason="the peak-RSS mark resets on Linux only")

# glibc serves allocations below its mmap threshold from its heap, keeps freed chunks there and
# raises the threshold by itself (up to 32 MiB) after a mapped chunk is freed: at small batches
# the planted tensor, freed and allocated again each step, reads as up to twice its size. A fixed
# threshold (128 KiB) maps every large tensor and returns it on free, so the resident set follows
# the tensors. The job's environment sets it, as a user would; harness itself never does (it
# costs speed: docs/presets/speed.md#memory).
EXACT_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072"}
COMMON = (*(o for o in FAST if not o.startswith("batch_size=")), "mode=train",
          "profiler=[speed]", "trainer.limit_val_batches=0")


def increase_mib(tmp_path: Path, model: str, batch: int) -> float:
    cwd = tmp_path / f"{model.rsplit('.', 1)[-1]}-{batch}"
    cwd.mkdir()
    done = run_harness(cwd, *COMMON, f"model._target_={model}", f"batch_size={batch}",
                       env=EXACT_MALLOC, fast=False)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = done.result()["metrics"]
    assert metrics["train_peak_rss_bytes"] - metrics["train_rss_start_bytes"] == (
        metrics["train_peak_rss_increase_bytes"])
    assert metrics["train_peak_rss_bytes"] <= metrics["peak_rss_bytes"]  # run-wide unchanged
    return metrics["train_peak_rss_increase_bytes"] / 2**20


def test_a_planted_mib_per_example_reads_within_ten_percent(tmp_path):
    batches = (8, 64)
    planted = {b: increase_mib(tmp_path, "planted_memory.PlantedMemory", b) for b in batches}
    plain = {b: increase_mib(tmp_path, "harness.workload.model.TransformerModule", b)
             for b in batches}
    for batch in batches:  # the planted tensor, over what the same step needs without it
        assert abs(planted[batch] - plain[batch] - batch) < 0.1 * batch, (planted, plain)
    per_example = ((planted[64] - planted[8]) - (plain[64] - plain[8])) / (64 - 8)
    assert abs(per_example - 1.0) < 0.1, (planted, plain)
