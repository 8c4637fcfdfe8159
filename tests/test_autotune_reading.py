"""autotune's readers, on hand-made files: a job's result.json as the search reads it (issue
#20's trust flags, the robust step, the compile charge, a rank's OOM), the command line as a
space, each job's overrides, and a sweep's points pooled into one cell of the table."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.autotune.command_line import Here, SpaceError, adapt, parse
from harness.autotune.job import Shape, overrides
from harness.autotune.knowledge import Job
from harness.autotune.reading import elapsed, outcome_of
from harness.autotune.replay import Setup, replay
from harness.autotune.search import Search
from harness.autotune.settings import Settings
from harness.autotune.space import ABSENT, BATCH, LOADER, Candidate, Key, Space
from harness.errors import ConfigError
from harness.measured import sample_of
from harness.result.jobs import settings_of
from harness.result.schema import Diagnosis, RunResult
from harness.result.store import write_result

TRAIN = {"train_seconds_per_iteration": 0.02, "train_examples_per_second": 1600.0,
         "train_median_step_s": 0.016, "train_first_step_s": 0.5}


def _job(tmp_path: Path, name: str = "0", **fields) -> Path:
    job_dir = tmp_path / name
    fields.setdefault("status", "ok")
    fields.setdefault("metrics", dict(TRAIN))
    write_result(job_dir, RunResult(**fields))
    return job_dir


def test_a_job_reads_as_its_own_examples_per_second(tmp_path):
    """One figure per point (issue 34): the window's s/it, as result.json and the table say it."""
    outcome = outcome_of(_job(tmp_path), "training")
    phase = outcome.phases["train"]
    assert phase.seconds_per_step == pytest.approx(0.02)  # <phase>_seconds_per_iteration
    assert phase.examples_per_step == pytest.approx(32.0)  # s/it x examples/s
    assert outcome.trusted and outcome.compile_charge_s == 0.0


def test_a_thin_phase_counts_as_it_does_in_the_table(tmp_path):
    """One judge (harness.judge): a phase on few steps counts, its own spread says how
    rough it is; only contended or noisy samples count for nothing, in autotune as in the
    table."""
    outcome = outcome_of(_job(tmp_path, flags=["thin:train"]), "training")
    assert outcome.trusted and outcome.why == ()
    assert sample_of(TRAIN, ["thin:train"], "train").counted


@pytest.mark.parametrize("flag", ["noisy", "contended"])
def test_a_flagged_phase_is_untrusted_and_says_why(tmp_path, flag):
    outcome = outcome_of(_job(tmp_path, flags=[f"{flag}:train"]), "training")
    assert not outcome.trusted and outcome.why == (flag,)
    assert outcome.measured  # its figures are kept, shown, never ranked on


def test_a_flag_of_another_phase_leaves_the_objective_trusted(tmp_path):
    assert outcome_of(_job(tmp_path, flags=["contended:inference"]), "training").trusted


def test_every_phase_swallowed_by_warmup_has_no_figures(tmp_path):
    outcome = outcome_of(_job(tmp_path, flags=["warmup_swallowed:train"]), "training")
    assert outcome.infeasible and outcome.status == "failed"


def test_a_partial_job_without_the_objectives_phase_is_infeasible(tmp_path):
    job = _job(tmp_path, status="partial", phase_errors={"inference": "predict broke"})
    assert outcome_of(job, "both").status == "failed"
    assert outcome_of(job, "both").reason == "predict broke"
    assert outcome_of(job, "training").measured


def test_compile_is_charged_the_larger_of_its_counter_and_the_first_steps_excess(tmp_path):
    metrics = {**TRAIN, "compile_time_s": 0.2}
    outcome = outcome_of(_job(tmp_path, metrics=metrics, knobs={"compile": "default"}), "training")
    assert outcome.compile_charge_s == pytest.approx(0.5 - 0.016)
    metrics["compile_time_s"] = 3.0
    outcome = outcome_of(_job(tmp_path, "1", metrics=metrics, knobs={"compile": "default"}),
                         "training")
    assert outcome.compile_charge_s == 3.0


