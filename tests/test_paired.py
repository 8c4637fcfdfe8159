"""Issue 28: comparisons decided through the jobs that ran side by side in each round (the
paired interval of harness.judge), the gate of `harness-report DIR --fail-if-worse`, and
`repeat=auto` adding rounds until decided. Planted truths: a machine that drifts between rounds
while every round's pair reads the same ratio."""

from __future__ import annotations

import json
import random
import sys

import pytest
from conftest import run_harness
from sweep_files import multirun_yaml, steps, write_job

from harness.judge import Sample, decide, paired, paired_interval, signed_rank_cut
from harness.result.jobs import collect
from harness.sweep.gate import decisions
from harness.sweep.report_cli import main as report_main
from harness.sweep.table import build


def test_the_signed_rank_cut_matches_the_published_table():
    # two-sided 5 %: n=6 -> 0, 8 -> 3, 10 -> 8, 20 -> 52 (Wilcoxon's tables, alpha/2 = .025)
    assert [signed_rank_cut(n) for n in (5, 6, 8, 10, 20)] == [None, 0, 3, 8, 52]


def test_a_paired_interval_covers_the_planted_ratio_about_as_often_as_it_says():
    rng, covered = random.Random(7), 0
    for _ in range(400):
        estimate, low, high = paired_interval([1.1 * rng.lognormvariate(0, 0.05) for _ in range(10)])
        covered += low <= 1.1 <= high
        assert low <= estimate <= high
    assert 0.92 * 400 <= covered <= 0.99 * 400
    assert paired_interval([1.0] * 5) is None  # under 6 pairs: no 95 % interval


@pytest.mark.parametrize(("low", "high", "kind"), [
    (0.97, 1.03, "same"), (0.86, 0.93, "real"), (1.07, 1.2, "real"), (0.92, 0.99, "inconclusive"),
    (0.9, 1.1, "inconclusive")])
def test_decided_is_an_interval_wholly_within_or_wholly_beyond_the_threshold(low, high, kind):
    assert decide((low + high) / 2, low, high, 0.05).kind == kind


def test_a_pair_with_one_side_contended_is_left_out_and_both_contended_counts():
    quiet = [(Sample(100.0), Sample(90.0)) for _ in range(6)]
    verdict = paired(quiet)
    assert (verdict.kind, verdict.pairs, verdict.ratio) == ("real", 6, pytest.approx(0.9))
    loaded = [(Sample(50.0, contended=True), Sample(45.0, contended=True))] * 6
    assert paired(loaded).pairs == 6
    mixed = [(Sample(100.0), Sample(45.0, contended=True))] * 6
    assert paired(mixed) is None  # a quiet side against a loaded one is never a difference
    half = paired([*quiet, *mixed])
    assert (half.pairs, half.unpaired) == (6, 6)


def test_a_loaded_pair_compares_the_time_on_a_cpu_and_a_quiet_pair_the_wall_time():
    # planted: identical work; each job's share of the CPU swings 45-75 % with the neighbours'
    # load, so the wall-time rates swing with it, while rate / (1 - waited share) stays put
    rng = random.Random(11)
    shares = [(rng.uniform(0.25, 0.55), rng.uniform(0.25, 0.55)) for _ in range(10)]

    def job(waited: float, contended: bool) -> Sample:
        rate = 100.0 * (1 - waited) * rng.uniform(0.995, 1.005)
        return Sample(rate, contended=contended, on_cpu=rate / (1 - waited))

    loaded = paired([(job(wa, True), job(wb, True)) for wa, wb in shares])
    assert (loaded.kind, loaded.pairs) == ("same", 10)
    assert 0.99 < loaded.low <= loaded.high < 1.01
    # the same waits without others' load are the job's own threads oversubscribing the CPUs:
    # a real cost, never taken out, so the wall-time rates decide (too spread to say same)
    quiet = paired([(job(wa, False), job(wb, False)) for wa, wb in shares])
    assert quiet.kind == "inconclusive" and quiet.high - quiet.low > 0.1


def test_a_result_without_schedstat_pairs_on_its_window_rate():
    from harness.measured import sample_of

    figures = {"train_examples_per_second": 80.0}
    assert sample_of({**figures, "train_run_delay_share": 0.2}, [], "train").on_cpu == 100.0
    assert sample_of(figures, [], "train").on_cpu is None


