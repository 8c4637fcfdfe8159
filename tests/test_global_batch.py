"""global_batch_size (issue 27, item 1): the accumulation it sets, refused before compute when it
does not divide, recorded as it ran, and the speed figures per whole optimizer step."""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import asdict

import pytest
from test_config_compose import composed

from harness.cli_errors import describe
from harness.config.composed import check_resolves
from harness.config.global_batch import world_size
from harness.errors import ConfigError
from harness.profilers.step_timer import PhaseTimer, optimizer_steps, step_figures
from harness.run.job import check_config


def checked(tmp_path, *overrides: str):
    """The knobs `harness <overrides>` runs with, through the job's own checks."""
    cfg = composed(*overrides, tmp_path=tmp_path)
    check_resolves(cfg)
    return check_config(cfg, list(overrides)).knobs


# -- the accumulation, before compute -------------------------------------------------------
@pytest.mark.parametrize(("overrides", "accumulation"), [
    (("global_batch_size=128", "batch_size=32"), 4),
    (("global_batch_size=128", "batch_size=128"), 1),
    (("global_batch_size=128", "batch_size=16", "trainer.devices=2"), 4),
    (("global_batch_size=128", "batch_size=16", "trainer.devices=[0,1]", "trainer.num_nodes=2"),
     2),
    (("global_batch_size=128", "batch_size=32", "+trainer.accumulate_grad_batches=4"), 4),
    (("batch_size=32",), None),  # unset: the trainer's own accumulation, as before
])
def test_global_batch_sets_the_accumulation(overrides, accumulation, tmp_path):
    knobs = checked(tmp_path, *overrides)
    assert knobs.accumulation == accumulation
    assert asdict(knobs)["accumulation"] == accumulation  # result.json's knobs


@pytest.mark.parametrize(("overrides", "key", "says"), [
    (("global_batch_size=100", "batch_size=32"), "global_batch_size",
     "batch_size x ranks = 32 x 1 = 32"),
    (("global_batch_size=128", "batch_size=32", "trainer.devices=3"), "global_batch_size",
     "batch_size x ranks = 32 x 3 = 96"),
    (("global_batch_size=128", "batch_size=32", "+trainer.accumulate_grad_batches=2"),
     "trainer.accumulate_grad_batches", "global_batch_size=128 with batch_size=32"),
    (("global_batch_size=0",), "global_batch_size", "expected a value >= 1"),
    (("global_batch_size=many",), "global_batch_size", "expected a valid integer"),
    (("activation_checkpointing=[]",), "activation_checkpointing",
     "a list of at least 1 item(s). Fix: activation_checkpointing=[Block]"),
])
def test_what_cannot_run_is_refused_in_one_line_naming_both_keys(overrides, key, says, tmp_path):
    with pytest.raises(ConfigError) as caught:
        checked(tmp_path, *overrides)
    code, line = describe(caught.value)
    assert code == 2
    assert line.startswith(f"{key}=") and says in line and "Fix:" in line
    assert "\n" not in line
    if key == "global_batch_size" and "ranks" in says:
        assert "batch_size" in line.split("Fix:")[1]  # both keys named, the fix gives one


def test_the_fix_names_a_batch_size_that_divides(tmp_path):
    with pytest.raises(ConfigError, match=r"Fix: batch_size=25, or global_batch_size=96"):
        checked(tmp_path, "global_batch_size=100", "batch_size=32")


def test_an_accumulation_schedule_beside_a_global_batch_is_refused(tmp_path):
    target = "lightning.pytorch.callbacks.GradientAccumulationScheduler"
    with pytest.raises(ConfigError, match=r"^trainer\.callbacks\[0\]=.*global_batch_size=64"):
        checked(tmp_path, "global_batch_size=64", "batch_size=32",
                f"+trainer.callbacks=[{{_target_: {target}, scheduling: {{0: 2}}}}]")


