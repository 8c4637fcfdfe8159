"""The default run on the built-in workload: files written and their values."""

from __future__ import annotations

import csv
import math

import pytest

pytestmark = pytest.mark.slow


def test_default_run_writes_result_and_speed_report(harness):
    done = harness("profiler.speed.warmup_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "ok"
    assert result["knobs"]["batch_size"] == 4
    assert result["precision_used"] == "32-true"
    assert result["device"]["accelerator"] == "cpu"
    assert result["versions"]["torch"]

    speed = done.report("speed")
    assert speed["warmup_steps_excluded"] == 2
    for phase, steps in (("train", 12), ("validation", 4), ("inference", 8)):
        figures = speed["phases"][phase]
        assert figures["measured_steps"] == steps - 2
        assert figures["warmup_steps"] == 2
        s_per_it = figures["seconds_per_iteration"]
        assert s_per_it > 0
        # examples/s must be batch_size x world size / seconds per iteration
        assert math.isclose(figures["examples_per_second"], 4 * 1 / s_per_it, rel_tol=1e-9)
        assert figures["median_step_s"] <= figures["p90_step_s"]
        assert 0 <= figures["between_steps_share"] < 1
        assert result["metrics"][f"{phase}_examples_per_second"] == figures["examples_per_second"]
    assert speed["inference_mode"] is True

    rows = list(csv.DictReader((done.run_dir() / "reports" / "speed_steps.csv").open()))
    train = [r for r in rows if r["phase"] == "train"]
    assert len(train) == 12
    assert all(float(r["training_rate"]) > 0 for r in train)
    assert {r["phase"] for r in csv.DictReader((done.run_dir() / "reports" / "speed.csv").open())} == {
        "train", "validation", "inference"
    }
    # The run wrote under Hydra's output directory, never into the working directory itself.
    assert not (done.cwd / "lightning_logs").exists()
    assert done.run_dir().parent.parent.name == "outputs"


def test_mode_train_skips_inference(harness):
    done = harness("mode=train")
    assert done.returncode == 0, done.stderr[-3000:]
    phases = done.report("speed")["phases"]
    assert set(phases) == {"train", "validation"}


def test_fp16_on_cpu_records_the_precision_lightning_used_and_is_invalid(harness):
    """Lightning runs 16-mixed as bf16-mixed on a CPU: asked for fp16, the figures are bf16's,
    so the run is invalid (kept in result.json, never shown as fp16)."""
    done = harness("precision=fp16", "mode=train")
    assert done.returncode == 1, done.stderr[-3000:]
    result = done.result()
    assert result["knobs"]["lightning_precision"] == "16-mixed"
    assert result["precision_used"] == "bf16-mixed"
    assert "bf16" in result["precision_note"]
    assert result["status"] == "invalid"
    assert result["reason"].startswith("precision=fp16 but Lightning ran bf16-mixed")
    assert result["metrics"]["train_examples_per_second"] > 0  # the figures stay
    assert "harness: error: invalid: precision=fp16" in done.stderr


def test_profiler_none_runs_bare(harness):
    done = harness("profiler=none", "mode=train")
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "ok"
    assert "train_examples_per_second" not in result["metrics"]
    assert not (done.run_dir() / "reports").exists()


# -- #23: each job of a sweep starts from the sweep's torch settings and records its own -----
def test_the_next_job_starts_from_the_sweeps_torch_settings(tmp_path):
    """Planted truth: job 0's module sets cudnn.benchmark, float32 matmul precision 'medium'
    and deterministic algorithms (FLIPPED) in its setup hook; job 1's sets nothing, so it
    must run with what a fresh process reads."""
    import json
    import subprocess
    import sys

    from conftest import job_results, run_harness, sweep_dir
    from settings_module import FLIPPED

    fresh = json.loads(subprocess.run(
        [sys.executable, "-c", "import json; from harness.run import torch_settings;"
         " print(json.dumps(torch_settings.read()))"],
        capture_output=True, text=True, check=True).stdout)
    done = run_harness(tmp_path, "hydra.mode=MULTIRUN", "mode=train", "profiler=[speed]",
                       "data.train_batches=4", "data.val_batches=1", "model.depth=1",
                       "model._target_=settings_module.SettingsFlipper", "+model.flip=true,false")
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = (job_results(sweep_dir(tmp_path))[job] for job in (0, 1))
    assert first["status"] == second["status"] == "ok"
    for name, value in FLIPPED.items():
        assert fresh[name] != value, name  # a flip, not torch's default
        assert first["torch_settings"][name] == value, name  # what job 0 ran with
    assert second["torch_settings"] == fresh  # nothing inherited from job 0
    assert set(FLIPPED) <= set(first["isolation"]["torch_settings_put_back"])
    assert "torch_settings_put_back" not in second["isolation"]


def test_torch_settings_restore_what_a_job_changed(monkeypatch):
    """Planted: a job mixes the legacy and the new TF32 APIs (after which torch refuses to
    read a legacy flag), flips cudnn and determinism, and leaves DDP's thread count and
    OMP_NUM_THREADS behind. Truth: the settings read before it."""
    import os

    import torch

    from harness.run import torch_settings

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch_settings.capture()
    try:
        torch.set_float32_matmul_precision("medium")
        if hasattr(torch.backends, "fp32_precision"):  # torch >= 2.9: the new API too
            torch.backends.cuda.matmul.fp32_precision = "tf32"
            torch.backends.cudnn.conv.fp32_precision = "ieee"
        torch.backends.cudnn.benchmark = not before["torch"]["cudnn_benchmark"]
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.set_num_threads(torch.get_num_threads() + 1)
        os.environ["OMP_NUM_THREADS"] = "1"
        changed = torch_settings.restore(before)
        assert torch_settings.read() == before["torch"]
        assert "OMP_NUM_THREADS" not in os.environ
        assert {"cudnn_benchmark", "deterministic_algorithms", "deterministic_warn_only",
                "num_threads", "env:OMP_NUM_THREADS"} <= set(changed)
        assert torch_settings.restore(before) == []  # nothing left to put back
    finally:
        torch_settings.restore(before)


def test_an_oom_while_compiling_is_an_oom():
    """Planted: a torch.compile backend that runs out of memory. TorchDynamo wraps it
    (BackendCompilerFailed, first line "backend=... raised:"), which read as 'compile failed'."""
    import torch

    from harness.run.record import classify_failure

    def backend(graph, inputs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (planted)")

    torch.compiler.reset()
    with pytest.raises(Exception) as caught:
        torch.compile(lambda x: x * 2 + 1, backend=backend)(torch.ones(3))
    assert type(caught.value).__module__.startswith("torch._dynamo")
    status, reason = classify_failure(caught.value)
    assert status == "oom"
    assert reason == "out of memory while compiling: CUDA out of memory. Tried to allocate 2.00 GiB (planted)"
    torch.compiler.reset()


def test_nothing_before_the_fit_initialises_cuda(monkeypatch, tmp_path):
    """Lightning refuses to fork ranks from a process whose CUDA is initialised, and reading
    a GPU's name or memory initialises it. Planted: a Trainer on 'cuda:0' whose fit only
    records itself, and torch.cuda calls that record themselves. Truth: none of them that
    initialises CUDA comes before the fit, and the device is still recorded."""
    from types import SimpleNamespace

    import torch
    from test_config_compose import composed

    from harness.run import build, measure
    from harness.run.job import check_config
    from harness.run.record import RunRecord

    events: list[str] = []

    def recorded(name, value=None):
        return lambda *args, **kwargs: events.append(name) or value

    for name, value in (("get_device_name", "Planted GPU"),
                        ("get_device_properties", SimpleNamespace(total_memory=80 << 30)),
                        ("reset_peak_memory_stats", None), ("max_memory_allocated", 0),
                        ("max_memory_reserved", 0), ("synchronize", None),
                        ("empty_cache", None), ("current_device", 0), ("set_device", None)):
        monkeypatch.setattr(torch.cuda, name, recorded(name, value))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # NVML: no initialisation
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: "fit" in events)

    class PlantedTrainer:
        precision, world_size, num_nodes, num_devices, is_global_zero = "32-true", 1, 1, 1, True
        accumulate_grad_batches = 1
        strategy = SimpleNamespace(root_device=torch.device("cuda", 0), cluster_environment=None)

        def fit(self, module, datamodule=None):
            events.append("fit")

    monkeypatch.setattr(build, "build_trainer", lambda *args, **kwargs: PlantedTrainer())
    cfg = composed("mode=train", "logger=none", tmp_path=tmp_path)
    record = RunRecord(tmp_path)
    measure.measure_once(cfg, check_config(cfg, []).knobs, record, None)
    assert "fit" in events
    assert events[0] == "fit", f"CUDA initialised before the fit by {events[:events.index('fit')]}"
    device = record.result.device
    assert device is not None and (device.accelerator, device.device_name) == ("cuda", "Planted GPU")


def test_a_strategy_harness_cannot_measure_is_refused_in_one_line(harness):
    """ddp_spawn runs the fit in processes multiprocessing starts, with copies of the presets:
    the run ended ok with no figures. Refused before compute, exit 2, naming what to use."""
    done = harness("trainer.strategy=ddp_spawn", "trainer.devices=2", "trainer.accelerator=cpu")
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("harness: error: trainer.strategy='ddp_spawn' is not valid")
    assert "Fix: trainer.strategy=ddp" in lines[0]
    assert not list(done.cwd.rglob("reports"))  # nothing was measured
