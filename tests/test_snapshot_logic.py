"""The snapshot callback's CUDA calls, with torch.cuda.memory's recorder replaced by a log."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from harness.errors import HarnessError
from harness.profilers.snapshot import SnapshotPreset


@pytest.fixture
def cuda_log(monkeypatch):
    calls: list[tuple] = []

    def record(enabled="all", max_entries=0, **_):
        calls.append(("stop",) if enabled is None else ("start", max_entries))

    def dump(path):
        # Snapshots are dumped under a temporary name (reports.files.atomic_path) and renamed
        # when complete: the log keeps the name the file ends up with.
        name = path.rsplit("/", 1)[-1]
        final = re.fullmatch(r"\.(.+)\.[^.]+\.tmp", name)
        calls.append(("dump", final.group(1) if final else name))
        open(path, "wb").close()

    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", record)
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", dump)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    return calls


def _trainer(batches=12, rank=1):
    return SimpleNamespace(
        global_rank=rank, is_global_zero=rank == 0, num_training_batches=batches, max_epochs=1,
        max_steps=-1, accumulate_grad_batches=1,
        strategy=SimpleNamespace(root_device=torch.device("cuda", 0)),
    )


def _train(callback, trainer, steps, fail_at=None):
    callback.setup(trainer, None, "fit")
    callback.on_train_start(trainer, None)
    for i in range(steps):
        callback.on_train_batch_start(trainer, None, None, i)
        if i == fail_at:
            callback.on_exception(trainer, None, torch.cuda.OutOfMemoryError("CUDA out of memory."))
            return
        callback.on_train_batch_end(trainer, None, None, None, i)
    callback.on_train_end(trainer, None)


def test_window_snapshot_per_rank_and_history_kept_for_oom(cuda_log, tmp_path):
    callback = SnapshotPreset(warmup=2, steps=3, max_entries=50, output_dir=str(tmp_path))
    _train(callback, _trainer(), steps=8)
    assert cuda_log == [
        ("start", 50),  # from the start of training, for an early OOM
        ("stop",), ("start", 50),  # restarted at step 2: the snapshot holds the window only
        ("dump", "snapshot-rank1.pickle"),  # after step 4
        ("stop",), ("start", 50),  # recording goes on for a later OOM
        ("stop",),  # end of training
    ]
    assert callback.files == ["snapshot-rank1.pickle"] and callback.skipped is None
    assert (tmp_path / "snapshot-rank1.pickle").exists()


def test_oom_at_the_first_step_is_dumped(cuda_log, tmp_path):
    callback = SnapshotPreset(warmup=2, steps=3, output_dir=str(tmp_path))
    _train(callback, _trainer(rank=0), steps=8, fail_at=0)
    assert ("dump", "snapshot-oom-rank0.pickle") in cuda_log
    assert cuda_log[-1] == ("stop",) and not callback.recording


def test_without_dump_on_oom_only_the_window_is_recorded(cuda_log, tmp_path):
    callback = SnapshotPreset(warmup=0, steps=2, dump_on_oom=False, output_dir=str(tmp_path))
    _train(callback, _trainer(), steps=5)
    assert cuda_log == [("start", 100_000), ("dump", "snapshot-rank1.pickle"), ("stop",)]


def test_window_longer_than_the_run_is_refused(cuda_log, tmp_path):
    callback = SnapshotPreset(warmup=10, steps=5, output_dir=str(tmp_path))
    with pytest.raises(HarnessError, match="profiler.snapshot.*15 training steps.*12 training"):
        _train(callback, _trainer(), steps=1)
    assert cuda_log == []


@pytest.mark.parametrize("snapshot_first", [True, False], ids=["snapshot-first", "speed-first"])
def test_the_window_dump_lands_in_no_timed_step(cuda_log, tmp_path, monkeypatch, snapshot_first):
    """Planted: the dump costs SLOW_S on the speed preset's clock. With the defaults' shape
    (the snapshot window ends where the speed preset's warm-up ends) the dump came right
    before the first measured step's clock started, or inside it when the snapshot's hook ran
    first. Whichever order Lightning calls the two presets' hooks in, no step and no batch
    wait holds it, and the measured steps are all there (#23)."""
    import time

    from harness.profilers import step_timer
    from harness.profilers.preset import Presets
    from harness.profilers.speed import SpeedPreset

    slow_s = 1000.0
    spent = {"s": 0.0}
    real = time.perf_counter
    monkeypatch.setattr(step_timer.time, "perf_counter", lambda: real() + spent["s"])
    dumped = torch.cuda.memory._dump_snapshot

    def slow_dump(path):
        spent["s"] += slow_s
        dumped(path)

    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", slow_dump)
    # the step run alone before a phase's memory counts needs a real module
    monkeypatch.setattr(SpeedPreset, "_warm_libraries", lambda *args: None)
    snapshot = SnapshotPreset(warmup=2, steps=3, output_dir=str(tmp_path))
    speed = SpeedPreset(warmup_steps=5, log_rates=False)
    Presets.of({"speed": speed, "snapshot": snapshot})
    on_gpu = _trainer(batches=12, rank=0)  # the snapshot preset needs a CUDA device
    on_cpu = SimpleNamespace(world_size=1, global_rank=0, global_step=0, sanity_checking=False,
                             loggers=[], strategy=SimpleNamespace(root_device=torch.device("cpu")))
    hooks = [(snapshot, on_gpu), (speed, on_cpu)]
    if not snapshot_first:
        hooks.reverse()
    snapshot.setup(on_gpu, None, "fit")
    speed.setup(on_cpu, None, "fit")
    snapshot.on_train_start(on_gpu, None)
    speed.on_train_epoch_start(on_cpu, None)
    for i in range(12):
        for preset, trainer in hooks:
            preset.on_train_batch_start(trainer, None, {"x": [0] * 4}, i)
        for preset, trainer in hooks:
            preset.on_train_batch_end(trainer, None, None, None, i)
    speed.on_train_epoch_end(on_cpu, None)
    snapshot.on_train_end(on_gpu, None)
    assert ("dump", "snapshot-rank0.pickle") in cuda_log and spent["s"] == slow_s
    steps = speed.timers["train"].steps
    assert len(steps) == 12 and len([s for s in steps if s.index >= 5]) == 7
    assert max(s.step_s for s in steps) < slow_s and max(s.between_s for s in steps) < slow_s
