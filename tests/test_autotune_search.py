"""autotune's search core against planted landscapes (tests/autotune_landscape.py): no Hydra,
no torch, milliseconds a search. The real jobs are tests/test_autotune.py's."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest
from autotune_landscape import DEFAULTS, GRID, PLANTED_BEST, Landscape, drive, step_ms

from harness.autotune.search import Search
from harness.autotune.settings import Budget, Settings, job_budget
from harness.autotune.space import Key, Space, check_space, role_of
from harness.autotune.verdict import line, summary
from harness.errors import ConfigError
from harness.measured import duration

CORE = ("space", "settings", "outcome", "score", "knowledge", "fit", "screen", "halving", "search",
        "verdict")


def space(**values: str) -> Space:
    keys = []
    for name, typed in values.items():
        role = role_of(name, Settings().loader_keys)
        if typed.startswith("interval("):
            lo, hi = typed[len("interval("):-1].split(",")
            keys.append(Key(name, role, DEFAULTS[name], interval=(int(lo), int(hi))))
        else:
            keys.append(Key(name, role, DEFAULTS[name], values=tuple(typed.split(","))))
    return Space(tuple(keys))


def run(settings: Settings | None = None, grid: dict | None = None, **planted):  # noqa: ANN201
    search = Search(space(**(grid or GRID)), settings or Settings())
    land = Landscape(**planted)
    body, waves = drive(search, land)
    return body, waves, land, search


def decisions(body: dict) -> list[dict]:
    return [d for s in body["stages"] for d in s["decisions"]]


# the one judge of differences and the reader of measured numbers: the standard library only
STDLIB_JUDGE = ("harness.judge", "harness.measured")
# The one check of settings (issue 29), standard library only (tests/test_config_compose.py).
STDLIB_CHECK = ("harness.config.checks", "harness.errors")


def test_the_judge_imports_only_the_standard_library():
    root = Path(__file__).resolve().parent.parent / "src"
    for module in STDLIB_JUDGE:
        tree = ast.parse((root / (module.replace(".", "/") + ".py")).read_text())
        for node in ast.walk(tree):
            names = ([node.module] if isinstance(node, ast.ImportFrom) else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                assert name in ("__future__", *STDLIB_JUDGE) or name.split(".")[0] in (
                    "collections", "dataclasses", "math", "random", "statistics", "typing"), (
                    module, name)


def test_the_core_imports_only_the_standard_library_and_itself():
    root = Path(__file__).resolve().parent.parent / "src" / "harness" / "autotune"
    for name in CORE:
        tree = ast.parse((root / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module in ("__future__", *STDLIB_JUDGE, *STDLIB_CHECK) or node.module.startswith(
                    "harness.autotune.") or node.module.split(".")[0] in (
                    "collections", "dataclasses", "itertools", "math", "statistics", "typing"), (
                    name, node.module)
                if node.module.startswith("harness.autotune."):
                    assert node.module.rsplit(".", 1)[1] in CORE, (name, node.module)
            elif isinstance(node, ast.Import):
                assert all(a.name in ("math", "statistics") for a in node.names), name


@pytest.mark.parametrize("seed", range(8))
def test_names_the_planted_best_in_a_third_of_the_grid(seed):
    body, _, _, _ = run(seed=seed)
    assert body["best"] == PLANTED_BEST
    assert body["jobs"] <= body["grid_points"] / 3, body["jobs"]
    assert body["largest_batch_that_fits"] == 128 and body["first_oom_batch"] == 256
    assert body["speedup"]["confirmed"] and body["speedup"]["low"] > 1.5
    assert body["command"] == "harness batch_size=64 precision=bf16 data.num_workers=2"
    # within the budget (auto: a third of the grid); compile=true (3 s over 10,000 planned steps:
    # 1.5 % slower) is never shown the same as compile=false within 5 % on the pairs a third of the
    # grid buys, so the halving may run until the budget ends it, its confirm stage kept
    assert body["status"] == "done" or body["stopped"].startswith("stopped by the budget before stage s")
    assert body["best_trusted"] and body["speedup"]["trusted"]


def test_never_launches_above_a_known_oom():
    _, _, land, search = run()
    for i, job in enumerate(land.launched):
        for earlier in search.records[:i]:
            if earlier.outcome.oom and search.space.memory_twin(earlier.job.candidate,
                                                                job.candidate):
                assert int(job.candidate["batch_size"]) < int(earlier.job.candidate["batch_size"])


def test_every_decision_says_why():
    body, *_ = run()
    assert all(d["why"] for d in decisions(body))
    dropped = [d for d in decisions(body) if d["action"] == "dropped"]
    assert dropped and all("slower" in d["why"] or "spread" in d["why"] for d in dropped)


def test_the_confirm_stage_alternates_winner_and_default_in_fresh_jobs():
    _, waves, *_ = run()
    confirm = waves[-1]
    assert confirm.stage == "confirm"
    assert [j.candidate["batch_size"] for j in confirm.jobs] == ["64", "32", "32", "64", "64", "32"]
    assert [j.round for j in confirm.jobs] == [0, 0, 1, 1, 2, 2]


def test_loader_keys_that_do_not_matter_cost_no_job():
    body, _, land, _ = run(fetch_scale=0.0)  # no fetch cost: the step is the model's alone
    assert not any(j.candidate["data.num_workers"] != "0" for j in land.launched)
    assert body["best"]["data.num_workers"] == "0"
    assert any(d["action"] == "collapsed" and "does not matter" in d["why"]
               for d in decisions(body))


@pytest.mark.parametrize(("planned", "expect"), [(100, "false"), (1_000_000, "true")])
def test_compile_is_charged_its_compile_time_over_the_planned_steps(planned, expect):
    # compiled steps are 20% quicker, but compiling takes 30 s
    body, *_ = run(Settings(planned_steps=planned), compile_gain=0.8, compile_s=30.0)
    assert body["best"]["compile"] == expect


def test_an_invalid_value_never_wins():
    body, *_ = run(invalid={"precision=bf16"})
    assert body["best"]["precision"] == "fp32"
    assert any(why.startswith("invalid") for why in body["infeasible"].values())


def test_every_candidate_infeasible_names_why():
    body, *_ = run(max_fit=0)
    assert body["status"] == "infeasible" and body["best"] is None
    verdict = line(body)
    assert verdict.startswith("autotune: no candidate is feasible")
    assert "batch_size=4 " in verdict and "out of memory" in verdict


def test_a_warm_up_job_keeps_a_cold_first_job_out_of_the_figures():
    # in one process the first job pays the cold start; here it runs 10x slower
    body, waves, *_ = run(Settings(warmup_job=True), cold_first=10.0)
    assert waves[0].stage == "warmup" and waves[1].jobs[0].candidate == waves[0].jobs[0].candidate
    assert body["best"] == PLANTED_BEST and body["noise"] < 0.05
    assert body["jobs"] <= body["grid_points"] / 3
    cold, *_ = run(Settings(warmup_job=False), cold_first=10.0)
    assert cold["noise"] > 0.3  # the calibration reads the cold start as job-to-job noise


def test_a_start_that_does_not_fit_walks_the_batch_down():
    body, waves, *_ = run(max_fit=20)
    fit = [j.candidate["batch_size"] for w in waves if w.stage == "fit" for j in w.jobs]
    assert fit[:3] == ["32", "16", "32"] or fit[:2] == ["32", "16"]
    assert body["largest_batch_that_fits"] == 16 and body["first_oom_batch"] == 32
    assert body["best"]["batch_size"] in ("8", "16")


def test_a_noisy_candidate_gets_more_steps_never_a_verdict():
    # the planted best's probe is noisy: an alternate, measured longer, and it still wins
    body, *_ = run(untrusted={"data.num_workers=2": 1})
    assert body["best"] == PLANTED_BEST
    assert any("untrusted probe (noisy)" in d["why"] for d in decisions(body))


def test_noise_that_outlasts_the_budget_is_said_not_hidden():
    body, *_ = run(untrusted={"data.num_workers=2": 4})
    assert body["best"]["data.num_workers"] != "2"  # never chosen on untrusted figures
    assert any(d["action"] in ("retry", "dropped") and "noisy" in d["why"]
               for d in decisions(body))


def test_a_candidate_noisy_every_time_is_dropped_not_chosen():
    body, *_ = run(Settings(budget=Budget(jobs=None)), untrusted={"data.num_workers=2": 99})
    assert body["best"]["data.num_workers"] != "2"
    assert any("no verdict can rest on it" in d["why"] for d in decisions(body))


def test_every_job_untrusted_gives_no_verdict_and_says_so():
    body, *_ = run(untrusted={"compile=false": 999, "compile=true": 999})
    assert body["best_trusted"] is False
    assert "not a verdict" in line(body)


def test_the_budget_is_never_exceeded_and_the_verdict_says_how_sure():
    body, *_ = run(Settings(budget=Budget(jobs=14)))
    assert body["jobs"] <= 14
    assert body["status"] == "budget"
    assert body["stopped"].startswith("stopped by the budget")
    assert body["sure"]
    assert "stopped by the budget" in line(body)


def test_a_minutes_budget_stops_before_a_wave_that_would_pass_it():
    body, *_ = run(Settings(budget=Budget(minutes=0.5)))
    assert body["wall_seconds"] <= 30
    assert body["status"] == "budget"


def test_interrupted_keeps_the_best_so_far():
    search = Search(space(**GRID), Settings())
    land = Landscape()
    wave = search.start()
    for _ in range(8):
        wave = search.advance([land.run(j) for j in wave.jobs])
    search.interrupt()
    body = summary(search)
    assert body["status"] == "interrupted" and body["best"] is not None
    assert line(body).startswith("best so far: ")


def test_a_job_that_did_not_end_stops_the_search_as_interrupted():
    from harness.autotune.outcome import Outcome

    search = Search(space(**GRID), Settings())
    land = Landscape()
    wave = search.start()
    wave = search.advance([land.run(j) for j in wave.jobs])
    assert search.advance([Outcome("missing", "no result.json")]) is None
    assert search.status == "interrupted" and "did not end" in search.stop_reason


def test_replaying_the_jobs_gives_the_same_verdict():
    body, _, _, search = run()
    recorded = {(r.job.candidate, r.job.stage, r.job.round): r.outcome for r in search.records}
    again = Search(search.space, search.settings)
    wave = again.start()
    while wave is not None:
        wave = again.advance([recorded[(j.candidate, j.stage, j.round)] for j in wave.jobs],
                             search.elapsed_s)
    assert summary(again) == body


def test_stage_mode_submits_the_ladder_as_one_wave():
    body, waves, *_ = run(Settings(probes="stage"))
    assert body["best"] == PLANTED_BEST
    assert [(j.candidate["batch_size"], j.round) for j in waves[0].jobs] == [
        ("32", 0), ("64", 0), ("128", 0), ("256", 0), ("32", 1)]  # the ladder and calibration
    # each stage one wave (the screen: one per key searched)
    stages = [w.stage for w in waves]
    assert stages.count("fit") == 1 and stages.count("recheck") <= 1
    assert stages.count("screen") <= 3 and stages.count("confirm") == 1


def test_interval_batch_sizes_are_searched_as_integers_with_bisection():
    grid = {**GRID, "batch_size": "interval(8,200)"}
    body, _, land, _ = run(grid=grid, max_fit=150)
    assert body["first_oom_batch"] - body["largest_batch_that_fits"] <= 8
    assert body["largest_batch_that_fits"] <= 150 < body["first_oom_batch"]
    assert all(str(int(j.candidate["batch_size"])) == j.candidate["batch_size"]
               for j in land.launched)


def test_objective_inference_ranks_by_inference():
    # inference has no worker cost to hide and a third of the compute: bigger batches pay
    body, *_ = run(Settings(objective="inference"), knee=512)
    assert body["objective"] == "inference"
    assert body["best"]["batch_size"] == "128"


def test_objective_both_ranks_by_the_geometric_mean():
    body, *_ = run(Settings(objective="both"))
    assert body["objective"] == "both" and body["best"] is not None


def test_a_space_of_one_point_is_bad_input():
    with pytest.raises(ValueError, match="one point"):
        check_space(space(batch_size="32", precision="fp32"))
    with pytest.raises(ValueError, match="positive integers"):
        check_space(space(batch_size="0,8"))


def test_settings_refuse_an_unknown_key_or_a_bad_value():
    with pytest.raises(ConfigError, match="autotune.objectiv"):
        Settings.from_mapping({"objectiv": "training"})
    with pytest.raises(ConfigError, match="autotune.objective"):
        Settings.from_mapping({"objective": "latency"})
    with pytest.raises(ConfigError, match="autotune.budget.jobs"):
        Settings.from_mapping({"budget": {"jobs": 3}})
    with pytest.raises(ConfigError, match="autotune.keep"):
        Settings.from_mapping({"keep": 1.5})


def test_the_auto_job_budget_is_a_third_of_the_grid():
    assert job_budget(Budget(), 84) == 28 and job_budget(Budget(), 30) == 20
    assert job_budget(Budget(jobs=None), 84) is None


def test_exact_ties_go_to_the_simpler_setting():
    # compile buys exactly nothing and costs almost nothing: at 2% noise the answer is the
    # simplest of the ties (no compile) every time
    wins = sum(run(seed=seed, noise=0.02, compile_s=0.01)[0]["best"] == PLANTED_BEST
               for seed in range(40))
    assert wins >= 39


def test_the_ci_landscape_is_named_at_the_noise_of_a_loaded_machine():
    # A point is beyond another only when its whole interval is past min_gain (harness.judge
    # .decide); at 10 % noise a few seeds leave batch 64 tied with 32 and name the simpler.
    right, jobs = 0, []
    for seed in range(60):
        body, *_ = run(Settings(planned_steps=300), seed=seed, noise=0.10)
        right += body["best"] == PLANTED_BEST
        jobs.append(body["jobs"])
    assert right >= 57 and max(jobs) <= 28


class FlatLandscape(Landscape):
    """Every setting runs as many examples a second: no candidate is faster than another."""

    def train_ms(self, b: int, precision: str, workers: int, compiled: bool) -> float:
        return 0.25 * b


def _named(body: dict) -> list[dict]:
    return [body["best"], *((body["tie"] or {}).get("with") or [])]


def test_a_flat_landscape_searched_twice_names_the_same_winner_or_each_tie_holds_the_other():
    """Wrong answer 8 of issue 29: a candidate is dropped only on the judge's evidence, so
    two searches of one landscape agree, and when nothing is faster the default stands."""
    bodies = []
    for seed in range(12):
        search = Search(space(**GRID), Settings(planned_steps=300))
        bodies.append(drive(search, FlatLandscape(seed=seed, noise=0.05, compile_s=0.0))[0])
    for first, second in itertools.combinations(bodies, 2):
        assert first["best"] == second["best"] or (
            first["best"] in _named(second) and second["best"] in _named(first))
    stood = [b for b in bodies if b["best"] == b["default"]]
    assert len(stood) >= 11, [b["best"] for b in bodies]


def test_a_winner_the_confirm_stage_cannot_tell_from_the_default_leaves_the_default():
    """Wrong answer 5 of issue 29: no no-op is crowned; the line says the default stands."""
    for seed in range(6):
        search = Search(space(**GRID), Settings(planned_steps=300))
        body, *_ = drive(search, FlatLandscape(seed=seed, noise=0.05, compile_s=0.0))
        if body["default_stands"] is None:
            continue
        assert body["best"] == body["default"]
        assert body["command"] == "harness"
        assert "the default stands" in line(body) and "not beyond the noise" in line(body)
        assert body["default_stands"] != body["default"]
        break
    else:
        raise AssertionError("no search reached a confirm stage that could not tell")


# -- issue 34 -----------------------------------------------------------------------------------
TWINS = {"batch_size": "64,128,256,512", "precision": "fp32,bf16", "compile": "false,true"}
COMPILED = {"batch_size": "64", "precision": "bf16", "compile": "true"}


def twins_space() -> Space:
    start = {"batch_size": "64", "precision": "fp32", "compile": "false"}
    return Space(tuple(Key(name, role_of(name, Settings().loader_keys), start[name],
                           values=tuple(values.split(","))) for name, values in TWINS.items()))


def test_a_rare_outlier_does_not_turn_the_answer_of_two_searches():
    """Wrong answer 7 of issue 34: the issue's space, where compiling batch 64 in bf16 is 10 %
    faster than its eager twin (and compiling costs nothing), one job in 15 reading 20 % high.
    Each search compares the twins on the rounds they ran side by side; two searches name the
    same winner, or each one's tie holds the other's."""
    eager = step_ms(64, "bf16", 0) + Landscape.host_ms
    gain = (eager / 1.10 - Landscape.host_ms) / step_ms(64, "bf16", 0)  # compiled: 10 % faster
    bodies, outliers = [], 0
    for seed in range(10):
        land = Landscape(seed=seed, noise=0.02, fetch_scale=0.0, compile_gain=gain, compile_s=0.0,
                         outlier_every=15, outlier=1.2)
        body, _ = drive(Search(twins_space(), Settings(budget=Budget(jobs=30))), land)
        bodies.append(body)
        outliers += sum(1 for j in land.outliers if j.stage[1:].isdigit()
                        and j.candidate.as_dict()["batch_size"] == "64")
    assert outliers >= 3  # the outliers did land among the twins' side-by-side jobs
    for first, second in itertools.combinations(bodies, 2):
        assert first["best"] == second["best"] or (
            first["best"] in _named(second) and second["best"] in _named(first)), (first, second)
    assert all(b["best"] == COMPILED for b in bodies), [b["best"] for b in bodies]
    # where the pairs did not prove the 10 % beyond autotune.min_gain, the tie is said, and why
    # the faster won it: its estimated gain is past min_gain
    tied = [b for b in bodies if b["tie"]]
    assert all("a tie: ahead of the simpler ones within spread by more than autotune.min_gain"
               in line(b) for b in tied)


def test_a_small_budget_is_sized_before_any_job_and_spent_whole():
    """Wrong answer 9 of issue 34: autotune.budget.jobs=10 on a 44-point space said nothing
    before its jobs, ran 4 and stopped "before fit", six unspent, its time the jobs' sum."""
    grid = {"batch_size": "1,2,4,8,16,32,64,128,256,512,1024", "precision": "fp32,bf16",
            "compile": "false,true"}
    search = Search(space(**grid), Settings(budget=Budget(jobs=10)))
    assert search.space.grid_points() == 44
    assert search.budget_line() == (
        "10 jobs (autotune.budget.jobs=10): 2 for the fit ladder (of the 7 for batch_size=32 up to"
        " 1024 and the calibration), 2 for the screen (one per other value of precision, compile),"
        " 6 kept for the confirm stage, 0 for the recheck and the halving;"
        " autotune.budget.jobs=15 climbs the whole ladder")
    land, elapsed = Landscape(), 0.0
    wave = search.start()
    while wave is not None:
        outcomes = [land.run(job) for job in wave.jobs]
        elapsed += 4.0 + max(o.job_seconds for o in outcomes)  # the sweep's wall, not the jobs' sum
        wave = search.advance(outcomes, elapsed)
    body = summary(search)
    assert body["jobs"] == 10
    assert [s["name"] for s in body["stages"] if s["jobs"]] == ["fit", "screen", "confirm"]
    assert body["best"]["precision"] == "bf16" and body["speedup"]["confirmed"]
    assert body["wall_seconds"] == elapsed != body["job_seconds"]
    assert f"in 10 jobs ({body['points_tried']} of 44 points), {duration(elapsed)} [" in line(body)
    with pytest.raises(ConfigError, match=r"autotune.budget.jobs=8 is not valid: expected at least"
                       r" 9 here: .*Fix: autotune.budget.jobs=9"):
        Search(space(**grid), Settings(budget=Budget(jobs=8))).budget_line()


