"""autotune at a recipe's global batch (issue 27, items 3-5): the planted recipe of
tests/autotune_landscape.py searched in-process (no Hydra, no torch), the space read from a
command line, autotune.memory_margin on hand-made result.json files, and the plot of speed
against memory."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from autotune_landscape import (
    GIB,
    PLANTED_RECIPE,
    R_DEVICE_GIB,
    RECIPE_DEFAULTS,
    RECIPE_GLOBAL,
    RECIPE_GRID,
    RecipeLandscape,
    drive,
    recipe_peak_gib,
    recipe_step_ms,
)
from omegaconf import OmegaConf
from sweep_files import steps, write_job

from harness.autotune.command_line import Here, SpaceError, parse
from harness.autotune.job import Shape, overrides
from harness.autotune.knowledge import Job, Knowledge, Record
from harness.autotune.plot import MEMORY_PNG, front, write_memory_png
from harness.autotune.reading import outcome_of
from harness.autotune.replay import Setup
from harness.autotune.report import point_label, show_points
from harness.autotune.search import Search
from harness.autotune.settings import Settings
from harness.autotune.space import Candidate, GlobalBatch, Key, Space, role_of
from harness.autotune.verdict import line, summary
from harness.config.global_batch import accumulation
from harness.config.overrides import parse_overrides

FIXED = [f"global_batch_size={RECIPE_GLOBAL}"]
# compile costs 30 s over 300 planned steps: 0.1 s a step, slower beyond any noise
SETTINGS = Settings(planned_steps=300)


def recipe_space(grid: dict[str, str] | None = None) -> Space:
    keys = tuple(Key(name, role_of(name, Settings().loader_keys), RECIPE_DEFAULTS[name],
                     values=tuple(values.split(",")))
                 for name, values in (grid or RECIPE_GRID).items())
    return Space(keys, GlobalBatch(RECIPE_GLOBAL))


SHAPE = Shape(train_batches=64, space=recipe_space())


def search_recipe(settings: Settings = SETTINGS, **planted):  # noqa: ANN201
    search = Search(recipe_space(), settings)
    land = RecipeLandscape(**planted)
    body, waves = drive(search, land)
    return summary(search, {"fixed": FIXED}), waves, land, search


def examples_per_optimizer_step(job_overrides: list[str]) -> int:
    """What the job's own check makes of its overrides (harness.config.global_batch)."""
    settings = parse_overrides(job_overrides)
    micro, global_batch = int(settings["batch_size"]), int(settings["global_batch_size"])
    cfg = OmegaConf.create({"trainer": {"devices": 1, "accelerator": "cpu"}})
    return micro * accumulation(cfg, micro, global_batch)


def test_the_plant_is_what_the_test_claims():
    """The planted fastest fits only with checkpointing, in bf16; checkpointing costs 25 %."""
    b, device = int(PLANTED_RECIPE["batch_size"]), R_DEVICE_GIB
    assert recipe_peak_gib(b, "bf16", True) <= device < recipe_peak_gib(b, "bf16", False)
    optimizer = 5.0  # the optimizer's own step, once per optimizer step
    assert recipe_step_ms(32, "bf16", True) - optimizer == pytest.approx(
        1.25 * (recipe_step_ms(32, "bf16", False) - optimizer))
    fits = {(b, p, c): RECIPE_GLOBAL / recipe_step_ms(b, p, c) for b in (8, 16, 32, 64, 128)
            for p in ("fp32", "bf16") for c in (False, True) if recipe_peak_gib(b, p, c) <= device}
    ranked = sorted(fits, key=fits.get, reverse=True)
    assert ranked[0] == (64, "bf16", True)
    assert fits[ranked[0]] / fits[ranked[1]] > 1.35  # beyond a loaded machine's noise
    assert math.prod(len(v.split(",")) for v in RECIPE_GRID.values()) == 40