@pytest.mark.parametrize(("trainer", "ranks"), [
    ({"devices": 1}, 1), ({"devices": 4, "num_nodes": 2}, 8), ({"devices": "0,1"}, 2),
    ({"devices": "0,"}, 1), ({"devices": "3"}, 3), ({"devices": [0, 2, 3]}, 3),
    ({"devices": "auto", "accelerator": "cpu"}, 1), ({"devices": 0}, None),
    ({"devices": 2, "num_nodes": 0}, None),
])
def test_the_world_size_is_read_as_lightning_reads_devices(trainer, ranks):
    assert world_size(trainer) == ranks


def test_a_refused_global_batch_stops_the_command_before_any_compute(harness):
    done = harness("global_batch_size=100", "batch_size=32")
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert errors == ["harness: error: global_batch_size=100 is not valid: expected a multiple of"
                      " batch_size x ranks = 32 x 1 = 32: every optimizer step takes whole batches"
                      " on every rank. Fix: batch_size=25, or global_batch_size=96"]
    assert "Traceback" not in done.stderr
    result = done.result()
    assert result["status"] == "failed" and result["device"] is None and not result["metrics"]


# -- the step statistic per optimizer step, in-process ---------------------------------------
def _timer(batches: int, k: int, warmup: int, slow: float = 0.0) -> PhaseTimer:
    """Planted: every batch takes 0.01 s, the one that ends an optimizer step 0.01 + `slow`."""
    timer = PhaseTimer("train", warmup, batches_per_step=k)
    clock = 0.0
    timer.restart(clock)
    for index in range(batches):
        updates = (index + 1) % k == 0
        timer.batch_received(clock + 0.001, 4)
        clock += 0.01 + (slow if updates else 0.0)
        timer.step_done(clock, updates)
    return timer


def test_warm_up_ends_with_a_whole_optimizer_step():
    timer = _timer(batches=16, k=4, warmup=5)
    assert timer.warm_from == 8  # 5 batches of warm-up, rounded up to the step's end
    assert [s.warmup for s in timer.steps] == [True] * 8 + [False] * 8
    assert _timer(batches=16, k=1, warmup=5).warm_from == 5  # no accumulation: as before


def test_the_step_statistic_is_per_optimizer_step_and_counts_its_cost():
    timer = _timer(batches=24, k=4, warmup=4, slow=0.2)
    figures = step_figures(timer.steps, world_size=2, batches_per_step=4)
    assert figures["measured_steps"] == 5  # optimizer steps, not batches
    assert figures["warmup_steps"] == 1
    assert math.isclose(figures["median_step_s"], 4 * 0.01 + 0.2)  # the optimizer's cost in it
    # a median over the micro-batches would leave the one with the optimizer step out
    assert statistics.median(s.step_s for s in timer.steps) == pytest.approx(0.01)
    assert math.isclose(figures["examples_per_second"], 5 * 4 * 4 * 2 / (5 * 0.24))
    assert math.isclose(figures["iterations_per_second"], 1 / 0.24)


def test_a_short_or_unfinished_optimizer_step_is_left_out():
    timer = _timer(batches=10, k=4, warmup=0)  # steps of 4, 4, then 2 batches not stepped
    steps = list(timer.steps)
    steps[-1].updates = True  # an epoch's end: Lightning steps on the 2 it has
    assert [s.examples for s in optimizer_steps(steps, 4)] == [16, 16]
    steps[-1].updates = False  # the fit stopped mid-step
    assert len(optimizer_steps(steps, 4)) == 2