def test_a_default_outside_the_space_shows_its_confirm_figure():
    """A default batch size outside the values searched runs only in the confirm stage: the
    points table showed it with no figure ('-') though its jobs had measured it."""
    body, *_ = run(Settings(planned_steps=300), grid={"batch_size": "16,64,128", "precision": "fp32,bf16",
                                                      "compile": "false"})
    default = next(p for p in body["points"] if p["candidate"] == body["default"])
    assert default["stages"] == ["confirm"] and default["status"] == "ok"
    assert default["figure"] is not None and default["figure"]["jobs"] >= 1


def test_a_small_budget_runs_the_halving_the_confirm_stage_can_spare():
    """Outside code (Lightning's BoringModel, autotune.budget.jobs=12, precision=fp32,bf16): 4
    jobs, then "stopped by the budget before stage s1", fp32 and bf16 tied and 8 jobs unspent,
    kept for a confirm stage that never ran (the default won). The halving now gets all but the
    confirm stage's least (two rounds); on a flat landscape the default still stands."""
    grid = {"precision": "fp32,bf16", "compile": "false,true"}
    for seed in range(8):
        search = Search(space(**grid), Settings(budget=Budget(jobs=12), planned_steps=300))
        body, _ = drive(search, FlatLandscape(seed=seed, noise=0.05, compile_s=0.0))
        ran = {s["name"]: s["jobs"] for s in body["stages"] if s["jobs"]}
        assert ran.get("s1", 0) >= 4 and body["jobs"] >= 12 - 4, (seed, ran)
        assert body["best"] == body["default"], (seed, body["best"])