@pytest.mark.parametrize("seed", range(8))
def test_a_recipe_names_the_planted_fastest_in_at_most_20_jobs(seed):
    body, waves, land, _ = search_recipe(seed=seed)
    assert body["best"] == PLANTED_RECIPE, body["stages"]
    assert body["grid_points"] == 40 and body["jobs"] <= 20
    assert body["status"] == "done" and body["speedup"]["confirmed"]
    # every job's optimizer step takes the global batch: micro-batch x accumulation = 128
    for job in land.launched:
        listed = overrides(job, FIXED, SETTINGS, SHAPE)
        assert examples_per_optimizer_step(listed) == RECIPE_GLOBAL, listed
        accumulate = RECIPE_GLOBAL // int(job.candidate["batch_size"])
        settings = parse_overrides(listed)
        # whole optimizer steps: the warm-up batches rounded up to whole steps, then the
        # measured ones, in one epoch of whole steps
        steps = math.ceil(job.warmup_steps / accumulate) + job.measured_steps
        assert int(settings["trainer.max_steps"]) == steps
        assert int(settings.get("data.train_batches", 64)) >= accumulate * steps
    # the out-of-memory points are cells of the table, never a failure of the sweep
    oom = [p for p in body["points"] if p["status"] == "oom"]
    assert oom and all(p["figure"] is None for p in oom)
    assert all(not math.isnan(p["figure"]["examples_per_second"]) for p in body["points"]
               if p["status"] == "ok")


def test_the_fit_ladder_runs_per_checkpointing_setting():
    body, waves, *_ = search_recipe()
    fit = [(j.candidate["batch_size"], j.candidate["activation_checkpointing"])
           for w in waves if w.stage == "fit" for j in w.jobs]
    # without checkpointing (fp32): 32 fits, 64 does not, 16 is slower, 32 again (the noise);
    # with it, from 64 up: in fp32 64 does not fit either
    assert fit == [("32", "false"), ("64", "false"), ("16", "false"), ("32", "false"),
                   ("64", "true")]
    assert [(ladder["point"]["activation_checkpointing"], ladder["largest_fit"],
             ladder["first_oom"]) for ladder in body["fit_ladders"]] == [
        ("false", 32, 64), ("true", None, 64)]
    assert (body["largest_batch_that_fits"], body["first_oom_batch"]) == (32, 64)
    said = [d["why"] for d in body["stages"][0]["decisions"]]
    assert "nothing fits only with checkpointing: it ran out of memory too" in said
    # the recheck runs per checkpointing setting too: in bf16, 64 fits only with it
    recheck = [(j.candidate["batch_size"], j.candidate["activation_checkpointing"])
               for w in waves if w.stage == "recheck" for j in w.jobs]
    assert recheck[:2] == [("64", "false"), ("64", "true")]


def test_on_a_larger_device_the_ladder_with_checkpointing_climbs_past_the_first_oom():
    """125 GiB: fp32 fits 32 without checkpointing, 64 with it (110.4 GiB, 88 %)."""
    body, waves, *_ = search_recipe(device_gib=125.0)
    assert [(ladder["point"]["activation_checkpointing"], ladder["largest_fit"],
             ladder["first_oom"]) for ladder in body["fit_ladders"]] == [
        ("false", 32, 64), ("true", 64, 128)]
    assert body["best"] == PLANTED_RECIPE


def test_the_verdict_the_table_and_the_command_carry_the_global_batch(capsys, caplog):
    body, *_ = search_recipe()
    assert body["global_batch"]["global_batch_size"] == RECIPE_GLOBAL
    assert body["global_batch"]["best"] == {"micro_batch": 64, "accumulation": 2}
    assert body["global_batch"]["default"] == {"micro_batch": 32, "accumulation": 4}
    assert body["command"] == ("harness global_batch_size=128 batch_size=64"
                               " activation_checkpointing=true precision=bf16")
    verdict = line(body)
    assert verdict.startswith("best: batch_size=64 x 2 = global_batch_size=128,"
                              " activation_checkpointing=true precision=bf16 compile=false: ")
    assert all(p["micro_batch"] * p["accumulation"] == RECIPE_GLOBAL for p in body["points"])
    show_points(body)
    table = capsys.readouterr().out + caplog.text
    assert "global_batch_size=128, micro-batch x accumulation" in table
    assert "64 x 2 ckpt=true bf16 compile=false" in table
    assert "peak MiB" in table and f"{recipe_peak_gib(64, 'bf16', True) * 1024:,.0f}" in table


