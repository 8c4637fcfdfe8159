"""Numbers that cannot lie: what ran is checked against the knobs, thin phases are flagged,
repeats agree with themselves, drift between jobs shows as spread, a failed phase keeps the
other's figures. Each test plants the truth (a data config that ignores batch_size, a step
time that grows with the clock, a module without predict_step) and reads what was written."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
import torch
from conftest import FAST, job_results, run_harness, start_harness, sweep_dir
from forked_harness import ForkedRun

from harness.result.schema import RunResult

pytestmark = pytest.mark.slow

MULTIRUN = "hydra.mode=MULTIRUN"
FAST_ANY_BATCH = tuple(o for o in FAST if not o.startswith("batch_size="))
SMALL = ("data.train_batches=8", "data.val_batches=2", "data.predict_batches=6",
         "profiler.speed.warmup_steps=2")
TINY = ("model._target_=user_workload.PlainForwardClassifier", "~model.dim", "~model.depth",
        "~model.num_heads", "~model.mlp_ratio", "~model.dropout", "~model.lr",
        "data._target_=user_workload.TinyData", "~data.seq_len", "~data.dim",
        "~data.train_batches", "~data.val_batches", "~data.predict_batches",
        "~data.generate_on", "~data.num_workers", "~data.pin_memory", "+data.examples=96")


def test_a_data_config_that_ignores_batch_size_makes_every_job_invalid(tmp_path):
    """The user's data config hardcodes 16: a sweep over batch_size ran 16 each time."""
    done = run_harness(tmp_path, MULTIRUN, *FAST_ANY_BATCH, *SMALL, "batch_size=4,8",
                       "data.batch_size=16", fast=False)
    assert done.returncode == 1, done.stderr[-3000:]  # no job measured what it was asked
    assert "2 invalid" in done.stderr
    root = sweep_dir(tmp_path)
    for result in job_results(root).values():
        assert result["status"] == "invalid"
        assert result["observed"]["examples_per_batch"]["train"] == 16
        want = result["knobs"]["batch_size"]
        assert result["reason"] == (
            f"batch_size={want} but train batches hold 16 examples per rank: the data config"
            " ignores the knob. Fix: batch_size: ${batch_size} in your data config")
        assert result["metrics"]["train_examples_per_second"] > 0  # kept in result.json
    rows = list(csv.DictReader((root / "comparison.csv").open()))
    assert {r["status"] for r in rows} == {"invalid"}
    for row in rows:
        assert row["train_examples_per_second"] == row["inference_examples_per_second"] == ""
    md = (root / "comparison.md").read_text()
    assert "| 4 | invalid | invalid | invalid |" in md and "| 8 | invalid |" in md
    assert "ignores the knob" in md
    points = json.loads((root / "comparison.json").read_text())["points"]
    assert all(p["train_examples_per_second"] is None and p["train_speedup"] is None
               for p in points)


def _fresh(tmp_path: Path, name: str, *overrides: str, fast: bool = True):
    """One run in its own directory (several runs of a test must not share one)."""
    cwd = tmp_path / name
    cwd.mkdir()
    return run_harness(cwd, *overrides, fast=fast)


def test_a_batch_size_nobody_set_is_noted_and_check_knobs_false_only_notes(tmp_path):
    # The knob left at its default (32): the data's own 6 is noted, the run stays ok.
    default = _fresh(tmp_path, "default", *FAST_ANY_BATCH, "data.batch_size=6", "mode=train",
                     fast=False)
    assert default.returncode == 0, default.stderr[-3000:]
    result = default.result()
    assert result["status"] == "ok" and result["observed"]["examples_per_batch"]["train"] == 6
    assert result["observed"]["notes"][0].startswith("batch_size=32 but train batches hold 6")
    # Set on the command line (FAST's batch_size=4) it is invalid, unless check_knobs=false.
    strict = _fresh(tmp_path, "strict", "data.batch_size=6", "mode=train")
    assert strict.returncode == 1 and strict.result()["status"] == "invalid"
    kept = _fresh(tmp_path, "kept", "data.batch_size=6", "mode=train", "check_knobs=false")
    assert kept.returncode == 0 and kept.result()["status"] == "ok"


def test_thin_and_swallowed_phases_are_flagged(tmp_path):
    # 12 training steps, 5 warm-up: 7 measured < 10. 4 validation steps: all warm-up.
    done = _fresh(tmp_path, "thin", "profiler.speed.warmup_steps=5", "mode=train")
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert "thin:train" in result["flags"] and "warmup_swallowed:validation" in result["flags"]
    speed = done.report("speed")
    assert speed["phases"]["train"]["thin"] is True and speed["min_measured_steps"] == 10
    assert "all 4 validation steps were warm-up" in done.stderr
    assert "harness: speed: train figures rest on 7 measured steps" in done.stderr
    enough = _fresh(tmp_path, "enough", "profiler.speed.warmup_steps=2",
                    "profiler.speed.min_measured_steps=5", "mode=train")
    assert "thin:train" not in enough.result()["flags"]


