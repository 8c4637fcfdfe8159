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


def test_an_excluded_pass_costs_no_reserved_peak():
    """Real allocator: 256 MiB allocated and freed inside memory_peaks.excluded stays out of
    max_memory_reserved afterwards (the cache is emptied before the peak reset, #23)."""
    from harness import memory_peaks

    device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.empty_cache()
    memory_peaks.reset(device)
    with memory_peaks.excluded(device):
        block = torch.empty(256 * 2**20, dtype=torch.uint8, device=device)
        del block
    keep = torch.ones(1024, device=device)
    figures = memory_peaks.read(device)
    assert figures["peak_device_reserved_bytes"] < 128 * 2**20, figures
    assert keep.sum().item() == 1024


def test_nvml_finds_every_cuda_device_by_its_uuid():
    """Real driver: each cuda:i is found in NVML by torch's UUID (also under MIG, where the
    process sees a slice), and samples give memory figures (#23)."""
    pytest.importorskip("pynvml")
    from harness.profilers.nvml import Nvml, _bare, torch_uuids

    uuids = torch_uuids()
    assert uuids and len(uuids) == torch.cuda.device_count()
    nvml = Nvml(uuids)
    assert nvml.unavailable is None, nvml.unavailable
    assert [gpu.index for gpu in nvml.gpus] == list(range(len(uuids)))
    for gpu, uuid in zip(nvml.gpus, uuids, strict=True):
        assert _bare(gpu.uuid) == _bare(uuid)  # NVML writes "GPU-<uuid>", torch the bare one
        assert nvml.sample(gpu)["memory_used_bytes"] > 0
    nvml.close()


def test_the_system_preset_reports_the_runs_gpu_with_its_energy(harness):
    pytest.importorskip("pynvml")
    done = harness("trainer.accelerator=gpu", "trainer.devices=1", "profiler=[system]",
                   "profiler.system.interval_s=0.2")
    assert done.returncode == 0, done.stderr[-3000:]
    system = done.report("system")
    assert len(system["gpus"]) == 1 and system["gpu_note"] is None
    gpu = system["gpus"][0]
    assert gpu["index"] == 0 and gpu["power_w"]["mean"] is not None
    assert gpu["energy_wh"] is not None and gpu["energy_wh"] > 0


def test_the_snapshot_is_written_and_the_run_measured(harness, tmp_path):
    """The snapshot window ends where the speed preset's warm-up ends (the defaults): the
    dump runs with the clock paused; the run keeps every measured step (#23)."""
    done = harness("trainer.accelerator=gpu", "mode=train", "profiler=[speed,snapshot]")
    assert done.returncode == 0, done.stderr[-3000:]
    snapshot = done.report("snapshot")
    assert snapshot["files"] and snapshot["skipped"] is None
    assert done.report("speed")["phases"]["train"]["examples_per_second"] > 0


def test_the_mfu_has_a_peak_and_is_a_share(harness):
    done = harness("trainer.accelerator=gpu", "mode=train", "precision=bf16-mixed",
                   "profiler=[speed,diagnose]")
    assert done.returncode == 0, done.stderr[-3000:]
    diagnosis = done.report("diagnosis")
    assert diagnosis["peak_source"] and 0 < diagnosis["train_mfu"] < 1, diagnosis


def test_the_optimizer_state_comes_back_without_a_second_copy():
    """SGD's momentum of a 256 MiB parameter (its step works in place: the pass's peak is
    the gradient): the restore copies into the momentum buffer after the gradients are
    freed, so the pass adds less than the gradient and half a buffer to what was held (#23;
    torch's load_state_dict built a second buffer while the gradients were still held)."""
    from types import SimpleNamespace

    from lightning.pytorch.plugins.precision import Precision

    from harness.profilers.diagnose.speed_of_light import model_alone

    device = torch.device("cuda", torch.cuda.current_device())
    module = torch.nn.Linear(8192, 8192, bias=False, device=device)  # 256 MiB of fp32
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-4, momentum=0.9)
    x = torch.randn(16, 8192, device=device)

    def step():
        module(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # the momentum exists, as after training
    buffer = optimizer.state[module.weight]["momentum_buffer"]
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=device, model=module),
                              optimizers=[optimizer], precision_plugin=Precision())
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    found = model_alone(trainer, module, step, x, 2, 0, training=True)
    assert found.steps == 2, found.note
    assert optimizer.state[module.weight]["momentum_buffer"] is buffer
    size = module.weight.numel() * 4
    assert torch.cuda.max_memory_allocated(device) - held < size * 1.5