def _drifting_sweep(root, ratio: float, rounds: int, contended_b: tuple[int, ...] = (),
                    seed: int = 3, drift: float = 2200):
    """Two points of one key; the machine drifts from 7.2k to 9.4k ex/s over the rounds (as
    measured in issue 28), each round's B reads `ratio` x its A, within 1.5 %."""
    rng = random.Random(seed)
    job = 0
    for r in range(rounds):
        machine = 7200 + drift * r / max(rounds - 1, 1)
        order = ("a", "b") if r % 2 == 0 else ("b", "a")
        for side in order:
            rate = machine * (ratio if side == "b" else 1.0) * rng.uniform(0.9925, 1.0075)
            write_job(root / str(job), [f"+model.tag={side}", f"+sweep_round={r}"],
                      values=steps(rate), sweep_round=r, schema_version=3,
                      flags=["contended:train"] if side == "b" and r in contended_b else None)
            job += 1
    multirun_yaml(root)
    return root


def test_drift_between_rounds_hides_a_difference_from_the_bands_and_not_from_the_pairs(tmp_path):
    three = build(collect(_drifting_sweep(tmp_path / "three", 0.92, 3)))
    b = three.points[three.points["variant"] == "model.tag=b"].iloc[0]
    # three pairs: an interval sized by the noise between runs, which the drift inflates
    assert b["train_speedup_verdict"] == "inconclusive" and b["train_speedup_pairs"] == 3
    eight = build(collect(_drifting_sweep(tmp_path / "eight", 0.92, 8)))
    b = eight.points[eight.points["variant"] == "model.tag=b"].iloc[0]
    assert b["train_speedup_verdict"] == "real" and b["train_speedup_pairs"] == 8
    assert b["train_speedup_min"] <= 0.92 <= b["train_speedup_max"] < 0.95
    (decision,) = decisions(eight)
    assert decision.outcome == "regression" and "95 % CI over 8 pairs" in decision.line


def test_identical_code_ends_no_change_once_it_has_enough_pairs(tmp_path):
    comparison = build(collect(_drifting_sweep(tmp_path, 1.0, 8)))
    (decision,) = decisions(comparison)
    assert decision.outcome == "no change" and "within 5%" in decision.line


def test_the_gate_on_one_sweep_exits_1_0_or_3(tmp_path, capsys):
    def gate(root, *flags):
        with pytest.raises(SystemExit) as ended:
            report_main([str(root), "--no-write", "--fail-if-worse", "0.05", *flags])
        return ended.value.code

    assert gate(_drifting_sweep(tmp_path / "slower", 0.9, 8)) == 1
    assert "regression: model.tag=b: training" in capsys.readouterr().out
    assert gate(_drifting_sweep(tmp_path / "same", 1.0, 8)) == 0
    assert gate(_drifting_sweep(tmp_path / "short", 0.92, 3)) == 3
    # the gate leaves the sweep's own table as written (issue 34: a 0.03 gate rewrote it)
    with pytest.raises(SystemExit):
        report_main([str(tmp_path / "same"), "--no-plot"])
    table = (tmp_path / "same" / "comparison.md").read_text()
    with pytest.raises(SystemExit):
        report_main([str(tmp_path / "same"), "--fail-if-worse", "0.03"])
    assert (tmp_path / "same" / "comparison.md").read_text() == table
    # the baseline named the other way round: B is then faster, no regression
    assert gate(tmp_path / "slower", "--baseline", "model.tag=b") == 0
    # a failed variant where the baseline ran is a regression, not a pass
    failed = _drifting_sweep(tmp_path / "failed", 1.0, 2)
    write_job(failed / "1", ["+model.tag=b", "+sweep_round=0"], status="failed",
              reason="RuntimeError: boom", sweep_round=0)
    write_job(failed / "2", ["+model.tag=b", "+sweep_round=1"], status="failed",
              reason="RuntimeError: boom", sweep_round=1)
    assert gate(failed) == 1


def test_a_contended_side_against_a_quiet_one_is_still_never_a_difference(tmp_path):
    # B contended in 4 of 8 rounds: those pairs are left out; 4 pairs give no interval, and
    # the bands leave the contended samples out too
    comparison = build(collect(_drifting_sweep(tmp_path, 0.5, 8, contended_b=(0, 2, 4, 6))))
    b = comparison.points[comparison.points["variant"] == "model.tag=b"].iloc[0]
    # the 4 pairs with a contended B are left out; the 4 quiet pairs decide on the noise
    assert (b["train_speedup_pairs"], b["train_speedup_unpaired"]) == (4, 4)
    assert b["train_speedup_verdict"] in ("real", "inconclusive")
    assert b["train_band"].left_out == "contended 4/8"


