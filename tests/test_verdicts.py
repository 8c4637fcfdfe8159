"""Verdicts on B/A (harness.judge): contended or noisy samples never make a real
difference; identical settings never read as one, over thousands of random pairs; a planted
real difference on a quiet machine still does, from single runs too. The samples are built
from result.json figures and flags, as a sweep's jobs write them (no process is timed)."""

from __future__ import annotations

import random
import statistics

import pytest
from sweep_files import steps

from harness.judge import Band, band_of, judge
from harness.measured import sample_of


def quiet(rate: float, rng: random.Random, cv: float = 0.03) -> tuple[dict, list[str]]:
    """A run on a quiet machine: its median within 2% of `rate`, steps spread by `cv`."""
    return steps(rate * rng.uniform(0.98, 1.02), cv=cv * rng.uniform(0.8, 1.2)), []


def contended(rate: float, rng: random.Random) -> tuple[dict, list[str]]:
    """Beside CPU-bound neighbours: 2 to 10x slower, every step alike (the median moves,
    the spikes do not show), flagged by the run."""
    return steps(rate / rng.uniform(2, 10), cv=0.05), ["contended:train"]


def spiky(rate: float, rng: random.Random) -> tuple[dict, list[str]]:
    """Stalls in some steps: a mean step 2 to 4x the median, flagged noisy by the run."""
    return steps(rate * rng.uniform(0.9, 1.0), cv=0.4, mean_over_median=rng.uniform(2, 4)), [
        "noisy:train"]


def band(runs: list[tuple[dict, list[str]]]) -> Band | None:
    return band_of([sample_of(figures, flags, "train") for figures, flags in runs])


def side(rate: float, rng: random.Random) -> list[tuple[dict, list[str]]]:
    """1 to 3 samples of one point, each half the time contended, else sometimes spiky."""
    runs = []
    for _ in range(rng.choice([1, 2, 3])):
        draw = rng.random()
        make = contended if draw < 0.5 else spiky if draw < 0.65 else quiet
        runs.append(make(rate, rng))
    return runs


@pytest.mark.parametrize("tolerance", [0.05, 0.1])
def test_identical_settings_never_differ_even_when_a_side_is_contended_or_noisy(tolerance):
    rng = random.Random(20)
    kinds, naive_real = [], 0
    for _ in range(3000):
        a, b = side(100.0, rng), side(100.0, rng)
        verdict = judge(band(a), band(b), tolerance)
        assert verdict is not None and verdict.kind != "real", (a, b, verdict)
        kinds.append(verdict.kind)
        # the reading before verdicts: the medians of all samples, apart by more than tolerance
        ratio = (statistics.median(f["train_examples_per_second"] for f, _ in b)
                 / statistics.median(f["train_examples_per_second"] for f, _ in a))
        naive_real += ratio < 1 - tolerance or ratio > 1 / (1 - tolerance)
    # the planted contention has teeth: read naively, most of these pairs differ
    assert naive_real > 1500
    # `same` needs two counted jobs a side (one job's own step spread is not the noise between
    # runs): the few such pairs here
    assert kinds.count("same") > 40 and kinds.count("inconclusive") > 1500


def test_identical_quiet_settings_read_same_not_inconclusive():
    rng = random.Random(21)
    verdicts = [judge(band([quiet(100, rng) for _ in range(3)]),
                      band([quiet(100, rng) for _ in range(3)]), 0.1) for _ in range(500)]
    assert all(v is not None and v.kind == "same" for v in verdicts)


def test_a_planted_slowdown_on_a_quiet_machine_is_real_from_repeats_and_never_from_one_run():
    rng = random.Random(22)
    for count in (1, 2, 3):
        for _ in range(200):
            verdict = judge(band([quiet(100, rng) for _ in range(count)]),
                            band([quiet(70, rng) for _ in range(count)]), 0.1)
            assert 0.66 < verdict.ratio < 0.74
            # one run a side: its step spread says nothing of the noise between processes
            assert (verdict.kind, verdict.worse) == (("inconclusive", True) if count == 1
                                                     else ("real", True))
    # a planted speed-up is real too, and no regression
    verdict = judge(band([quiet(100, rng)] * 2), band([quiet(130, rng)] * 2), 0.1)
    assert verdict.kind == "real" and not verdict.worse


