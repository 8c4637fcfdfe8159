"""The CUDA paths for real: skipped where no CUDA device exists."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_speed_on_cuda_synchronises_and_records_device_memory(harness):
    done = harness("trainer.accelerator=gpu", "precision=fp16", "profiler.speed.warmup_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["device"]["accelerator"] == "cuda"
    assert result["precision_used"] == "16-mixed"  # fp16 autocast is real on CUDA
    assert result["metrics"]["peak_device_allocated_bytes"] > 0
    speed = done.report("speed")
    assert "synchronize" in speed["clock"]
    assert speed["phases"]["train"]["examples_per_second"] > 0


def test_events_time_every_step_without_a_synchronise_and_agree_with_the_window(harness):
    done = harness("trainer.accelerator=gpu", "mode=train", "profiler=[speed]",
                   "data.train_batches=40", "profiler.speed.warmup_steps=5")
    assert done.returncode == 0, done.stderr[-3000:]
    speed = done.report("speed")
    assert speed["sync"] == "events" and speed["sync_note"] is None
    train = speed["phases"]["train"]
    assert train["clocks"]["median_step_s"] == "events"
    # one synchronise at each end of each stretch of the measured window, never per step
    assert train["synchronises"] <= 2 * (train["window_segments"] + 2)
    assert 0.9 < train["events_over_window"] <= 1.05
    assert train["window_seconds_per_iteration"] > 0
    result = done.result()
    metrics = result["metrics"]
    assert metrics["train_events_over_window"] == train["events_over_window"]
    assert metrics["train_window_seconds_per_iteration"] > 0
    assert result["clocks"]["train_seconds_per_iteration"] in ("events", "window")
    # torch's allocator figures, per phase
    assert metrics["train_peak_device_allocated_increase_bytes"] > 0
    assert metrics["train_peak_device_allocated_bytes"] >= (
        metrics["train_device_allocated_start_bytes"])
    assert "train_gpu_other_sm_share" in metrics


@pytest.mark.parametrize("sync", ["step", "window"])
def test_the_other_clocks_stay_selectable(harness, sync):
    done = harness("trainer.accelerator=gpu", "mode=train", "profiler=[speed]",
                   f"profiler.speed.sync={sync}")
    assert done.returncode == 0, done.stderr[-3000:]
    train = done.report("speed")["phases"]["train"]
    assert train["window_seconds_per_iteration"] > 0
    if sync == "step":
        assert train["clocks"]["median_step_s"] == "step" and train["median_step_s"] > 0
    else:
        assert train["clocks"]["seconds_per_iteration"] == "window"
        assert train["median_step_s"] is None and train["seconds_per_iteration"] > 0


def test_a_side_stream_the_events_miss_shows_in_the_cross_check():
    """Real events on the device: work queued on another stream is outside the current
    stream's events, inside the window's synchronises."""
    from harness.profilers.event_timer import EventPhaseTimer

    timer = EventPhaseTimer("train", 0, torch.cuda)
    side = torch.cuda.Stream()
    x = torch.randn(2048, 2048, device="cuda")
    timer.open_window()
    timer.restart(0.0)
    for _ in range(10):
        timer.batch_received(0.0, 1)
        y = x @ x
        with torch.cuda.stream(side):
            for _ in range(20):
                z = x @ x
        timer.step_done(0.0)
    timer.finish()
    figures = timer.summary(1)
    del y, z
    assert figures["events_over_window"] < 0.95 and figures["events_miss_work"] is True
    assert figures["clocks"]["seconds_per_iteration"] == "window"