def test_repeat_auto_adds_rounds_until_decided_and_runs_every_job_at_one_thread_count(tmp_path):
    # 20 % more sleep per step: a difference no CPU load can hide or fake (the steps sleep)
    done = run_harness(tmp_path, "hydra.mode=MULTIRUN", "model._target_=drifting_module.DriftingModule",
                       "+model.base_s=0.01", "+model.rate=0", "+model.factor=1.0,1.2",
                       "repeat=auto", "sweep.max_rounds=8", "sweep.threads=1", "mode=train",
                       "profiler=[speed]", "data.train_batches=16", "hydra.sweep.dir=sweep")
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "every job at 1 torch thread(s) (sweep.threads=1)" in said
    assert "repeat=auto: rounds of the 2 point(s)" in said
    results = [json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("*/result.json")]
    rounds = {r["sweep_round"] for r in results}
    # at least the 6 rounds a paired interval needs, at most the cap
    assert len(results) == 2 * len(rounds) and 6 <= len(rounds) <= 8
    assert {r["threads"] for r in results} == {1}
    assert {r["torch_settings"]["num_threads"] for r in results} == {1}
    if len(rounds) < 8:  # stopped early: decided, and only as the planted truth says
        assert f"after {len(rounds)} rounds: every comparison is decided" in said
        with pytest.raises(SystemExit) as ended:
            report_main([str(tmp_path / "sweep"), "--no-write", "--fail-if-worse", "0.05"])
        assert ended.value.code == 1


def test_repeat_auto_in_a_single_run_is_refused_before_compute(tmp_path):
    done = run_harness(tmp_path, "repeat=auto")
    assert done.returncode == 2
    assert "repeat" in done.stderr and "harness -m" in done.stderr
    assert not list(tmp_path.rglob("reports"))


def _two_jobs_a_side(root, b_quiet: float, contended_rate: float):
    """Rounds 0 and 1 of A (100 ex/s) and B: one quiet job a side, the other contended."""
    for job, (tag, r, rate, flags) in enumerate([
            ("a", 0, 100.0, None), ("b", 0, b_quiet, None),
            ("b", 1, contended_rate, ["contended:train"]),
            ("a", 1, 50.0, ["contended:train"])]):
        write_job(root / str(job), [f"+model.tag={tag}", f"+sweep_round={r}"], values=steps(rate),
                  sweep_round=r, schema_version=3, flags=flags)
    multirun_yaml(root)
    return root


def test_the_direction_said_is_the_one_decided_on_the_counted_samples(tmp_path):
    # B's quiet job is 10 % slower; its contended job read fast: the all-sample medians would
    # say B is faster. What is shown and judged is the counted samples.
    comparison = build(collect(_two_jobs_a_side(tmp_path, 90.0, 150.0)))
    (decision,) = decisions(comparison)
    assert "10.0 % slower" in decision.line and decision.outcome != "improvement"


def test_one_counted_job_a_side_decides_nothing(tmp_path):
    # the band of one job is its own step spread, not the noise between processes
    (decision,) = decisions(build(collect(_two_jobs_a_side(tmp_path, 50.0, 150.0))))
    assert decision.outcome == "undecided" and "one counted job" in decision.line


def test_a_failed_baseline_leaves_the_gate_undecided(tmp_path):
    root = _drifting_sweep(tmp_path, 1.0, 2)
    for job in (0, 3):  # the two jobs of model.tag=a
        write_job(root / str(job), ["+model.tag=a", f"+sweep_round={0 if job == 0 else 1}"],
                  status="failed", reason="RuntimeError: boom", sweep_round=0 if job == 0 else 1)
    (decision,) = decisions(build(collect(root)))
    assert decision.outcome == "undecided" and "the baseline has no figure" in decision.line
    with pytest.raises(SystemExit) as ended:
        report_main([str(root), "--no-write", "--fail-if-worse", "0.05"])
    assert ended.value.code == 3