def test_a_slowdown_within_the_noise_is_inconclusive_not_a_pass():
    # two quiet samples a side that spread by 30%: a 15% change cannot be told from noise
    a = band([(steps(100), []), (steps(130), [])])
    b = band([(steps(97), []), (steps(110), [])])
    verdict = judge(a, b, 0.1)
    assert verdict.kind == "inconclusive" and verdict.reason.startswith("noisy: B/A could be")


def test_a_side_with_no_counted_sample_is_inconclusive_with_its_reason():
    rng = random.Random(23)
    two_contended = band([contended(100, rng), contended(100, rng)])
    assert two_contended.counted == 0 and two_contended.why == "contended 2/2"
    verdict = judge(band([quiet(100, rng)]), two_contended, 0.1)
    assert verdict.kind == "inconclusive" and verdict.reason == "B: contended 2/2"
    both = judge(band([spiky(100, rng)]), two_contended, 0.1)
    assert both.reason == "A: noisy 1/1; B: contended 2/2"


def test_planted_spikes_make_a_sample_noisy_by_its_flag_or_in_older_results_by_its_mean():
    figures = steps(100, cv=0.02, mean_over_median=3.25)  # 1 step in 4 stalls 10x
    assert sample_of(figures, ["noisy:train"], "train").noisy
    # the run's own rule decided, and it found the steps steady enough: counted
    assert sample_of(figures, [], "train").counted
    older = {k: v for k, v in figures.items() if k != "train_mad_step_s"}  # before the flag
    assert sample_of(older, [], "train").noisy
    verdict = judge(band([(steps(100), [])]), band([(older, [])]), 0.1)
    assert verdict.kind == "inconclusive" and verdict.reason == "B: noisy 1/1"


def test_a_sample_counted_in_one_phase_can_be_left_out_in_the_other():
    figures = {**steps(100), **steps(400, phase="inference")}
    flags = ["contended:inference"]
    assert sample_of(figures, flags, "train").counted
    assert sample_of(figures, flags, "inference").contended


def test_a_samples_figure_is_the_runs_own_examples_per_second():
    """One figure per point (issue 34): the judge reads the examples/s result.json and the
    speed report give, the window's; stalls make a run `noisy` rather than a slower figure."""
    figures = steps(100, batch_size=8, mean_over_median=1.25)
    sample = sample_of(figures, [], "train")
    assert sample.figure == figures["train_examples_per_second"] == pytest.approx(80)
    # its band: 3 standard errors of the median step, 3 x 1.4826 MAD / median / sqrt(steps)
    assert sample.spread == pytest.approx(3 * 0.03 / 50 ** 0.5)
    tight = band_of([sample_of(steps(100, cv=0.001), [], "train")])
    assert (tight.low, tight.high) == (pytest.approx(0.99 * tight.value),
                                       pytest.approx(1.01 * tight.value))  # at least 1%


def test_a_single_older_result_has_no_band_and_no_verdict():
    # metrics without a median step or its MAD: the spread is not known, the caller's rule holds
    older = {"train_examples_per_second": 100.0, "train_seconds_per_iteration": 0.08}
    assert sample_of(older, [], "train").spread is None
    once = judge(band_of([sample_of(older, [], "train")]),
                 band_of([sample_of(older, [], "train")]), 0.1)
    assert once.kind == "inconclusive" and "no spread known" in once.reason
    # with two samples a side the min..max is a band
    two = band_of([sample_of(older, [], "train")] * 2)
    assert judge(two, two, 0.1).kind == "same"
