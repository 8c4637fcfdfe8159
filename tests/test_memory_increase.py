"""Memory that means something on a CPU: a step holding 1 MiB per example reads a peak increase
over the phase's starting resident set of its planted size, whatever job of a sweep it is."""

from __future__ import annotations

import ctypes
import json
import mmap
from pathlib import Path

import pytest
import torch
from conftest import FAST, job_results, run_harness, sweep_dir

pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(),
                                reason="the peak-RSS mark resets on Linux only")

COMMON = (*(o for o in FAST if not o.startswith("batch_size=")), "mode=train",
          "profiler=[speed]", "trainer.limit_val_batches=0")


def increase_mib(tmp_path: Path, model: str, batch: int) -> float:
    cwd = tmp_path / f"{model.rsplit('.', 1)[-1]}-{batch}"
    cwd.mkdir()
    done = run_harness(cwd, *COMMON, f"model._target_={model}", f"batch_size={batch}", fast=False)
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


def _resident(mib: int) -> bytearray:
    """`mib` MiB, every page written (so resident), with no temporary copy."""
    block = bytearray(mib * 2**20)
    block[::mmap.PAGESIZE] = b"\1" * (len(block) // mmap.PAGESIZE)
    return block


def test_what_an_excluded_pass_leaves_held_is_out_of_the_phase_and_never_below_zero():
    # In process: a pass that leaves 16 MiB held (as libraries keep their caches) reads as none
    # of the phase's; a phase whose steps then free it and hold 4 MiB reads no increase, never
    # -12 MiB (a negative memory ratio broke a sweep's comparison.png).
    from harness import memory_peaks

    memory_peaks.reset()
    memory_peaks.phase_start("train")
    with memory_peaks.excluded():
        kept = _resident(16)
    held = _resident(8)
    figures = memory_peaks.phase_end("train")
    assert abs(figures["train_peak_rss_increase_bytes"] / 2**20 - 8) < 1, figures
    del held
    memory_peaks.phase_start("train")
    with memory_peaks.excluded():
        kept2 = _resident(16)
    del kept, kept2
    small = _resident(4)
    figures = memory_peaks.phase_end("train")
    assert 0 <= figures["train_peak_rss_increase_bytes"] < 2**20, figures
    del small


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


@pytest.mark.parametrize("warmed_up", [True, False])
def test_warm_up_is_exact_and_timed_steps_reuse_the_heap(warmed_up):
    # In process, glibc's own bookkeeping: a warm-up step's 16 MiB is mapped (exact, the figure);
    # a timed step's 24 MiB comes from the heap (fast) and counts only without a warm-up.
    import torch

    from harness import memory_peaks

    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("glibc >= 2.33 only")
    libc.mallinfo2.restype = _Mallinfo2
    cpu = torch.device("cpu")
    memory_peaks.reset(cpu)
    memory_peaks.phase_start("train", cpu)
    mapped = libc.mallinfo2().hblkhd
    warm_up = b"\2" * (16 * 2**20)
    assert libc.mallinfo2().hblkhd - mapped >= 16 * 2**20
    del warm_up
    memory_peaks.phase_timed("train", cpu, warmed_up)
    mapped = libc.mallinfo2().hblkhd
    timed = b"\3" * (24 * 2**20)
    assert libc.mallinfo2().hblkhd == mapped
    del timed
    increase = memory_peaks.phase_end("train", cpu)["train_peak_rss_increase_bytes"] / 2**20
    assert abs(increase - (16 if warmed_up else 24)) < 1, increase


# A model so small (2 tokens x 8 features, one block) that its own step takes 0.1 MiB: what a
# point reads is the plant's 1 MiB per example.
TINY = (*(o for o in COMMON if not o.startswith(("data.seq_len=", "data.dim="))),
        "data.seq_len=2", "data.dim=8", "model.depth=1", "model.num_heads=2",
        "model._target_=planted_memory.PlantedMemory")
# The job a process runs first also reads what torch and Lightning build once on first use and
# keep outside the step (1.4-1.7 MiB on the test machine; the library code it reads, file pages,
# and what the step's own calls keep, its run alone before the phase, are left out).
WITHIN_MIB = 2.0


def sweep_increases(tmp_path: Path, order: tuple[int, int]) -> dict[int, float]:
    """batch_size -> train_peak_rss_increase_bytes in MiB, from one sweep run in one process in
    the given order."""
    cwd = tmp_path / "-".join(map(str, order))
    cwd.mkdir()
    done = run_harness(cwd, "-m", *TINY, f"batch_size={order[0]},{order[1]}", fast=False)
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = job_results(sweep_dir(cwd))
    assert [jobs[n]["knobs"]["batch_size"] for n in sorted(jobs)] == list(order)
    return {r["knobs"]["batch_size"]: r["metrics"]["train_peak_rss_increase_bytes"] / 2**20
            for r in jobs.values()}


def test_a_setting_reads_what_it_holds_first_or_second_in_a_sweep(tmp_path):
    # With glibc's own thresholds batch 8 read 9.7-25.7 MiB as a sweep's first job and 16.2-24.2
    # as its second: the plant's freed pages stayed in the heap, split around the kept 64 KiB.
    reads = {order: sweep_increases(tmp_path, order) for order in ((8, 64), (64, 8))}
    for read in reads.values():
        for batch in (8, 64):
            assert abs(read[batch] - batch) <= WITHIN_MIB, reads


def test_a_job_after_a_larger_one_reads_no_more_than_as_the_first(tmp_path):
    # The built-in step at its own sizes, one block: the batch-16 job's timed steps leave holes in
    # glibc's heap under blocks that live on. Unfilled, the next job's warm-up steps wandered along
    # them and batch 8 read 14.0 MiB after batch 16 against 10.6 as the first job; filled, 8.0
    # (the first job also keeps torch's and Lightning's one-time state).
    own_sizes = (o for o in COMMON if not o.startswith(("data.seq_len=", "data.dim=", "data.train_")))
    done = run_harness(tmp_path, "-m", *own_sizes, "data.train_batches=8", "model.depth=1",
                       "batch_size=8,16,8", fast=False)
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = job_results(sweep_dir(tmp_path))
    read = [(jobs[n]["knobs"]["batch_size"], jobs[n]["metrics"]["train_peak_rss_increase_bytes"] / 2**20)
            for n in sorted(jobs)]
    assert [batch for batch, _ in read] == [8, 16, 8]
    assert read[2][1] <= read[0][1] + 1.0, read


def test_what_a_step_leaves_for_the_process_counts_in_no_job(tmp_path):
    # A planted 16 MiB cache built by a process's first step at a shape and kept, as oneDNN keeps
    # its primitives: without the step run alone before the phase, the first job read 24 MiB.
    done = run_harness(tmp_path, "-m", *TINY, "batch_size=8", "repeat=2", "+model.cache_mib=16", fast=False)
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = job_results(sweep_dir(tmp_path))
    read = [jobs[n]["metrics"]["train_peak_rss_increase_bytes"] / 2**20 for n in sorted(jobs)]
    assert len(read) == 2 and all(abs(mib - 8) <= WITHIN_MIB for mib in read), read


def test_a_module_stepping_its_own_optimizer_runs_no_step_alone_and_says_so(tmp_path):
    # Its optimizer.step() inside training_step counts as one of the trainer's optimizer steps:
    # a step run alone first would count too, so none runs, and speed.json says so.
    done = run_harness(tmp_path, "model._target_=accumulation_module.ManualOptimization", "mode=train",
                       "profiler=[speed]", "trainer.limit_val_batches=0", "profiler.speed.warmup_steps=2")
    assert done.returncode == 0, done.stderr[-2000:]
    speed = done.report("speed")
    train = speed["phases"]["train"]
    assert train["warmup_steps"] + train["measured_steps"] == 12  # FAST: data.train_batches=12
    assert speed["memory_note"] == ("train: what libraries keep after their first use counts in its"
                                    " memory (its step did not run alone first: manual optimization)")


def test_the_step_alone_leaves_the_run_as_its_own_steps_would(tmp_path):
    # Truth: 12 steps of 4 examples, each batch seen once, 12 rows grown, the Generator's first
    # 12 draws in order. Run on the batch itself, the step alone left it changed for the first
    # real step; with the buffer it grew put back after the state_dict, the run failed.
    record = tmp_path / "seen.json"
    done = run_harness(tmp_path, "model._target_=side_effects_module.SideEffects", f"+model.record={record}",
                       "mode=train", "profiler=[speed]", "trainer.limit_val_batches=0",
                       "profiler.speed.warmup_steps=2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.report("speed")["memory_note"] is None  # the step alone did run
    seen = json.loads(record.read_text())
    draws = torch.Generator().manual_seed(0)
    assert seen == {"examples": 48, "steps": 12, "batches_seen_twice": 0,
                    "draws": [torch.rand((), generator=draws).item() for _ in range(12)]}