def test_a_sweeps_fastest_point_is_settled_once_decided_or_a_plateau(tmp_path):
    """What `repeat=auto` waits for in a sweep without variants (Rounds.undecided)."""
    far = build(collect(_drifting_sweep(tmp_path / "far", 0.5, 6))).fastest["train"]
    assert (far["decided"], far["settled"]) == (True, True)  # model.tag=a is 2x b
    flat = build(collect(_drifting_sweep(tmp_path / "flat", 1.0, 6, drift=0))).fastest["train"]
    assert (flat["decided"], flat["settled"]) == (False, True)  # no round would tell them apart
    close = build(collect(_drifting_sweep(tmp_path / "close", 0.95, 6))).fastest["train"]
    assert (close["decided"], close["settled"]) == (False, False)  # 5 % apart: not yet either


def test_a_code_dir_checked_before_a_sweep_forgets_only_its_own_modules(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from harness.config.composed import code_dir_imports

    tree = tmp_path / "tree"
    (tree / ".venv").mkdir(parents=True)
    (tree / "user_mod_x.py").write_text("VALUE = 1\n")
    (tree / ".venv" / "lib_in_venv_x.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(tree / ".venv"))  # a library installed inside the tree
    with code_dir_imports(OmegaConf.create({"code_dir": str(tree)})):
        import lib_in_venv_x  # noqa: F401
        import user_mod_x  # noqa: F401
    assert "user_mod_x" not in sys.modules and "lib_in_venv_x" in sys.modules
    assert str(tree) not in sys.path


def test_each_code_dir_is_checked_against_its_own_tree_before_the_started_one(tmp_path, monkeypatch):
    """A pull request that renames the class a `_target_` names: the base's tree lacks it, and
    its check must import the base's module, not the same-named one in the directory the sweep
    started in (issue 34: the sweep's check read the start directory's and let it through)."""
    from omegaconf import OmegaConf

    from harness.config.composed import code_dir_imports
    from harness.config.targets import check_targets
    from harness.errors import ConfigError

    for tree, name in (("base", "Old"), ("change", "New")):
        (tmp_path / tree / "pkg_rename_x").mkdir(parents=True)
        (tmp_path / tree / "pkg_rename_x" / "__init__.py").write_text(
            f"import lightning.pytorch as pl\n\nclass {name}(pl.LightningModule):\n    pass\n")
    monkeypatch.chdir(tmp_path / "change")
    cfg = OmegaConf.create({"model": {"_target_": "pkg_rename_x.New"}, "trainer": {"_target_": "x"},
                            "data": {}, "code_dir": str(tmp_path / "base")})
    with pytest.raises(ConfigError, match="'pkg_rename_x.New' is not valid"), \
            code_dir_imports(cfg):
        check_targets(OmegaConf.create({k: v for k, v in cfg.items() if k != "trainer"}
                                       | {"trainer": {"_target_": "lightning.pytorch.Trainer"}}))
    assert "pkg_rename_x" not in sys.modules


def test_repeat_auto_stops_after_a_round_in_which_no_job_measured(tmp_path, caplog):
    """Issue 34, wrong answer 10: every job failing the same way ran the rounds and then said
    'every comparison is decided'; the first such round now ends the sweep, and says why."""
    import logging

    from harness.config.knobs import SweepSettings
    from harness.sweep.rounds import Rounds

    for job, tag in enumerate(("a", "b")):
        write_job(tmp_path / str(job), [f"+model.tag={tag}", "+sweep_round=0"], status="failed",
                  reason="RuntimeError: mat1 and mat2 shapes cannot be multiplied", sweep_round=0)
    rounds = Rounds(SweepSettings(), tmp_path, None)
    with caplog.at_level(logging.INFO, logger="harness.sweep.rounds"):
        assert rounds.go_on() is False
    assert "no job measured its point; no more rounds" in caplog.text
    assert "decided" not in caplog.text


def test_repeat_auto_builds_the_comparison_only_once_a_round_can_end_the_sweep(tmp_path, monkeypatch):
    """Before MIN_ROUNDS no verdict can stop the sweep: go_on reads the jobs, builds no table."""
    from harness.config.knobs import MIN_ROUNDS, SweepSettings
    from harness.sweep import rounds as rounds_module
    from harness.sweep import table

    for job, tag in enumerate(("a", "b")):
        write_job(tmp_path / str(job), [f"+model.tag={tag}", "+sweep_round=0"], values=steps(100.0),
                  sweep_round=0)
    built = []
    monkeypatch.setattr(table, "build", lambda *args, **kwargs: built.append(1) or build(*args, **kwargs))
    rounds = rounds_module.Rounds(SweepSettings(), tmp_path, None)
    for _ in range(MIN_ROUNDS - 1):
        assert rounds.go_on() is True
    assert built == []
    rounds.go_on()
    assert built == [1]