def test_the_replayed_space_keeps_the_global_batch(tmp_path):
    space = recipe_space()
    Setup(space, SETTINGS, FIXED).write(tmp_path)
    again = Setup.read(tmp_path)
    assert again.space == space and again.space.global_batch == GlobalBatch(RECIPE_GLOBAL)


def test_checkpointing_off_is_simpler_than_on():
    space = recipe_space()
    off = Candidate(tuple(PLANTED_RECIPE.items())).with_("activation_checkpointing", "false")
    on = off.with_("activation_checkpointing", "true")
    assert space.simplicity(off) < space.simplicity(on)
    # and counts after precision: the same numbers recomputed is simpler than other numbers
    assert space.simplicity(on.with_("precision", "fp32")) < space.simplicity(off)


def test_checkpointing_that_buys_nothing_is_left_off():
    """Everything fits and checkpointing costs nothing: on and off tie, and off wins."""
    body, *_ = search_recipe(device_gib=1000.0, ckpt_cost=1.0)
    assert body["best"]["activation_checkpointing"] == "false", body["best"]
    assert [ladder["point"]["activation_checkpointing"] for ladder in body["fit_ladders"]] == [
        "false"]  # no OOM without it: no ladder with it


# -- autotune.memory_margin --------------------------------------------------------------------
def test_a_tight_point_is_never_named_best_and_is_reported():
    """A 72 GiB device: the planted fastest peaks at 65.6 GiB, 91 %, above 1 - 0.10."""
    body, *_ = search_recipe(device_gib=72.0)
    assert body["best"] == {**PLANTED_RECIPE, "batch_size": "32",
                            "activation_checkpointing": "false"}  # the next fastest: 64 GiB, 89 %
    tight = {tuple(t["candidate"].items()): t for t in body["memory"]["tight"]}
    planted = tight[tuple(PLANTED_RECIPE.items())]
    assert planted["why"].startswith("tight: peak 65.6 GiB allocated, 91% of the device's 72.0 GiB")
    assert planted["faster_than_best"]
    assert next(p for p in body["points"] if p["candidate"] == PLANTED_RECIPE)["status"] == "tight"
    assert "faster but tight (autotune.memory_margin): batch_size=64" in line(body)
    assert body["memory"]["note"] is None and body["memory"]["device_memory_bytes"] == 72 * GIB


def test_a_larger_margin_marks_more_and_none_marks_nothing():
    body, *_ = search_recipe(Settings(planned_steps=300, memory_margin=0.0), device_gib=72.0)
    assert body["best"] == PLANTED_RECIPE and body["memory"]["tight"] == []


def test_on_a_cpu_the_margin_is_said_once_and_nothing_is_marked():
    body, *_ = search_recipe(accelerator="cpu", device_gib=72.0)
    assert body["best"] == PLANTED_RECIPE and body["memory"]["tight"] == []
    assert body["memory"]["note"] == (
        "autotune.memory_margin=0.1: the jobs ran on cpu, which has no device memory to keep"
        " free; no point is marked tight (it applies on CUDA)")
    assert "tight" not in line(body)


def _fake_cuda_job(tmp_path: Path, name: str, allocated: int, device: int,
                   accelerator: str = "cuda") -> Path:
    values = {**steps(1000.0, batch_size=64), "peak_device_allocated_bytes":
              allocated if accelerator == "cuda" else None, "peak_rss_bytes": 3 * GIB}
    return write_job(tmp_path / name, ["batch_size=64"], values=values, schema_version=3,
                     device={"accelerator": accelerator, "device_name": "fake", "device_count": 1,
                             "world_size": 1, "memory_bytes": device})


