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