def test_an_oom_on_another_rank_is_an_oom_of_the_point(tmp_path):
    """Rank 0 folds how each rank ended into result.json; the search reads it there."""
    from harness.launch.rank_processes import RankEnding, merge_rank_endings

    result = RunResult(status="failed", reason="collective timed out", metrics=dict(TRAIN))
    merge_rank_endings(result, [RankEnding(1, "oom", "CUDA OOM")])
    write_result(tmp_path / "0", result)
    outcome = outcome_of(tmp_path / "0", "training")
    assert outcome.oom and outcome.reason == "on rank 1: CUDA OOM"


def test_missing_and_unreadable_results_are_unknown_not_failures(tmp_path):
    (tmp_path / "0").mkdir()
    assert outcome_of(tmp_path / "0", "training").unknown
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "result.json").write_text('{"status": "ok", "metr')
    assert outcome_of(tmp_path / "1", "training").status == "unreadable"


def test_the_diagnosis_and_the_clock_are_read(tmp_path):
    job = _job(tmp_path, diagnosis=Diagnosis(bound_by="data", verdict="", train_data_share=0.4,
                                             flop_convention=""),
               started_at="2026-01-01T00:00:00+00:00", duration_s=10.0)
    outcome = outcome_of(job, "training")
    assert outcome.bound_by == "data" and outcome.data_share == 0.4
    start = outcome.ended_at - 10.0
    assert elapsed(start - 5.0, [outcome]) == pytest.approx(15.0)


def _config() -> object:
    return OmegaConf.create({"batch_size": 32, "precision": "fp32", "compile": False,
                             "model": {"depth": 2, "lr": 0.001}, "trainer": {"devices": 1},
                             "data": {"num_workers": 0, "train_batches": 8}})


def _parse(*arguments: str, params: dict | None = None, here: Here | None = None):  # noqa: ANN202
    return parse(params, list(arguments), _config(), Settings(), here or Here(cpus=4))


def test_the_command_line_makes_the_space_and_the_fixed_overrides():
    parsed = _parse("sweep=autotune", "batch_size=8,16", "precision=choice(fp32,bf16)",
                    "compile=false,true", "model.depth=range(1,4)", "~model.lr")
    assert [(k.name, k.values, k.default) for k in parsed.space.keys] == [
        ("batch_size", ("8", "16"), "32"), ("precision", ("fp32", "bf16"), "fp32"),
        ("compile", ("false", "true"), "false"), ("model.depth", ("1", "2", "3"), "2")]
    assert parsed.fixed == ["sweep=autotune", "~model.lr"]


def test_a_list_on_the_command_line_replaces_its_own_line_of_the_default_space():
    params = {"batch_size": "1,2,4", "precision": "fp32,bf16", "compile": "false,true"}
    parsed = _parse("batch_size=8,16", params=params)
    assert [(k.name, k.values) for k in parsed.space.keys] == [
        ("precision", ("fp32", "bf16")), ("compile", ("false", "true")), ("batch_size", ("8", "16"))]
    # a single value fixes its key; the other lines stay
    parsed = _parse("precision=bf16", params=params)
    assert [k.name for k in parsed.space.keys] == ["batch_size", "compile"]
    assert parsed.fixed == ["precision=bf16"]
    # issue 29's user: `+data.num_workers=0,2` meant that line, with the default space around it
    parsed = _parse("+data.num_workers=0,2", params={**params, "data.num_workers": "0,2,4,8"})
    assert {k.name: k.values for k in parsed.space.keys} == {
        "batch_size": ("1", "2", "4"), "precision": ("fp32", "bf16"),
        "compile": ("false", "true"), "+data.num_workers": ("0", "2")}


def test_an_integer_interval_is_kept_as_bounds():
    key = _parse("batch_size=interval(8,200)").space.keys[0]
    assert key.interval == (8, 200) and key.listed() == ("8", "16", "32", "64", "128", "200")


@pytest.mark.parametrize(("arguments", "says"), [
    (("batch_size=32",), "the space holds one point"),
    (("model.depht=2,4",), "model.depht is not a key of the config"),
    (("model.lr=interval(0.0001,0.01)",), "not a float range"),
    (("batch_size=0,8",), "batch sizes are positive integers"),
    (("batch_size=8,inf",), "batch_size=inf: batch sizes are positive integers"),  # not an OverflowError
    (("batch_size=8,nan",), "batch_size=nan: batch sizes are positive integers"),
    (("batch_size=8,16", "trainer.max_steps=5"), "trainer.max_steps: autotune sets it"),
    (("batch_size=8,16", "repeat=3"), "repeat: autotune sets it"),
    (("precision=fp16,fp32",), "precision='fp16' is not valid: expected a precision this machine"
                               " runs: it has no GPU"),
])
def test_bad_spaces_are_one_line_naming_the_key(arguments, says):
    with pytest.raises((SpaceError, ConfigError), match=says.replace("(", r"\(")):
        _parse(*arguments)