@pytest.mark.parametrize(("allocated", "tight"), [(9 * GIB, False), (9 * GIB + 1, True)])
def test_the_margin_at_its_boundary(tmp_path, allocated, tight):
    """Hand-made result.json: 9 GiB of a 10 GiB device is exactly 1 - 0.10: not tight."""
    knowledge = Knowledge(Space((Key("batch_size", "batch", "32", ("32", "64")),)), Settings())
    point = Candidate((("batch_size", "64"),))
    outcome = outcome_of(_fake_cuda_job(tmp_path, "0", allocated, 10 * GIB), "training")
    assert (outcome.accelerator, outcome.device_allocated_bytes, outcome.device_memory_bytes) == (
        "cuda", allocated, 10 * GIB)
    assert outcome.peak_memory_bytes == allocated and outcome.memory_source == "device allocated"
    knowledge.records.append(Record(Job(point, "fit", 0, 10, 3), outcome, "0"))
    assert bool(knowledge.tight(point)) is tight
    assert bool(knowledge.infeasible(point)) is tight and knowledge.failed(point) is None


def test_a_cpu_jobs_ram_is_never_tight(tmp_path):
    """On a CPU device.memory_bytes is the machine's RAM: nothing is marked."""
    knowledge = Knowledge(Space((Key("batch_size", "batch", "32", ("32", "64")),)), Settings())
    point = Candidate((("batch_size", "64"),))
    outcome = outcome_of(_fake_cuda_job(tmp_path, "0", 0, 3 * GIB, "cpu"), "training")
    knowledge.records.append(Record(Job(point, "fit", 0, 10, 3), outcome, "0"))
    assert knowledge.tight(point) is None and outcome.accelerator == "cpu"


# -- the space from the command line --------------------------------------------------------
DEFAULT_SPACE = {"batch_size": "1,2,4,8,16,32,64,128,256,512,1024",
                 "activation_checkpointing": "false,true", "precision": "fp32,bf16",
                 "compile": "false,true"}


def _config(**top: object) -> object:
    return OmegaConf.create({"batch_size": 32, "precision": "fp32", "compile": False,
                             "activation_checkpointing": False, "global_batch_size": None,
                             "trainer": {"devices": 1, "accelerator": "cpu"},
                             "data": {"train_batches": 8}, **top})


def _parse(*arguments: str, config: object = None, blocks=lambda: "2 Block (found)",  # noqa: ANN001, ANN202
           params: dict | None = None):
    return parse(DEFAULT_SPACE if params is None else params, list(arguments),
                 config or _config(global_batch_size=96), Settings(), Here(cpus=2), blocks=blocks)


def test_the_default_batch_line_at_a_global_batch_is_its_divisors():
    parsed = _parse()
    batch = parsed.space.key("batch_size")
    assert batch.values == ("1", "2", "3", "4", "6", "8", "12", "16", "24", "32", "48", "96")
    assert parsed.space.global_batch == GlobalBatch(96)
    assert ("batch_size: the micro-batches that divide global_batch_size=96: 1, 2, 3, 4, 6, 8,"
            " 12, 16, 24, 32, 48, 96 (64, 128, 256, 512, 1024 left out)") in parsed.notes
    assert [k.name for k in parsed.space.keys] == ["batch_size", "activation_checkpointing", "precision",
                                                   "compile"]
    assert ("activation_checkpointing: false, true searched: the model's repeated blocks are 2"
            " Block (found)") in parsed.notes


def test_on_two_ranks_a_micro_batch_divides_the_global_batch_per_rank():
    config = _config(global_batch_size=96, trainer={"devices": 2, "accelerator": "cpu"})
    parsed = _parse(config=config)
    assert parsed.space.key("batch_size").values == ("1", "2", "3", "4", "6", "8", "12", "16",
                                                     "24", "48")
    assert any("global_batch_size=96 on 2 ranks (48 a rank)" in n for n in parsed.notes)


