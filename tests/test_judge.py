"""The one judge (harness.judge): its rules on planted samples, and the same samples read
by the table, harness-report, autotune and the MLflow parent run giving the same decision.
In-process, no torch."""

from __future__ import annotations

import json
import math
import random

import pytest
from sweep_files import steps, write_job

from harness.judge import (
    Band,
    Sample,
    band_of,
    beyond,
    fastest,
    job_noise,
    judge,
)


def _band(*figures: float, noise: float = 0.0) -> Band:
    band = band_of([Sample(f, 0.01) for f in figures], noise)
    assert band is not None
    return band


def test_a_band_is_the_counted_samples_median_and_range():
    band = _band(100, 104, 98)
    assert (band.value, band.low, band.high, band.counted) == (100, 98, 104, 3)


def test_contended_and_noisy_samples_count_for_nothing_and_say_so():
    band = band_of([Sample(100), Sample(50, contended=True), Sample(70, noisy=True)])
    assert band.counted == 1 and band.total == 3
    assert band.left_out == "contended 1/3, noisy 1/3"
    none = band_of([Sample(100, contended=True)])
    assert none.value is None and none.why == "contended 1/1"
    verdict = judge(_band(100, 101), none)
    assert verdict.kind == "inconclusive" and verdict.reason == "B: contended 1/1"


def test_one_sample_is_widened_to_the_noise_between_runs():
    """Wrong answer 8 of issue 29: a single job's own spread is not the job-to-job noise."""
    alone = band_of([Sample(100, 0.02)])
    assert (alone.low, alone.high) == (pytest.approx(98), pytest.approx(102))
    assert not alone.between_runs
    widened = band_of([Sample(100, 0.02)], job_noise=0.05)
    assert widened.between_runs
    assert widened.high == pytest.approx(100 * math.exp(1.39 * 0.05))


def test_job_noise_is_the_pooled_log_sd_of_repeated_points():
    rng = random.Random(1)
    groups = [[100 * rng.lognormvariate(0, 0.05) for _ in range(6)] for _ in range(40)]
    assert job_noise(groups) == pytest.approx(0.05, rel=0.1)
    assert job_noise([[100], [200]], prior=0.03) == 0.03  # no point ran twice
    assert job_noise([[100], [200]]) == 0.0


@pytest.mark.parametrize(("b", "kind"), [
    ((120, 122), "real"), ((100.5, 101), "same"), ((90, 112), "inconclusive")])
def test_a_verdict_is_real_same_or_inconclusive(b, kind):
    verdict = judge(_band(100, 101), _band(*b))
    assert verdict.kind == kind
    assert beyond(_band(100, 101), _band(*b)) == (kind == "real")


def test_the_fastest_is_decided_only_beyond_every_other_and_on_the_noise_between_runs():
    found = fastest({"a": _band(100, 102), "b": _band(150, 152), "c": _band(120, 121)})
    assert (found.key, found.decided, found.ties) == ("b", True, ())
    tied = fastest({"a": _band(100, 110), "b": _band(105, 112)})
    assert tied.key == "b" and not tied.decided and tied.ties == ("a",)
    assert tied.why == "within the noise of 1 other"
    once = fastest({"a": band_of([Sample(100, 0.01)]), "b": band_of([Sample(150, 0.01)])})
    assert once.key == "b" and not once.decided and "ran once" in once.why
    simplest = fastest({"a": _band(100, 110), "b": _band(105, 112)}, simplest=lambda k: k)
    assert simplest.key == "a" and simplest.ties == ("b",)


# -- the same samples, every reader ---------------------------------------------------------
def _sweep(root, fp32: list[float], bf16: list[float]):
    """Hand-made jobs of two points over rounds: each job's median step runs at its rate."""
    n = 0
    for r, (a, b) in enumerate(zip(fp32, bf16, strict=True)):
        for precision, rate in (("fp32", a), ("bf16", b)):
            overrides = [f"precision={precision}", "repeat=1", f"+sweep_round={r}"]
            write_job(root / str(n), overrides, values={**steps(rate, 8, "train"),
                                                        **steps(rate * 3, 8, "inference")},
                      sweep_round=r)
            n += 1
    return root