def test_the_default_space_is_fitted_to_the_machine_and_the_data():
    params = {"batch_size": "16,32,64", "precision": "fp32,bf16,fp16", "compile": "false,true",
              "data.num_workers": "0,2,4,8"}
    parsed = _parse(params=params, here=Here(cuda=False, cxx=False, cpus=4))
    by_name = {k.name: k.values for k in parsed.space.keys}
    assert by_name == {"batch_size": ("16", "32", "64"), "precision": ("fp32", "bf16"),
                       "compile": ("false",), "data.num_workers": ("0", "2", "4")}
    assert any("fp16 runs only on CUDA" in n for n in parsed.notes)
    assert any("no C++ compiler" in n for n in parsed.notes)
    # typed on the command line, the same values are taken as they are, or refused
    with pytest.raises(ConfigError, match="compile='true' is not valid: expected compile=false"
                       " here: no C"):
        _parse("compile=false,true", "batch_size=8,16", here=Here(cxx=False))
    slurm = _parse(params=params, here=Here(here=False))
    assert {k.name: k.values for k in slurm.space.keys}["precision"] == ("fp32", "bf16", "fp16")
    # a line none of whose values runs here is left out, said in its note (it was a ValueError)
    few = _parse("batch_size=8,16", params={"data.num_workers": "interval(8,16)"}, here=Here(cpus=4))
    assert [k.name for k in few.space.keys] == ["batch_size"]
    assert "data.num_workers: 8, 16 left out of the default space: a job has 4 CPUs" in few.notes


def test_loader_workers_are_left_out_where_the_data_config_has_none():
    """Issue 29: the default space on a data config without num_workers stopped with
    `data.num_workers is not a key of the config`; docs/autotune.md says the line is left out."""
    config = OmegaConf.create({"batch_size": 32, "precision": "fp32", "compile": False, "data": {}})
    params = {"batch_size": "8,16", "data.num_workers": "0,2,4,8"}
    parsed = parse(params, [], config, Settings(), Here(cpus=4))
    assert [k.name for k in parsed.space.keys] == ["batch_size"]
    assert any("no num_workers" in note for note in parsed.notes), parsed.notes
    # typed on the command line, a key the config lacks is still refused
    with pytest.raises(SpaceError, match="data.num_workers is not a key of the config"):
        parse(params, ["data.num_workers=0,2"], config, Settings(), Here(cpus=4))
    key = _parse("data.num_workers=0,2,8", "batch_size=8,16").space.key("data.num_workers")
    assert adapt(key, Here(cpus=4), notes := []).values == ("0", "2") and "4 CPUs" in notes[0]


def test_a_jobs_overrides_say_how_it_is_measured():
    job = Job(Candidate((("batch_size", "64"), ("data.num_workers", "2"))), "s1", 1, 20, 3)
    listed = overrides(job, ["sweep=autotune", "data.train_batches=8"], Settings(),
                       Shape(train_batches=8, workers=0, prefetch=2))
    assert listed == ["sweep=autotune", "batch_size=64", "data.num_workers=2", "mode=train",
                      "profiler.speed.warmup_steps=7", "trainer.max_epochs=-1",
                      "trainer.limit_val_batches=0", "trainer.max_steps=27",
                      "data.train_batches=27", "repeat=1", "+sweep_round=1",
                      "+autotune_stage=s1"]  # warm-up: 3 + 2 workers x prefetch 2
    # with accumulation the speed preset measures optimizer steps (its warm-up: 7 batches
    # rounded up to 2 whole steps of 4): 2 + 20 of them, in 22 x 4 batches
    both = overrides(job, [], Settings(objective="both"), Shape(accumulate=4, train_batches=8))
    assert "trainer.max_steps=22" in both and "trainer.limit_predict_batches=27" in both
    assert "data.train_batches=88" in both