def test_repeat_3_figures_agree_with_each_other(harness):
    done = harness("repeat=3", "mode=train", "profiler.speed.warmup_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    metrics, spread = result["metrics"], result["repeats"]
    rate, time_ = metrics["train_examples_per_second"], metrics["train_seconds_per_iteration"]
    assert rate * time_ == pytest.approx(4, rel=0.005)  # batch_size 4, one rank
    times = [r["train_seconds_per_iteration"] for r in spread["per_repeat"]]
    assert time_ == sorted(times)[1]  # the median repeat's s/it
    assert spread["min"]["train_examples_per_second"] == pytest.approx(4 / max(times))
    # one diagnosis, of the pooled figures: its step is the median's, its shares add up
    out = done.stdout + done.stderr
    assert out.count("diagnosis:") == 1 and "repeat 3/3" in out
    found = result["diagnosis"]  # the median iteration: the pooled median step
    assert found["train_flop_per_s"] == pytest.approx(found["train_flops_per_step"]
                                                      / metrics["train_median_step_s"])
    assert sum(found[f"train_{b}_share"] for b in ("data", "compute", "communication",
                                                   "host")) == pytest.approx(1)
    # each figure in one place: the diagnosis's in the diagnosis (figures() reads it there)
    assert "train_host_share" not in metrics and "train_step_s" not in found
    assert RunResult.model_validate(result).figures()["train_host_share"] == (
        found["train_host_share"])


def _drifting_sweep(cwd: Path, order: str, origin: float) -> ForkedRun:
    cwd.mkdir()
    return start_harness(
        cwd, MULTIRUN, *FAST, "mode=train", "data.train_batches=8", "profiler=[speed]",
        "profiler.speed.warmup_steps=2", "model._target_=drifting_module.DriftingModule",
        "+model.base_s=0.02", "+model.rate=0.5", f"+point={order}", "repeat=4",
        env={"HARNESS_TEST_DRIFT_T0": str(origin)},
    )


def test_drift_between_jobs_is_spread_not_a_speed_up(tmp_path):
    """Two identical points on a machine whose steps slow down over time: run in rounds, the
    speed-up of one over the other is within noise, whichever point the sweep runs first.
    The planted truth is a speed-up of exactly 1 (the points differ only by when they ran);
    each sweep is checked against it, never against the other sweep's figures. The two
    sweeps run at once (their steps mostly sleep), each drifting from the same origin. Four
    rounds: each point runs first in two. With three, one point ran second in two rounds and
    the slowdown between a round's jobs stayed in the paired estimate: on a loaded CI machine
    (steps late in the drift, so rounds varied little) it read 0.88x (0.83-0.94)."""
    origin = time.time()
    runs = {order: _drifting_sweep(tmp_path / name, order, origin)
            for name, order in (("forward", "a,b"), ("reverse", "b,a"))}
    for order, run in runs.items():
        _, stderr = run.communicate(timeout=600)
        assert run.returncode == 0, stderr[-3000:]
        base, other = order.split(",")
        cwd = tmp_path / ("forward" if order == "a,b" else "reverse")
        rows = {r["point"]: r for r in csv.DictReader((sweep_dir(cwd) / "comparison.csv").open())}
        assert rows[base]["baseline"] == "True" and rows[other]["rounds"] == "4"
        # the rounds alternate the order, so the drift lands on both sides of 1: never a
        # speed-up; where the rounds' pairs give the interval (both jobs of a pair counted,
        # or both loaded), it holds 1. Bands are not asked to: with contended jobs left out,
        # the quiet rounds left may have run the points in one order only (one quiet round,
        # a then b: 0.85-0.95, inconclusive, on a loaded machine)
        assert rows[other]["train_speedup_verdict"] != "real", rows[other]
        reason = rows[other]["train_speedup_verdict_reason"]
        if rows[other]["train_speedup_pairs"] and "contended" not in reason:
            low = float(rows[other]["train_speedup_min"])
            high = float(rows[other]["train_speedup_max"])
            assert low < 1 < high, (order, low, high, rows[other]["train_speedup_verdict_reason"])


def test_inference_failing_after_training_keeps_the_training_figures(harness):
    done = harness(*TINY, "batch_size=8", "profiler.speed.warmup_steps=2", "logger=none",
                   fast=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "partial"
    assert result["metrics"]["train_examples_per_second"] > 0
    why = result["phase_errors"]["inference"]
    assert "PlainForwardClassifier has no predict_step" in why and "Fix: give" in why
    assert "harness: warning: partial: training measured; inference failed" in done.stderr



def test_a_partial_run_whose_warmup_swallowed_training_failed(tmp_path):
    # Warm-up swallowed every training step and inference failed: nothing was measured.
    done = run_harness(tmp_path, *TINY, "batch_size=8", "profiler.speed.warmup_steps=1000",
                       "logger=none", fast=False)
    assert done.returncode == 1
    result = done.result()
    assert result["status"] == "failed", result["reason"]
    assert result["reason"].startswith("nothing measured: every training step was warm-up")
    assert "has no predict_step" in result["reason"]


def test_a_partial_job_shows_its_training_figures_in_the_table(tmp_path):
    done = run_harness(tmp_path, MULTIRUN, *TINY, "batch_size=8,12", "trainer.enable_progress_bar=false",
                       "logger=none", "profiler.speed.warmup_steps=2", fast=False)
    assert done.returncode == 0, done.stderr[-3000:]
    root = sweep_dir(tmp_path)
    rows = {r["batch_size"]: r for r in csv.DictReader((root / "comparison.csv").open())}
    for row in rows.values():
        assert row["status"] == "partial" and float(row["train_examples_per_second"]) > 0
        assert "has no predict_step" in row["inference_error"]
    md = (root / "comparison.md").read_text()
    assert "## Training" in md and "## Inference" in md
    assert "| 8 | failed | failed | failed |" in md.split("## Inference")[1]
    assert "inference failed: PlainForwardClassifier has no predict_step" in md


def test_inference_without_any_data_says_so(harness):
    done = harness(*TINY, "batch_size=8", "data._target_=user_workload.TrainOnlyData",
                   "logger=none", fast=False)
    why = done.result()["phase_errors"]["inference"]
    assert why.startswith("inference has no data: TrainOnlyData has neither a predict_dataloader")
    assert "predict_step" not in why  # the fix matches the cause


def test_a_knob_set_in_a_config_file_is_checked_like_one_set_on_the_command_line(tmp_path):
    from test_config_compose import composed

    from harness.config.knobs import read_knobs
    from harness.profilers.preset import BatchCounts
    from harness.run.observe import check_what_ran, observed_of

    def status_after(*overrides: str, seen: int) -> RunResult:
        knobs = read_knobs(composed(*overrides, tmp_path=tmp_path))
        batches = BatchCounts()
        batches.sizes["train"][seen] = 5
        result = RunResult(status="running", overrides=[], data="user_data.Loader")
        result.observed = observed_of(batches, compiled=None)
        check_what_ran(result, knobs, world_size=1)
        return result

    # batch_size 64 from a config file (no override recorded): the 128 that ran contradicts it
    assert status_after("batch_size=64", seen=128).status == "invalid"
    # harness's default nobody set: a note only
    left = status_after(seen=128)
    assert left.status == "running" and "batch_size=32 but train batches hold 128" in (
        left.observed.notes[0])


def test_each_batch_is_counted_once_and_the_loss_watch_keeps_one_sum(monkeypatch):
    from types import SimpleNamespace

    from harness.profilers import preset as contract
    from harness.profilers.preset import Presets
    from harness.profilers.speed import SpeedPreset
    from harness.run.loss_watch import LossWatch

    counted = []
    real = contract.count_examples
    monkeypatch.setattr(contract, "count_examples", lambda batch: counted.append(1) or real(batch))
    # the step run alone before a phase's memory counts needs a real module
    monkeypatch.setattr(SpeedPreset, "_warm_libraries", lambda *args: None)
    trainer = SimpleNamespace(sanity_checking=False, global_step=0)
    # with the speed preset, it counts each batch inside its step; the observer counts none
    presets = Presets.of({"speed": SpeedPreset()})
    speed, observer = presets.by_name["speed"], presets.observer
    for index, batch in enumerate(({"x": torch.zeros(3, 2)}, {"text": ["a"]})):
        speed.on_train_batch_start(trainer, None, batch, index)
        observer.on_train_batch_start(trainer, None, batch, index)
    assert len(counted) == 2 and presets.shared.batches.sizes["train"] == {3: 1, None: 1}
    # without it, the observer counts them
    alone = Presets.of({})
    alone.observer.on_train_batch_start(trainer, None, {"x": torch.zeros(3, 2)}, 0)
    assert len(counted) == 3 and alone.shared.batches.examples_per_batch() == {"train": 3}

    watch = LossWatch()
    for loss in (1.0, 2.0):
        watch.on_train_batch_end(None, None, {"loss": torch.tensor(loss)}, None, 0)
    assert not watch.saw_nonfinite()
    watch.on_train_batch_end(None, None, torch.tensor(float("nan"), dtype=torch.bfloat16), None, 2)
    watch.on_train_batch_end(None, None, torch.tensor(5.0), None, 3)
    assert watch.saw_nonfinite()
