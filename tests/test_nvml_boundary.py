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
    # the first sample, at start(), has nothing to compare CPU time with (#23)
    assert samples[0]["process_cpu_pct"] is None
    assert all(s["process_cpu_pct"] is not None and s["rss_bytes"] > 0 for s in samples[1:])


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
        phase_start=lambda *args: None, phase_timed=lambda *args, **kwargs: None,
        phase_end=lambda *args: {}))
    # so is the step run alone before a phase's memory counts: it needs a real module
    monkeypatch.setattr(speed.SpeedPreset, "_warm_libraries", lambda *args: None)
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


# -- #23: the run's devices, by UUID; MIG; energy from start() ------------------------------
def test_torch_uuids_decide_the_mapping_not_nvmls_order(monkeypatch):
    """Planted: CUDA orders the GPUs differently from NVML's PCI order (CUDA_DEVICE_ORDER
    defaults to FASTEST_FIRST) and the variable is unset. torch's UUIDs (bare, no "GPU-")
    say which NVML device each cuda:i is."""
    monkeypatch.setitem(sys.modules, "pynvml", three_gpus())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = Nvml(cuda_uuids=["bbbc3333-0000", "aaaa1111-0000", "bbbb2222-0000"])
    assert [(g.index, g.nvml_index) for g in nvml.gpus] == [(0, 2), (1, 0), (2, 1)]


def test_only_the_runs_gpus_are_sampled_and_their_energy_starts_at_start(monkeypatch):
    """Planted: three GPUs visible, the run on cuda:1 only (NVML's GPU 2, with the energy
    counter, +1 J per read). Only that GPU is sampled, and its energy counts from start():
    one read at start, then one per sample."""
    from harness.profilers.system import SystemPreset

    fake = three_gpus()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    uuids = ["GPU-aaaa1111-0000", "bbbc3333-0000", "bbbb2222-0000"]
    sampler = SystemSampler(interval_s=60, devices=[1], cuda_uuids=uuids)
    assert [(g.index, g.nvml_index) for g in sampler.gpus] == [(1, 2)]
    sampler.start("fit")
    sampler.stop()  # no interval passed: the samples at start and at stop
    assert len(sampler.samples) == 2
    assert not any(key.startswith("gpu0_") or key.startswith("gpu2_")
                   for key in sampler.samples[0])
    assert sampler.gpu_energy(1) == (pytest.approx(1.0), "NVML total-energy counter")
    preset = SystemPreset(interval_s=60)
    preset.sampler = sampler
    assert preset.summary()["gpus"][0]["uuid"] == "GPU-bbbc3333-0000"


def test_a_cpu_run_reports_no_gpu_figures(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", three_gpus())
    sampler = SystemSampler(interval_s=60, devices=[])
    assert sampler.gpus == [] and sampler.gpu_note == "the run uses no GPU"


def test_a_mig_slice_keeps_its_figures_and_its_gpus_energy_counts_once(monkeypatch, tmp_path):
    """Planted: GPU 0 in MIG mode with two slices; the run uses both (cuda:0, cuda:1 by
    their MIG UUIDs). Each slice has its own memory; power and energy are the GPU's (read
    from the parent), reported per slice but summed once."""
    from fake_nvml import FakeNvmlMig

    from harness.profilers.system import SystemPreset

    fake = FakeNvmlMig([
        {"uuid": "GPU-aaaa1111-0000", "util": 10, "mem": 0, "power_mw": 250_000,
         "energy_mj": 5_000_000, "mig": [{"uuid": "MIG-cccc0001", "mem": 2**30},
                                        {"uuid": "MIG-cccc0002", "mem": 2 * 2**30}]},
        {"uuid": "GPU-bbbb2222-0000", "util": 50, "mem": 0, "power_mw": 200_000,
         "energy_mj": None},
    ])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-cccc0002")
    alone = Nvml()  # without torch's UUIDs: the variable names a slice
    assert [(g.index, g.uuid) for g in alone.gpus] == [(0, "MIG-cccc0002")]
    sampler = SystemSampler(interval_s=60, devices=[0, 1],
                            cuda_uuids=["cccc0001", "cccc0002"])
    assert [(g.index, g.nvml_index, g.uuid) for g in sampler.gpus] == [
        (0, 0, "MIG-cccc0001"), (1, 0, "MIG-cccc0002")]
    sample = sampler.nvml.sample(sampler.gpus[1])
    assert sample["memory_used_bytes"] == 2 * 2**30 and sample["power_w"] == 250.0
    assert sample["utilization_pct"] is None and sample["energy_counter_j"] is not None
    sampler.start("fit")
    sampler.stop()
    preset = SystemPreset(interval_s=60)
    preset.sampler = sampler
    report = preset.write_reports(tmp_path)
    gpus = preset.summary()["gpus"]
    assert [g["mig"] for g in gpus] == [True, True]
    assert all("MIG slice" in g["energy_method"] for g in gpus)
    # slice 0's two reads and slice 1's two interleave on one counter (+1 J each): each
    # slice's difference is 2 J, the GPU's counted once
    assert [g["energy_wh"] * 3600 for g in gpus] == [pytest.approx(2.0)] * 2
    assert report.metrics["system_gpu_energy_wh"] * 3600 == pytest.approx(2.0)