def test_the_replay_reads_each_jobs_point_stage_and_round_from_its_overrides(tmp_path):
    space = Space((Key("batch_size", BATCH, "32", values=("32", "64")),
                   Key("+data.num_workers", LOADER, ABSENT, values=("0", "2"))))
    settings = Settings(probes="stage")  # one wave: the ladder and the start's round 1 (the calibration)
    Setup(space, settings).write(tmp_path)
    wave = Search(space, settings).start()
    assert [j.round for j in wave.jobs] == [0, 0, 1]
    for n, job in enumerate(wave.jobs):
        _job(tmp_path, str(n), overrides=overrides(job, ["sweep=autotune"], settings, Shape()))
    (tmp_path / "other").mkdir()  # a job of another sweep: not one of the search's
    write_result(tmp_path / "other", RunResult(status="ok", overrides=["batch_size=32"]))
    search, _ = replay(tmp_path)
    assert [(r.job.candidate, r.job.stage, r.job.round) for r in search.records] == [
        (j.candidate, j.stage, j.round) for j in wave.jobs]
    assert search.status == "interrupted"  # the next wave's jobs are not on disk


def test_a_points_probe_and_confirm_jobs_pool_into_one_cell():
    probe = ["sweep=autotune", "batch_size=64", "mode=train", "trainer.max_steps=13",
             "profiler.speed.warmup_steps=3", "repeat=1", "+sweep_round=0",
             "+autotune_stage=fit"]
    confirm = [o.replace("13", "23").replace("fit", "confirm") for o in probe]
    assert settings_of(probe) == settings_of(confirm) == {"sweep": "autotune", "batch_size": "64"}
    # outside autotune, the same keys are settings of the point
    assert settings_of(["mode=train", "batch_size=64"]) == {"mode": "train", "batch_size": "64"}


def test_the_sweeper_plugin_loads_nothing_heavy_when_hydra_scans_it():
    import subprocess
    import sys

    probe = ("import sys, hydra_plugins.harness_launcher.autotune_sweeper\n"
             "print([m for m in ('torch', 'lightning', 'pydantic', 'harness.autotune.search')"
             " if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_mlflow_parent_run_gets_the_verdict_and_the_speed_up():
    from harness.tracking.sweep_summary import tracking_summary

    body = {"objective": "training", "status": "done", "stopped": None,
            "best": {"batch_size": "64", "precision": "bf16"}, "best_trusted": True,
            "default": {"batch_size": "32", "precision": "fp32"}, "tie": None,
            "speedup": {"value": 2.0, "low": 1.8, "high": 2.2, "confirmed": True,
                        "within_spread": False, "trusted": True},
            "jobs": 14, "points_tried": 9, "grid_points": 20, "job_seconds": 30.0,
            "wall_seconds": 31.0, "noise": 0.03, "largest_batch_that_fits": 128,
            "command": "harness batch_size=64 precision=bf16", "infeasible": {}}
    params, metrics, tags = tracking_summary(body)
    assert params == {"autotune.best.batch_size": "64", "autotune.best.precision": "bf16",
                      "autotune.objective": "training"}
    assert metrics["best_train_speedup"] == 2.0 and metrics["best_train_speedup_min"] == 1.8
    assert metrics["autotune_largest_batch_that_fits"] == 128.0
    assert tags["autotune.verdict"].startswith("best: batch_size=64 precision=bf16: 2.00x")
    assert tags["autotune.command"] == "harness batch_size=64 precision=bf16"


@pytest.mark.parametrize("searched", [True, False])
def test_an_autotune_sweeps_table_leaves_the_best_to_autotunes_verdict(tmp_path, searched):
    """Wrong answer 7 of issue 34: the table pooled each autotune point's jobs over stages run
    minutes apart and marked its own best under autotune's verdict. An autotune sweep's table
    marks no best and names no fastest point: autotune's verdict does, on the jobs it ran side by
    side. The same jobs outside autotune keep the table's own."""
    from sweep_files import steps, write_job

    from harness.result.jobs import collect
    from harness.sweep.table import build

    n = 0
    for r in range(3):
        for precision, rate in (("fp32", 100.0), ("bf16", 150.0)):
            stage = [f"+autotune_stage=s{1 + r // 2}"] if searched else []
            write_job(tmp_path / str(n), [f"precision={precision}", "compile=false", f"+sweep_round={r}",
                                          *stage], values=steps(rate * (1 + 0.01 * r)), sweep_round=r)
            n += 1
    table = build(collect(tmp_path))
    assert bool(table.fastest) != searched
    assert bool(table.points["train_best"].any()) != searched