def test_a_listed_micro_batch_that_does_not_divide_is_refused_naming_both_keys():
    with pytest.raises(SpaceError) as caught:
        _parse("batch_size=8,16,64")
    said = str(caught.value)
    assert said.startswith("batch_size=64 does not divide global_batch_size=96: every optimizer"
                           " step takes whole micro-batches")
    assert "Fix: batch_size=8,12,16,24,32,48" in said and "\n" not in said
    assert SpaceError.exit_status == 2


def test_an_interval_becomes_its_divisors_and_a_list_is_taken_as_typed():
    parsed = _parse("batch_size=interval(10,50)")
    assert parsed.space.key("batch_size").values == ("12", "16", "24", "32", "48")
    assert _parse("batch_size=16,32").space.key("batch_size").values == ("16", "32")


def test_a_default_batch_that_does_not_divide_runs_the_nearest_that_does():
    parsed = _parse(config=_config(global_batch_size=100))
    assert parsed.space.key("batch_size").default == "25"
    assert any("the config's 32 does not divide global_batch_size=100; the default"
               " configuration runs batch_size=25" in n for n in parsed.notes)


def test_the_checkpointing_line_needs_a_global_batch_and_repeated_blocks():
    without = _parse(config=_config())
    assert "activation_checkpointing" not in [k.name for k in without.space.keys]
    assert any(n.startswith("activation_checkpointing left out of the default space: it is"
                            " searched at a global batch") for n in without.notes)
    none = _parse(blocks=lambda: None)
    assert "activation_checkpointing" not in [k.name for k in none.space.keys]
    assert any("the model has no repeated block" in n for n in none.notes)

    def broken() -> str:
        raise RuntimeError("needs a GPU")

    failed = _parse(blocks=broken)
    assert any("could not be built here to look for its repeated blocks (needs a GPU)" in n
               for n in failed.notes)
    # a list typed replaces the line, one value fixes the key: the model is not looked at
    typed = _parse("activation_checkpointing=true,false", blocks=broken)
    assert typed.space.key("activation_checkpointing").values == ("true", "false")
    fixed = _parse("activation_checkpointing=true", blocks=broken)
    assert "activation_checkpointing" not in [k.name for k in fixed.space.keys]
    assert "activation_checkpointing=true" in fixed.fixed


def test_a_listed_checkpointing_true_that_wraps_nothing_is_dropped_before_any_job():
    """Issue 34, item 5: on a model with no repeated block `true` runs as `false` does."""
    parsed = _parse("activation_checkpointing=false,true", blocks=lambda: None)
    assert "activation_checkpointing" not in [k.name for k in parsed.space.keys]
    assert "activation_checkpointing=false" in parsed.fixed
    said = [n for n in parsed.notes if "activation_checkpointing=true" in n]
    assert len(said) == 1 and said[0].startswith("activation_checkpointing=true dropped before any"
                                                 " job: the model has no repeated block to wrap")
    three = _parse("activation_checkpointing=false,true,false", blocks=lambda: None)
    assert "activation_checkpointing=false" in three.fixed
    # `true` alone is one value, which fixes the key as typed (it was a ValueError: no values)
    for alone in ("choice(true)", "true,true"):
        only = _parse(f"activation_checkpointing={alone}", blocks=lambda: None)
        assert "activation_checkpointing=true" in only.fixed
        assert "activation_checkpointing" not in [k.name for k in only.space.keys]
    kept = _parse("activation_checkpointing=false,true")  # 2 Block found: searched
    assert kept.space.key("activation_checkpointing").values == ("false", "true")


