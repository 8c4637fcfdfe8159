"""Memory that means something on a CPU: a step holding 1 MiB per example reads a peak increase
over the phase's starting resident set that grows with the batch by the planted size, whatever
job of a sweep it is."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest
from conftest import FAST, job_results, run_harness, sweep_dir

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


def test_file_pages_first_read_in_a_phase_are_not_its_increase(tmp_path):
    # In process: a phase that reads 64 MiB of a file for the first time (as a process's first
    # job runs library code for the first time) and holds 16 MiB of its own reads the 16.
    from harness import memory_peaks

    pages = tmp_path / "pages"
    pages.write_bytes(b"\1" * (64 * 2**20))
    memory_peaks.reset()
    memory_peaks.phase_start("train")
    with pages.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert sum(mapped[i] for i in range(0, len(mapped), mmap.PAGESIZE)) == 64 * 2**20 // mmap.PAGESIZE
        held = b"\2" * (16 * 2**20)
        del held
        figures = memory_peaks.phase_end("train")
    increase = figures["train_peak_rss_increase_bytes"] / 2**20
    assert abs(increase - 16) < 1, figures  # not 80: the file's pages are the page cache's
    assert figures["train_peak_rss_bytes"] - figures["train_rss_start_bytes"] == (
        figures["train_peak_rss_increase_bytes"])


# A model so small (2 tokens x 8 features, one block) that its own step grows by 0.1 MiB from
# batch 8 to 64: the difference between the two points is the plant's 56 MiB.
TINY = (*(o for o in COMMON if not o.startswith(("data.seq_len=", "data.dim="))),
        "data.seq_len=2", "data.dim=8", "model.depth=1", "model.num_heads=2",
        "model._target_=planted_memory.PlantedMemory")
# The job a process runs first still keeps what torch and Lightning build once on first use
# (caches, per-thread state: 1.1-1.6 MiB read on the test machine; the library code the first
# job reads, 15 MiB of file pages, is left out of the increase). 3 MiB is 5% of the planted
# difference and a fifth of what the order changed before that.
ORDER_MIB = 3.0


def sweep_increases(tmp_path: Path, order: tuple[int, int]) -> dict[int, float]:
    """batch_size -> train_peak_rss_increase_bytes in MiB, from one sweep run in one process in
    the given order."""
    cwd = tmp_path / "-".join(map(str, order))
    cwd.mkdir()
    done = run_harness(cwd, "-m", *TINY, f"batch_size={order[0]},{order[1]}", env=EXACT_MALLOC,
                       fast=False)
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = job_results(sweep_dir(cwd))
    assert [jobs[n]["knobs"]["batch_size"] for n in sorted(jobs)] == list(order)
    return {r["knobs"]["batch_size"]: r["metrics"]["train_peak_rss_increase_bytes"] / 2**20
            for r in jobs.values()}


def test_a_setting_reads_the_same_first_or_second_in_a_sweep(tmp_path):
    forward, reverse = sweep_increases(tmp_path, (8, 64)), sweep_increases(tmp_path, (64, 8))
    for read in (forward, reverse):  # the planted 56 MiB between the points, in either order
        assert abs(read[64] - read[8] - 56) < ORDER_MIB, (forward, reverse)
    for batch in (8, 64):  # and each point the same, first or second
        assert abs(forward[batch] - reverse[batch]) < ORDER_MIB, (forward, reverse)