# -- whole runs -------------------------------------------------------------------------------
@pytest.mark.slow
def test_global_batch_runs_as_micro_batch_times_accumulation(harness):
    """Planted: 12 batches of 32 with global_batch_size=128: 3 optimizer steps of 4 batches;
    warm-up 4 batches = the first step, so 2 steps measured, each of 128 examples."""
    done = harness("global_batch_size=128", "batch_size=32", "mode=train",
                   "profiler=[speed]", "profiler.speed.warmup_steps=4")
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "ok"
    assert (result["knobs"]["global_batch_size"], result["knobs"]["accumulation"]) == (128, 4)
    assert result["observed"]["optimizer_step"] == {
        "micro_batch": 32, "accumulation": 4, "world_size": 1, "examples": 128, "steps": 3,
        "other_steps": 0}
    train = done.report("speed")["phases"]["train"]
    assert (train["batches_per_step"], train["measured_steps"]) == (4, 2)
    metrics = result["metrics"]
    # examples/s counts examples: 2 optimizer steps x 128 examples over their time
    assert math.isclose(metrics["train_examples_per_second"], 2 * 128 / train["measured_time_s"])
    assert math.isclose(metrics["train_optimizer_steps_per_second"],
                        2 / train["measured_time_s"])
    assert metrics["train_batches_per_step"] == 4
    assert "a step is one optimizer step of 4 batches" in done.stdout + done.stderr


@pytest.mark.slow
def test_the_optimizer_steps_own_cost_shows_in_the_step_statistic(harness):
    """Planted: each optimizer step sleeps 0.15 s; with 4 batches per step, only every fourth
    batch carries it. The median step must hold it; the batches' own median must not."""
    sleep = 0.15
    done = harness("model._target_=accumulation_module.SlowOptimizerStep",
                   f"+model.step_sleep_s={sleep}", "global_batch_size=16", "batch_size=4",
                   "data.train_batches=16", "mode=train", "profiler=[speed]",
                   "profiler.speed.warmup_steps=4")
    assert done.returncode == 0, done.stderr[-3000:]
    train = done.report("speed")["phases"]["train"]
    assert train["measured_steps"] == 3
    assert train["median_step_s"] > sleep
    rows = [r for r in csv.DictReader((done.run_dir() / "reports" / "speed_steps.csv").open())
            if r["phase"] == "train"]
    times = [float(r["step_s"]) for r in rows]
    assert statistics.median(times[4:]) < sleep  # per micro-batch: the optimizer step missed
    sums = [sum(times[i:i + 4]) for i in range(4, 16, 4)]
    assert math.isclose(train["median_step_s"], statistics.median(sums))
    assert math.isclose(train["measured_time_s"], sum(sums))


@pytest.mark.slow
def test_a_short_optimizer_step_makes_the_run_invalid(harness):
    """10 batches per epoch, 4 per step: Lightning's third step takes 2 batches (8 examples)."""
    done = harness("global_batch_size=16", "batch_size=4", "data.train_batches=10",
                   "mode=train", "profiler=[speed]", "profiler.speed.warmup_steps=0")
    assert done.returncode == 1, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "invalid"
    assert result["reason"].startswith(
        "global_batch_size=16 but 1 of the fit's 3 optimizer steps took fewer examples")
    assert result["observed"]["optimizer_step"]["other_steps"] == 1
    assert done.report("speed")["phases"]["train"]["measured_steps"] == 2  # whole steps only


@pytest.mark.slow
def test_a_data_config_that_ignores_the_batch_breaks_the_global_batch(harness):
    done = harness("global_batch_size=16", "batch_size=4", "data.batch_size=2",
                   "data.train_batches=8", "mode=train", "profiler=[speed]")
    assert done.returncode == 1, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "invalid"
    assert result["observed"]["optimizer_step"]["examples"] == 8
    assert any(note.startswith("global_batch_size=16 but each optimizer step took 8 examples"
                               " (2 per batch x 4 batches x 1 ranks)")
               for note in result["observed"]["notes"])


@pytest.mark.slow
def test_a_module_with_manual_optimization_is_told_in_one_line(harness):
    done = harness("model._target_=accumulation_module.ManualOptimization",
                   "global_batch_size=16", "batch_size=4", "mode=train")
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1
    assert errors[0].startswith("harness: error: global_batch_size=16 is not valid: expected a"
                                " module with automatic optimization: ManualOptimization")
    assert "cannot set its accumulation" in errors[0] and "Fix:" in errors[0]
    assert not done.result()["metrics"]