@pytest.mark.slow
def test_a_sweep_runs_no_job_with_checkpointing_that_wraps_nothing(tmp_path):
    """The sweep of the issue, small: Linear layers only (tests/user_module_workload.py)."""
    import json

    from conftest import run_harness, sweep_dir
    from user_module_workload import NO_NET

    done = run_harness(tmp_path, "-m", "hydra/sweeper=autotune", *NO_NET, "+model.blocks=false",
                       "profiler=[speed]", "hydra.callbacks.sweep_report.plot=false",
                       "activation_checkpointing=false,true", "batch_size=8,16",
                       "+autotune.budget.jobs=3", "+autotune.confirm_rounds=1",
                       "+autotune.warmup_job=false", "+autotune.probe_steps=2",
                       "+autotune.warmup_steps=1", "logger=none", fast=False, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    said = [line for line in out.splitlines() if "activation_checkpointing=true dropped" in line]
    assert len(said) == 1 and said[0].startswith("harness: autotune: "), said  # said once
    root = sweep_dir(tmp_path)
    jobs = [json.loads(path.read_text()) for path in root.glob("*/result.json")]
    assert jobs and all(job["knobs"]["activation_checkpointing"] is False for job in jobs)
    body = json.loads((root / "autotune.json").read_text())
    assert [k["name"] for k in body["space"]] == ["batch_size"]
    assert said[0].removeprefix("harness: autotune: ") in body["notes"]


def test_a_swept_global_batch_is_refused():
    with pytest.raises(SpaceError, match="global_batch_size: autotune keeps a recipe's global"
                       " batch"):
        _parse("global_batch_size=64,128", config=_config())


def test_a_global_batch_that_does_not_split_over_the_ranks_is_refused():
    config = _config(global_batch_size=100, trainer={"devices": 3, "accelerator": "cpu"})
    with pytest.raises(SpaceError, match="global_batch_size=100 does not split over 3 ranks.*"
                       "Fix: global_batch_size=99"):
        _parse(config=config)


def test_a_jobs_steps_are_whole_optimizer_steps_at_a_global_batch():
    job = Job(Candidate((("batch_size", "8"),)), "fit", 0, 10, 3)
    listed = overrides(job, FIXED, Settings(), SHAPE)
    settings = parse_overrides(listed)
    # 128 / 8 = 16 batches a step: 3 warm-up batches round up to 1 step, then 10 measured
    assert settings["trainer.max_steps"] == "11" and settings["data.train_batches"] == "176"
    assert examples_per_optimizer_step(listed) == RECIPE_GLOBAL


# -- speed against memory -------------------------------------------------------------------
def _point(memory: float, rate: float, status: str = "ok") -> dict:
    return {"peak_memory_bytes": memory, "status": status,
            "figure": {"examples_per_second": rate, "low": rate, "high": rate, "trusted": True}}


def test_the_front_is_the_fastest_point_under_each_memory_level():
    points = [_point(1, 10), _point(2, 8), _point(3, 20), _point(4, 15), _point(5, 30)]
    assert [p["peak_memory_bytes"] for p in front(points)] == [1, 3, 5]


def test_the_memory_plot_is_written(tmp_path):
    body, *_ = search_recipe(device_gib=72.0)
    body["sweep_dir"] = str(tmp_path)
    png = write_memory_png(body, tmp_path / MEMORY_PNG)
    assert png is not None and png.stat().st_size > 10_000
    assert point_label(PLANTED_RECIPE, body["global_batch"]) == "64 x 2 ckpt=true bf16 compile=false"


def test_the_memory_margin_is_checked_like_the_other_settings():
    from harness.errors import ConfigError

    assert Settings().memory_margin == 0.10
    for bad in (1.0, -0.1, "lots"):
        with pytest.raises(ConfigError, match="autotune.memory_margin"):
            Settings.from_mapping({"memory_margin": bad})


@pytest.mark.parametrize(("metrics", "peak", "source"), [
    ({"peak_device_allocated_bytes": 5 * GIB, "train_peak_rss_increase_bytes": 1, "peak_rss_bytes": 2},
     5 * GIB, "device allocated"),
    ({"train_peak_rss_increase_bytes": 3 * GIB, "inference_peak_rss_increase_bytes": 1},
     3 * GIB, "peak RSS increase"),
    ({"inference_peak_rss_increase_bytes": 2 * GIB, "peak_rss_bytes": 9 * GIB}, 2 * GIB, "peak RSS increase"),
    ({"peak_rss_bytes": 9 * GIB}, 9 * GIB, "process RSS"),
    ({}, None, None),
])
def test_autotune_reads_a_jobs_peak_memory_as_the_sweep_table_does(tmp_path, metrics, peak, source):
    """One reading of a job's peak memory (harness.measured.peak_memory), the table's and autotune's:
    the device's when measured, else a main phase's RSS increase (training's first), else the RSS."""
    from harness.measured import peak_memory
    from harness.result.schema import RunResult
    from harness.result.store import write_result

    write_result(tmp_path / "0", RunResult(status="ok", metrics=metrics))
    outcome = outcome_of(tmp_path / "0", "training")
    assert (outcome.peak_memory_bytes, outcome.memory_source) == (peak, source)
    assert peak_memory(metrics)[:2] == (peak, source)


def test_a_tied_micro_batch_that_fits_only_with_checkpointing_is_weighed_whole():
    """Checkpointing costs 76 %: 64 x 2 with it ties 32 x 4 without. The recheck keeps it as
    an alternate as it is (64 without checkpointing does not fit), the halving measures it,
    and the tie goes to no checkpointing."""
    from harness.autotune.settings import Budget

    body, waves, *_ = search_recipe(Settings(planned_steps=300, budget=Budget(jobs=None)),
                                    ckpt_cost=1.76)
    s1 = {tuple(j.candidate.as_dict().items()) for w in waves if w.stage == "s1" for j in w.jobs}
    simpler = {**PLANTED_RECIPE, "batch_size": "32", "activation_checkpointing": "false"}
    assert s1 == {tuple(PLANTED_RECIPE.items()), tuple(simpler.items())}
    assert body["best"] == simpler and body["tie"]["with"] == [PLANTED_RECIPE]


class SlowerByTheConfirmStage(RecipeLandscape):
    """Minutes later, by the confirm stage, the machine runs every job 1.6x slower."""

    def run(self, job):  # noqa: ANN001, ANN201
        from dataclasses import replace

        found = super().run(job)
        if job.stage != "confirm" or not found.phases:
            return found
        return replace(found, phases={name: replace(phase, seconds_per_step=1.6 * phase.seconds_per_step)
                                      for name, phase in found.phases.items()})


def test_the_star_tops_the_front_it_should():
    """Wrong answer 7 of issue 34 (autotune_memory.png): the star, the winner, sat below the front
    it should top, plotted at its confirm stage's figure among the others' earlier ones. One
    figure per point, the one its verdicts rest on: the winner's from the stage that ranked it."""
    search = Search(recipe_space(), SETTINGS)
    drive(search, SlowerByTheConfirmStage())
    body = summary(search, {"fixed": FIXED})
    assert body["best"] == PLANTED_RECIPE
    best = next(p for p in body["points"] if p["candidate"] == body["best"])
    assert best["stage"] != "confirm" and "confirm" in best["stages"]
    ties = (body["tie"] or {}).get("with") or []
    shown = [p for p in body["points"] if p["status"] == "ok" and p["figure"]["trusted"]]
    rate = best["figure"]["examples_per_second"]
    assert all(p["figure"]["examples_per_second"] <= rate or p["candidate"] in ties
               for p in front(shown) if p["peak_memory_bytes"] <= best["peak_memory_bytes"])
    assert best in front(shown)
    # the speed-up is the confirm stage's: both sides ran slower there, its ratio stands
    assert body["speedup"]["confirmed"] and 1.6 < body["speedup"]["value"] < 1.95
