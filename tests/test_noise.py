"""Noise said where the numbers are: planted spikes make a phase `noisy` (the speed preset's
rule, on its own step records), the diagnosis keeps the median iteration's shares, and a run
noisier than the gap between its two largest shares gives no verdict."""

from __future__ import annotations

import dataclasses
import random

import pytest
from conftest import run_harness
from test_diagnose import PLANTED

from harness.profilers.diagnose import findings as rules
from harness.profilers.diagnose.preset import DiagnosePreset
from harness.profilers.diagnose.speed_of_light import PassResult
from harness.profilers.preset import Presets
from harness.profilers.speed import SpeedPreset
from harness.profilers.step_timer import StepRecord
from harness.result.schema import RunResult


def speed_with_steps(times: list[float]) -> SpeedPreset:
    """A speed preset whose training phase recorded `times` (after 5 warm-up steps)."""
    preset = SpeedPreset(warmup_steps=5, min_measured_steps=10)
    steps = [StepRecord(i, t, 0.0, 4, i < 5) for i, t in enumerate([1.0] * 5 + times)]
    preset.timers["train"].host_steps = steps
    return preset


def test_planted_spikes_make_the_phase_noisy_and_it_is_said_beside_the_table(tmp_path, capsys):
    spikes = speed_with_steps([0.1, 0.1, 0.1, 1.0] * 10)  # every 4th step stalls for 0.9 s
    report = spikes.write_reports(tmp_path)
    assert "noisy:train" in report.flags
    train = spikes.phase_summaries()["train"]
    assert train["mean_over_median"] == pytest.approx(3.25) and train["noisy"] is True
    assert report.metrics["train_median_step_s"] == pytest.approx(0.1)
    assert report.metrics["train_mad_step_s"] == pytest.approx(0.0)
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "steps vary" in x]
    assert "the mean is 3.2x the median" in line and "noisy:train" in line
    assert "Fix:" in line and "repeat=3" in line

    # steps that spread widely without spikes: the robust CV says it
    rng = random.Random(0)
    spread = speed_with_steps([rng.uniform(0.05, 0.15) for _ in range(40)])
    figures = spread.phase_summaries()["train"]
    assert figures["robust_cv"] > 0.25 and figures["mean_over_median"] < 1.5
    assert "noisy:train" in spread.write_reports(tmp_path).flags
    # steady steps: no flag; the thresholds are options
    steady = speed_with_steps([0.1 + 0.001 * (i % 3) for i in range(40)])
    assert "noisy:train" not in steady.write_reports(tmp_path).flags
    loose = speed_with_steps([0.1, 0.1, 0.1, 1.0] * 10)
    loose.cautions = dataclasses.replace(loose.cautions, noisy_mean_over_median=4.0)
    assert "noisy:train" not in loose.write_reports(tmp_path).flags


def phase(metrics: dict) -> dict:
    """The diagnosis's training figures: model pass 55 ms a step, loader 1 ms."""
    preset = DiagnosePreset()
    preset.passes["train"] = {
        "loader": PassResult(0.001, 3, 8),
        "model": PassResult(0.055, 3, 8, fastest_s=0.054, slowest_s=0.056),
    }
    return preset.phase_figures("train", metrics, None)


def test_planted_spikes_move_the_mean_not_the_shares():
    # median step 0.1 s (model 55%, host 45%); every 4th step stalls 0.9 s: the mean is 0.325 s
    steady = phase({"train_median_step_s": 0.1, "train_seconds_per_iteration": 0.325,
                    "train_median_between_s": 0.0, "train_mad_step_s": 0.0})
    assert steady["shares"]["compute"] == pytest.approx(0.55)
    assert rules.noise_beats_gap(steady) is None
    line = rules.verdict(rules.bound_by(steady["shares"]), steady)
    assert line.startswith("bound by the model's compute: 55%")
    # the mean would have read 17% compute, 83% host
    old = phase({"train_seconds_per_iteration": 0.325, "train_between_steps_share": 0.0})
    assert old["shares"]["compute"] == pytest.approx(0.055 / 0.325)


def diagnosis(metrics: dict, flags: list[str], tmp_path) -> dict:
    preset = DiagnosePreset()
    Presets.of({"speed": SpeedPreset(), "diagnose": preset})  # the speed preset's cautions
    preset.passes["train"] = {
        "loader": PassResult(0.001, 3, 8),
        "model": PassResult(0.055, 3, 8, fastest_s=0.054, slowest_s=0.056),
    }
    result = RunResult(status="ok", metrics=metrics, flags=flags)
    return preset.diagnose(tmp_path, result).model_dump()


