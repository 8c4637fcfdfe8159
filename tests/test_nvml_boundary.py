"""The system report at the NVML boundary: a fake `pynvml` module stands in for the driver."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from fake_nvml import three_gpus

from harness.profilers.nvml import Nvml, parse_visible
from harness.profilers.system import SystemSampler

UUIDS = ["GPU-aaaa1111-0000", "GPU-bbbb2222-0000", "GPU-bbbc3333-0000"]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [0, 1, 2]),  # unset: every GPU
        ("2,0", [2, 0]),  # CUDA's order, not NVML's
        ("1, 7, 2", [1]),  # CUDA ignores everything after an invalid index
        ("", []),  # empty: no GPU
        ("GPU-bbbc3333-0000", [2]),  # full UUID
        ("GPU-aaaa", [0]),  # unique prefix
        ("bbbb2222", [1]),  # without the GPU- prefix
        ("GPU-bbb,0", []),  # ambiguous prefix stops the list
        ("0,0", [0]),  # a repeated device stops the list
    ],
)
def test_cuda_visible_devices_maps_to_nvml_indices(visible, expected):
    assert parse_visible(visible, 3, UUIDS) == expected


def test_indices_pick_the_gpus_in_cuda_order(monkeypatch):
    fake = three_gpus()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,1")
    nvml = Nvml()
    assert nvml.unavailable is None
    assert [(g.index, g.nvml_index, g.uuid) for g in nvml.gpus] == [
        (0, 2, "GPU-bbbc3333-0000"),
        (1, 1, "GPU-bbbb2222-0000"),
    ]
    assert [g.has_energy_counter for g in nvml.gpus] == [True, False]
    first = nvml.sample(nvml.gpus[0])
    assert first == {
        "utilization_pct": 90.0,
        "memory_used_bytes": float(3 * 2**30),
        "power_w": 300.0,
        "energy_counter_j": pytest.approx(7002.0),
    }
    assert nvml.sample(nvml.gpus[1])["energy_counter_j"] is None
    nvml.close()
    assert fake.shut_down


def test_uuid_entries_are_resolved(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", three_gpus())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb2222,aaaa1111-0000")
    nvml = Nvml()
    assert [(g.index, g.nvml_index) for g in nvml.gpus] == [(0, 1), (1, 0)]


def test_energy_from_counter_where_present_and_integrated_power_otherwise(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", three_gpus())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    sampler = SystemSampler(interval_s=0.02)
    sampler.start("fit")
    time.sleep(0.15)
    sampler.stop()
    samples = sampler.samples
    assert len(samples) >= 3
    # GPU 0 has the counter: +1 J per read, so energy = reads - 1 joules.
    energy0, method0 = sampler.gpu_energy(0)
    assert method0 == "NVML total-energy counter"
    assert energy0 == pytest.approx(len(samples) - 1)
    # GPU 1 has none: 200 W constant, integrated over the sampled span.
    energy1, method1 = sampler.gpu_energy(1)
    assert method1 == "power integrated over samples"
    span = samples[-1]["t_s"] - samples[0]["t_s"]
    assert energy1 == pytest.approx(200.0 * span)
    assert sampler.series_stats("gpu1_utilization_pct") == {"mean": 50.0, "max": 50.0}
    assert all(s["process_cpu_pct"] is not None and s["rss_bytes"] > 0 for s in samples)


def test_missing_nvml_says_so_and_cpu_sampling_goes_on(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    sampler = SystemSampler(interval_s=0.02)
    assert "not installed" in sampler.gpu_note
    assert sampler.gpus == []
    sampler.start("fit")
    time.sleep(0.08)
    sampler.close()
    assert sampler.samples and not any(k.startswith("gpu") for k in sampler.samples[0])
    assert sampler.series_stats("rss_bytes")["max"] > 0


def test_driver_missing_is_a_note_not_an_error(monkeypatch):
    fake = three_gpus()

    def no_driver() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    fake.nvmlInit = no_driver
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nvml = Nvml()
    assert nvml.gpus == [] and "Shared Library Not Found" in nvml.unavailable


def test_sampler_thread_stops_and_restarts_per_stage(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    sampler = SystemSampler(interval_s=0.01)
    for stage in ("fit", "predict"):
        sampler.start(stage)
        time.sleep(0.05)
        sampler.stop()
        assert not sampler.running
    assert not [t for t in threading.enumerate() if t.name == "harness-system-sampler"]
    assert {s["segment"] for s in sampler.samples} == {1, 2}
    assert {s["stage"] for s in sampler.samples} == {"fit", "predict"}
    assert 0.09 < sampler.active_s < 5


def test_the_speed_preset_flags_a_phase_another_process_shares_the_gpu_with(monkeypatch,
                                                                           tmp_path):
    """On a CUDA device faked at its boundaries (tests/fake_cuda.py, a fake pynvml), another
    process using 35% of the GPU's SM time makes the phase contended; NVML is read at the
    window's ends, never per step."""
    import os
    from types import SimpleNamespace

    from fake_cuda import FakeClock, FakeCuda
    from fake_nvml import FakeNvmlProcesses

    from harness.profilers import speed
    from harness.profilers.speed import SpeedPreset

    fake = FakeNvmlProcesses([os.getpid(), 4242], {os.getpid(): 60, 4242: 35})
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(speed, "memory_peaks", SimpleNamespace(
        phase_start=lambda *args: None, phase_end=lambda *args: {}))
    clock = FakeClock()
    cuda = FakeCuda(clock)
    preset = SpeedPreset(warmup_steps=2, log_rates=False)
    preset.cuda = cuda
    trainer = SimpleNamespace(world_size=1, global_rank=0, global_step=0, sanity_checking=False,
                              loggers=[], strategy=SimpleNamespace(
                                  root_device=SimpleNamespace(type="cuda", index=0)))
    preset.setup(trainer, None, "fit")
    preset.on_train_epoch_start(trainer, None)
    for i in range(20):
        time.sleep(0.001)  # NVML's samples carry the real clock
        preset.on_train_batch_start(trainer, None, {"x": [0] * 4}, i)
        cuda.launch(0.01)
        preset.on_train_batch_end(trainer, None, None, None, i)
    preset.on_train_epoch_end(trainer, None)
    preset.on_train_end(trainer, None)
    report = preset.write_reports(tmp_path)
    assert report.metrics["train_gpu_other_sm_share"] == pytest.approx(0.35)
    assert "contended:train" in report.flags
    contention = preset.phase_summaries()["train"]["contention"]
    assert contention["gpu_other_processes"] == 1 and contention["gpu_contended"] is True
    assert fake.shut_down  # NVML closed once the report is written
