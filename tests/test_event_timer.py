"""GPU step times without a synchronise per step, on a fake CUDA boundary (tests/fake_cuda.py):
event pairs on the current stream, read back in order and only once complete, a bounded
pending list, the window cross-check, a side stream the events miss, and the speed preset
driving it all through its Lightning hooks. tests/test_cuda.py holds the real-device cases."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fake_cuda import FakeClock, FakeCuda

from harness.profilers.event_timer import MAX_PENDING, EventPhaseTimer
from harness.profilers.speed import SpeedPreset
from harness.profilers.step_timer import step_figures


def make(sync: str = "events", warmup: int = 2, flush_every: int = 16, max_lead: float = 1.0
         ) -> tuple[EventPhaseTimer, FakeCuda]:
    clock = FakeClock()
    cuda = FakeCuda(clock, max_lead=max_lead)
    return EventPhaseTimer("train", warmup, cuda, sync, flush_every=flush_every, clock=clock), cuda


def begin(timer: EventPhaseTimer) -> None:
    """What the speed preset does when measured steps start: open the window, then restart."""
    timer.open_window()
    timer.restart(timer.clock())


def loop(timer: EventPhaseTimer, cuda: FakeCuda, steps: int, fetch_s: float, dispatch_s: float,
         kernels_s: float, side_s: float = 0.0) -> None:
    """A training loop as the speed preset sees it: fetch the batch on the host, dispatch the
    step's kernels; the window opens at the end of warm-up and closes at the phase's end."""
    clock = cuda.clock
    timer.restart(clock())
    for _ in range(steps):
        clock.advance(fetch_s)
        timer.batch_received(clock(), 8)
        clock.advance(dispatch_s)
        cuda.launch(kernels_s)
        if side_s:
            cuda.launch(side_s, cuda.side)  # work on a stream the events do not wait for
        record = timer.step_done(clock())
        if record.index + 1 == timer.warmup_steps:
            begin(timer)
    timer.finish()


def test_gpu_bound_steps_are_the_kernels_not_the_dispatch():
    timer, cuda = make()
    loop(timer, cuda, 50, fetch_s=0.001, dispatch_s=0.001, kernels_s=0.010)
    figures = timer.summary(1)
    assert figures["median_step_s"] == pytest.approx(0.010)
    assert figures["measured_steps"] == 48
    # the fetch hides behind queued kernels: only the first measured step, after the window's
    # synchronise emptied the queue, waits for its batch
    assert figures["between_steps_share"] < 0.005
    # the host's own view says 2 ms a step while it runs ahead: wrong for a GPU-bound run
    assert min(s.step_s for s in timer.host_steps[2:20]) == pytest.approx(0.002)
    assert cuda.syncs == 2  # the window's two ends, nothing per step
    assert cuda.event_syncs == 0  # and no wait on an event
    assert figures["events_over_window"] == pytest.approx(1.0, rel=1e-6)
    assert figures["window_seconds_per_iteration"] == pytest.approx(0.010, rel=0.01)
    assert figures["clocks"]["median_step_s"] == "events"
    assert figures["clocks"]["window_seconds_per_iteration"] == "window"


def test_an_exposed_fetch_is_the_gpu_waiting_for_the_batch():
    timer, cuda = make()
    loop(timer, cuda, 30, fetch_s=0.005, dispatch_s=0.0005, kernels_s=0.002)
    figures = timer.summary(1)
    assert figures["median_step_s"] == pytest.approx(0.0055)  # the host sets the pace
    # the GPU waits 3 ms of the 5 ms fetch: the other 2 ms overlap the previous step's kernels
    assert figures["median_between_s"] == pytest.approx(0.003)
    assert figures["between_steps_share"] == pytest.approx(0.003 / 0.0055, rel=0.02)
    host = step_figures(timer.host_steps, 1)
    assert host["between_steps_share"] == pytest.approx(0.005 / 0.0055, rel=0.01)
    assert figures["events_over_window"] == pytest.approx(1.0, rel=1e-6)


def test_events_are_read_in_order_only_once_complete_and_stay_bounded():
    timer, cuda = make(flush_every=8, max_lead=0.5)
    clock = cuda.clock
    timer.restart(clock())
    most_pending = 0
    for _ in range(100):
        timer.batch_received(clock(), 8)
        cuda.launch(0.010)
        if timer.step_done(clock()).index + 1 == timer.warmup_steps:
            begin(timer)
        most_pending = max(most_pending, len(timer._pending))
        # a read-back never waited: it read only what the device had passed
        assert cuda.syncs == (1 if timer.recorded >= 2 else 0) and cuda.event_syncs == 0
        assert [s.index for s in timer.steps] == list(range(len(timer.steps)))
    assert most_pending <= 8 + int(0.5 / 0.010) + 1  # flush_every + the queue's depth
    assert len(timer.steps) >= 40  # read back along the way, not only at the end
    timer.finish()
    assert [s.index for s in timer.steps] == list(range(100))
    assert [s.warmup for s in timer.steps[:3]] == [True, True, False]
    assert all(s.step_s == pytest.approx(0.010) for s in timer.steps[3:])


def test_a_device_far_behind_is_waited_for_one_old_event_at_a_time():
    timer, cuda = make(flush_every=4, max_lead=1e9)  # an unbounded launch queue
    clock = cuda.clock
    timer.restart(clock())
    for _ in range(MAX_PENDING + 50):
        timer.batch_received(clock(), 8)
        cuda.launch(0.010)
        timer.step_done(clock())
        assert len(timer._pending) <= MAX_PENDING
    assert cuda.syncs == 0 and cuda.event_syncs > 0  # one event waited for, never the device
    timer.finish()
    assert len(timer.steps) == MAX_PENDING + 50


def test_work_on_another_stream_shows_in_the_window_cross_check():
    timer, cuda = make()
    loop(timer, cuda, 40, fetch_s=0.0, dispatch_s=0.0005, kernels_s=0.002, side_s=0.008)
    figures = timer.summary(1)
    assert figures["events_over_window"] < 0.5
    assert figures["events_miss_work"] is True
    # the headline falls back to the window, and says so
    assert figures["seconds_per_iteration"] == pytest.approx(0.008, rel=0.05)
    assert figures["examples_per_second"] == pytest.approx(8 / 0.008, rel=0.05)
    assert figures["clocks"]["seconds_per_iteration"] == "window"
    assert figures["clocks"]["median_step_s"] == "events"


def test_validation_inside_training_is_left_out_of_the_window():
    timer, cuda = make()
    clock = cuda.clock
    timer.restart(clock())
    for n in range(40):
        timer.batch_received(clock(), 8)
        cuda.launch(0.010)
        if timer.step_done(clock()).index + 1 == timer.warmup_steps:
            begin(timer)
        if n == 19:  # validation: 0.5 s on the device, outside every training step
            timer.close_window()
            cuda.launch(0.5)
            cuda.synchronize()
            begin(timer)
    timer.finish()
    figures = timer.summary(1)
    assert figures["window_s"] == pytest.approx(38 * 0.010, rel=1e-6)
    assert figures["window_segments"] == 2
    assert figures["events_over_window"] == pytest.approx(1.0, rel=1e-6)
    assert timer.syncs == 4  # two segments, one synchronise at each end


def test_sync_window_times_only_the_window():
    timer, cuda = make("window")
    loop(timer, cuda, 30, fetch_s=0.0, dispatch_s=0.001, kernels_s=0.004)
    figures = timer.summary(1)
    assert cuda.events == []  # no event recorded at all
    assert figures["seconds_per_iteration"] == pytest.approx(0.004, rel=0.02)
    assert figures["examples_per_second"] == pytest.approx(8 / 0.004, rel=0.02)
    assert figures["median_step_s"] is None and figures["p90_step_s"] is None
    assert figures["events_over_window"] is None
    assert figures["clocks"]["seconds_per_iteration"] == "window"
    assert figures["clocks"]["steps_csv"] == "dispatch"


class _Trainer(SimpleNamespace):
    def __init__(self, device: object) -> None:
        super().__init__(world_size=1, global_rank=0, global_step=0, sanity_checking=False,
                         accumulate_grad_batches=1,
                         loggers=[], strategy=SimpleNamespace(root_device=device))


@pytest.mark.parametrize("sync", ["events", "step", "window"])
def test_the_speed_preset_on_a_fake_gpu_synchronises_per_window_not_per_step(sync, monkeypatch,
                                                                              tmp_path):
    """The speed preset's own hooks on a CUDA device faked at the boundary: 2 epochs of 30
    steps with a validation run in each; the clock in force, its synchronises, its figures."""
    from harness.profilers import speed, step_timer

    clock = FakeClock()
    cuda = FakeCuda(clock, max_lead=0.2)
    monkeypatch.setattr(speed.time, "perf_counter", clock)
    monkeypatch.setattr(step_timer.torch.cuda, "synchronize", cuda.synchronize)
    monkeypatch.setattr(speed, "Nvml", lambda uuids=None: SimpleNamespace(unavailable="no NVML here", gpus=[],
                                                               close=lambda: None))
    # torch's CUDA allocator figures do not exist here: memory_peaks is tested on its own
    monkeypatch.setattr(speed, "memory_peaks", SimpleNamespace(
        phase_start=lambda *args: None, phase_timed=lambda *args, **kwargs: None,
        phase_end=lambda *args: {}))
    # so is the step run alone before a phase's memory counts: it needs a real module
    monkeypatch.setattr(speed.SpeedPreset, "_warm_libraries", lambda *args: None)
    preset = SpeedPreset(warmup_steps=3, sync=sync, log_rates=False)
    preset.cuda = cuda
    trainer = _Trainer(SimpleNamespace(type="cuda", index=0))
    preset.setup(trainer, None, "fit")
    batch = {"x": step_timer.torch.zeros(8, 2)}
    preset.on_train_start(trainer, None)
    for _ in range(2):
        preset.on_train_epoch_start(trainer, None)
        for i in range(30):
            clock.advance(0.001)
            preset.on_train_batch_start(trainer, None, batch, i)
            cuda.launch(0.010)
            preset.on_train_batch_end(trainer, None, None, batch, i)
        preset.on_validation_epoch_start(trainer, None)
        for i in range(4):
            preset.on_validation_batch_start(trainer, None, batch, i)
            cuda.launch(0.004)
            preset.on_validation_batch_end(trainer, None, None, batch, i)
        preset.on_validation_end(trainer, None)
        preset.on_train_epoch_end(trainer, None)
    preset.on_train_end(trainer, None)
    train = preset.phase_summaries()["train"]
    assert train["measured_steps"] == 57
    # a synchronise per step drains the queue, so the host's 1 ms fetch no longer hides
    # behind the device's 10 ms: sync=step times a step the run does not take unobserved
    step_s = 0.011 if sync == "step" else 0.010
    assert train["window_seconds_per_iteration"] == pytest.approx(step_s, rel=0.02)
    if sync == "step":
        assert cuda.syncs > 2 * 60  # both ends of every step
        assert train["median_step_s"] == pytest.approx(step_s, rel=0.02)
    else:
        # per measured stretch: warm-up's end, after each validation, each epoch's start, and
        # the closes; never per step
        assert cuda.syncs <= 16
        assert train["seconds_per_iteration"] == pytest.approx(0.010, rel=0.02)
    if sync == "events":
        assert train["median_step_s"] == pytest.approx(0.010, rel=1e-6)
        assert train["events_over_window"] == pytest.approx(1.0, abs=0.02)
    report = preset.write_reports(tmp_path)
    assert report.metrics["train_window_seconds_per_iteration"] == pytest.approx(step_s, rel=0.02)
    assert "train_events_over_window" in report.metrics
    assert report.clocks["train_seconds_per_iteration"] == sync
    written = (tmp_path / "speed.json").read_text()
    assert f'"sync": "{sync}"' in written and '"window":' in written