@pytest.mark.parametrize(("fp32", "bf16", "decided"), [
    ([100, 102, 101], [150, 149, 152], True),  # bf16 1.5x, beyond noise
    ([100, 110, 95], [104, 98, 108], False),  # a tie
])
def test_the_table_report_autotune_and_mlflow_give_one_decision(tmp_path, fp32, bf16, decided):
    from harness.autotune.reading import outcome_of
    from harness.autotune.score import estimate
    from harness.autotune.settings import Settings
    from harness.sweep.collect import collect
    from harness.sweep.diff import diff
    from harness.sweep.render import to_json
    from harness.sweep.table import build
    from harness.tracking.sweep_summary import best_and_baseline

    root = _sweep(tmp_path / "sweep", fp32, bf16)
    table = build(collect(root))
    # the table: the speed-up's verdict and the sweep's fastest point
    bf16_point = table.points[table.points["variant"] == "precision=bf16"].iloc[0]
    assert (bf16_point["train_speedup_verdict"] == "real") == decided
    assert table.fastest["train"]["decided"] == decided
    assert table.fastest["train"]["point"] == ("precision=bf16" if decided else
                                               table.fastest["train"]["point"])
    # harness-report A B: the same samples, one point a side
    a = build(collect(_sweep(tmp_path / "a", fp32, fp32)))
    b = build(collect(_sweep(tmp_path / "b", bf16, bf16)))
    changes = [c for c in diff(a, b).changes if c.metric == "train_examples_per_second"]
    assert changes and all((c.verdict.kind == "real") == decided for c in changes)
    # autotune: the candidates' jobs read from the same directories, at the table's noise
    settings = Settings(planned_steps=10**9)
    jobs = {p: [outcome_of(root / str(i), "training") for i in range(len(fp32) * 2)
                if json.loads((root / str(i) / "result.json").read_text())["overrides"][0]
                == f"precision={p}"] for p in ("fp32", "bf16")}
    est = {p: estimate(o, settings, table.noise["train"]) for p, o in jobs.items()}
    assert est["bf16"].tied(est["fp32"], 0.05) == (not decided)
    same = table.points.set_index("variant").loc["precision=bf16", "train_band"]
    assert (est["bf16"].value, est["bf16"].low, est["bf16"].high) == (
        pytest.approx(same.value), pytest.approx(same.low), pytest.approx(same.high))
    # the MLflow parent run: the fastest point, unproven where the table says so
    _, tags = best_and_baseline(json.loads(json.dumps(to_json(table), default=str)))
    assert ("unproven" not in tags["best_train"]) == decided


def test_a_sweep_over_batch_size_alone_names_its_fastest_point(tmp_path):
    """Wrong answer 2 of issue 29: `harness -m batch_size=2,16 repeat=2` has one variant per
    row, so no row has a best; the sweep's fastest point is still named, on the terminal's
    line, in comparison.json and as the parent run's metrics and tag."""
    from harness.sweep.collect import collect
    from harness.sweep.render import fastest_lines, to_json
    from harness.sweep.table import build
    from harness.tracking.sweep_summary import best_and_baseline

    n = 0
    for r in range(2):
        for batch, rate in ((2, 456.0), (16, 2706.0)):
            overrides = [f"batch_size={batch}", "repeat=1", f"+sweep_round={r}"]
            write_job(tmp_path / str(n), overrides, sweep_round=r,
                      values=steps(rate * (1 + 0.02 * r), batch, "train"))
            n += 1
    table = build(collect(tmp_path))
    found = table.fastest["train"]
    assert found["point"] == "batch_size=16" and found["decided"]
    assert found["examples_per_second"] == pytest.approx(2706 * 1.01)
    assert any("fastest (training): batch_size=16" in line and "beyond" in line
               for line in fastest_lines(table))
    metrics, tags = best_and_baseline(json.loads(json.dumps(to_json(table), default=str)))
    assert tags["best_train"] == "batch_size=16"
    # the table's figure of the point: examples per iteration / its median s/it (the mean
    # step, 1.02 x the median step in sweep_files.steps)
    assert metrics["best_train_examples_per_second"] == pytest.approx(
        2 / (1 / 2706 + 1 / (2706 * 1.02)) / 1.02)
    assert metrics["best_train_examples_per_second_low"] == pytest.approx(found["low"])