def test_noise_wider_than_the_gap_gives_no_verdict_and_no_bound(tmp_path):
    metrics = {"train_median_step_s": 0.1, "train_seconds_per_iteration": 0.2,
               "train_median_between_s": 0.0, "train_mad_step_s": 0.03}  # spread 44%
    found = diagnosis(metrics, ["noisy:train"], tmp_path)
    assert found["bound_by"] == "unknown"  # a sweep's majority bound does not count it
    line = found["verdict"]
    assert line.startswith("no verdict: noisy: the training step varies by 44%")
    assert "compute (55%) and host (45%)" in line and "quieter machine" in line
    assert found["train_step_noise"] == pytest.approx(0.44478)
    assert found["train_compute_share"] == pytest.approx(0.55)  # still written
    # the noisy finding reads the speed preset's flag and its figures
    (noisy,) = [f for f in found["findings"] if f["kind"] == "noisy"]
    assert "spread 44% around the median" in noisy["message"]
    assert "the mean is 2.0x the median" in noisy["message"]
    # a small spread leaves the bound standing
    metrics["train_mad_step_s"] = 0.002
    calm = diagnosis(metrics, [], tmp_path)
    assert calm["bound_by"] == "compute" and calm["verdict"].startswith("bound by the model's")
    assert not [f for f in calm["findings"] if f["kind"] == "noisy"]


def test_a_contended_run_says_so_first(tmp_path):
    metrics = {"train_median_step_s": 0.1, "train_seconds_per_iteration": 0.1,
               "train_median_between_s": 0.0, "train_mad_step_s": 0.001,
               "train_other_cpu_share": 0.8, "train_run_delay_share": 0.6}
    found = diagnosis(metrics, ["contended:train"], tmp_path)
    assert found["verdict"].startswith(
        "contended (others used 80% of its CPUs, its threads waited for a CPU 60% of the time;"
        " result.json flags: contended:train)")
    assert "bound by the model's compute" in found["verdict"]
    (contended,) = [f for f in found["findings"] if f["kind"] == "contended"]
    assert "Fix" not in contended["message"] and "quiet" in contended["next_step"]


@pytest.mark.slow
def test_a_step_that_stalls_every_fourth_step_keeps_its_compute_share(tmp_path):
    """The truth: each training step sleeps 50 ms in the model; a callback stalls every 4th
    step for 0.5 s. The mean step reads 175 ms (host 71%); the median is the model's."""
    done = run_harness(tmp_path, *PLANTED, "+model.step_s=0.05", "+data.batches=36",
                       "+profiler.stall._target_=planted_spikes.StallEvery",
                       "+profiler.stall.every=4", "+profiler.stall.stall_s=0.5", fast=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert "noisy:train" in result["flags"]
    assert "train steps vary" in done.stderr
    metrics, found = result["metrics"], result["diagnosis"]
    assert metrics["train_seconds_per_iteration"] > 2 * metrics["train_median_step_s"]
    assert found["bound_by"] == "compute", found["verdict"]
    assert found["train_compute_share"] > 0.7
    assert any(f["kind"] == "noisy" for f in found["findings"])


def test_a_loader_that_delivers_in_bursts_still_reads_as_data():
    """4 workers at 80 ms a batch feed a 2 ms step: most steps find a batch waiting (median
    2.5 ms), every 4th waits for the next burst (mean 20 ms). The loop cannot iterate faster
    than the loader alone delivers (20 ms): the step is the loader's pace, and the data wait
    is what the median hides."""
    preset = DiagnosePreset()
    preset.passes["train"] = {"loader": PassResult(0.020, 4, 8),
                              "model": PassResult(0.002, 3, 8, fastest_s=0.002, slowest_s=0.002)}
    bursty = preset.phase_figures("train", {
        "train_median_step_s": 0.0025, "train_seconds_per_iteration": 0.020,
        "train_median_between_s": 0.0005, "train_mad_step_s": 0.0005}, None)
    assert rules.bound_by(bursty["shares"]) == "data"
    assert bursty["shares"]["data"] == pytest.approx(0.018 / 0.020)
    assert rules.noise_beats_gap(bursty) is None
    # the spikes of a fast loader stay out: the step is still the median
    spiky = phase({"train_median_step_s": 0.1, "train_seconds_per_iteration": 0.325,
                   "train_median_between_s": 0.0, "train_mad_step_s": 0.0})
    assert spiky["shares"]["compute"] == pytest.approx(0.55)
