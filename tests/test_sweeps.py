"""Real sweeps on the built-in workload: the comparison files against the jobs' own results."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import FAST, harness_report, job_results, run_harness, sweep_dir

pytestmark = pytest.mark.slow

# Per-job work kept tiny: 8 training and 6 inference steps, 2 of each excluded as warm-up.
SMALL = ("data.train_batches=8", "data.val_batches=2", "data.predict_batches=6",
         "profiler.speed.warmup_steps=2")
# The same as -m; an override, so it can follow the FAST overrides run_harness puts first.
MULTIRUN = "hydra.mode=MULTIRUN"
# FAST without its batch_size, for sweeps whose file sweeps batch_size.
FAST_ANY_BATCH = tuple(o for o in FAST if not o.startswith("batch_size="))
FAILING = ("model._target_=failing_module.FailAtBatchSize", "+model.fail_at=4")


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """One real 2 x 2 sweep (batch size x precision), shared by the tests below."""
    cwd = tmp_path_factory.mktemp("grid")
    done = run_harness(cwd, MULTIRUN, *SMALL, "batch_size=2,4", "precision=fp32,bf16")
    assert done.returncode == 0, done.stderr[-3000:]
    return cwd, done


@pytest.mark.xdist_group("sweeps_grid")  # one worker builds the grid once
def test_every_cell_of_the_csv_matches_the_jobs_results(grid):
    cwd, done = grid
    root = sweep_dir(cwd)
    by_job = job_results(root)
    assert len(by_job) == 4 and all(r["status"] == "ok" for r in by_job.values())
    rows = list(csv.DictReader((root / "comparison.csv").open()))
    assert {(r["batch_size"], r["precision"]) for r in rows} == {
        ("2", "fp32"), ("2", "bf16"), ("4", "fp32"), ("4", "bf16")}
    base = {r["batch_size"]: r for r in rows if r["precision"] == "fp32"}
    for row in rows:
        result = by_job[int(row["jobs"])]
        assert result["knobs"]["batch_size"] == int(row["batch_size"])
        assert result["knobs"]["precision"] == row["precision"]
        assert row["status"] == "ok" and row["samples"] == "1"
        for metric in ("train_seconds_per_iteration", "train_examples_per_second",
                       "inference_seconds_per_iteration", "inference_examples_per_second"):
            assert float(row[metric]) == pytest.approx(result["metrics"][metric], rel=1e-12)
        # on a CPU: what training took over its start (#20), where the run measured it
        increase = result["metrics"].get("train_peak_rss_increase_bytes")
        if increase is not None:
            assert float(row["peak_memory_bytes"]) == increase
            assert row["memory_source"] == "peak RSS increase"
        else:
            assert float(row["peak_memory_bytes"]) == result["metrics"]["peak_rss_bytes"]
            assert row["memory_source"] == "process RSS"
        for ratio, metric in (("train_speedup", "train_examples_per_second"),
                              ("inference_speedup", "inference_examples_per_second")):
            expected = float(row[metric]) / float(base[row["batch_size"]][metric])
            assert float(row[ratio]) == pytest.approx(expected, rel=1e-9)
    md = (root / "comparison.md").read_text()
    assert "Fixed (not swept): data.train_batches=8" in md  # not repeated in the rows
    assert ("| batch_size | fp32 s/it | fp32 ex/s | fp32 between steps % | bf16 s/it | bf16 ex/s"
            " | bf16 between steps % | bf16 speed-up x |") in md  # every header with its unit
    assert (root / "comparison.png").read_bytes()[:4] == b"\x89PNG"
    payload = json.loads((root / "comparison.json").read_text())
    assert payload["row_key"] == "batch_size" and payload["variant_keys"] == ["precision"]
    assert len(payload["points"]) == 4
    assert "bf16 speed-up" in done.stdout.replace("\n", " ") or "speed-up" in done.stdout


@pytest.mark.xdist_group("sweeps_grid")  # one worker builds the grid once
def test_report_rebuilds_the_files_identically_from_job_dirs(grid):
    cwd, _ = grid
    root = sweep_dir(cwd)
    names = ("comparison.md", "comparison.csv", "comparison.json", "comparison.png")
    before = {name: (root / name).read_bytes() for name in names}
    for name in names:
        (root / name).unlink()
    done = harness_report(str(root.relative_to(cwd)), cwd=cwd)
    assert done.returncode == 0, done.stderr
    for name in names:
        assert (root / name).read_bytes() == before[name], name


def test_a_failing_job_is_a_cell_and_the_sweep_goes_on(tmp_path):
    # A project-local named sweep; the command line narrows its precision axis.
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "grid.yaml").write_text(
        "hydra:\n  sweeper:\n    params:\n      batch_size: 2,4\n      precision: fp32,bf16\n")
    done = run_harness(tmp_path, MULTIRUN, "sweep=grid", "precision=fp32", *FAST_ANY_BATCH,
                       *SMALL, *FAILING, fast=False)
    assert done.returncode == 0, done.stderr[-3000:]
    root = sweep_dir(tmp_path)
    by_job = {r["knobs"]["batch_size"]: r for r in job_results(root).values()}
    assert set(by_job) == {2, 4}
    assert {r["knobs"]["precision"] for r in by_job.values()} == {"fp32"}
    assert by_job[2]["status"] == "ok"
    assert by_job[4]["status"] == "failed"
    assert "deliberate failure at batch size 4" in by_job[4]["reason"]
    rows = {r["batch_size"]: r for r in csv.DictReader((root / "comparison.csv").open())}
    assert rows["4"]["status"] == "failed" and rows["2"]["status"] == "ok"
    md = (root / "comparison.md").read_text()
    assert "| batch_size | s/it | ex/s |" in md
    assert md.count("| 4 | failed | failed |") == 3  # training, inference and diagnosis tables
    assert "deliberate failure at batch size 4" in md


def test_local_launcher_runs_each_job_in_its_own_process_and_keeps_failures(tmp_path):
    done = run_harness(tmp_path, MULTIRUN, "hydra/launcher=local", *FAST_ANY_BATCH, *SMALL,
                       *FAILING, "batch_size=2,4", fast=False)
    assert done.returncode == 0, done.stderr[-3000:]
    root = sweep_dir(tmp_path)
    by_job = {r["knobs"]["batch_size"]: r for r in job_results(root).values()}
    assert by_job[2]["status"] == "ok" and by_job[4]["status"] == "failed"
    assert "deliberate failure at batch size 4" in by_job[4]["reason"]
    # submitit's local executor: one job folder (named by the job's process id) per point
    job_dirs = [p for p in (root / ".submitit").iterdir() if p.name.isdigit()]
    assert len(job_dirs) == 2, job_dirs
    rows = {r["batch_size"]: r["status"] for r in csv.DictReader((root / "comparison.csv").open())}
    assert rows == {"2": "ok", "4": "failed"}


def test_multirun_exits_non_zero_only_when_every_job_failed(tmp_path):
    done = run_harness(tmp_path, MULTIRUN, "batch_size=4", *SMALL, *FAILING, "+model.error=oom")
    assert done.returncode == 1
    assert "all 1 jobs of the sweep failed" in done.stderr
    md = (sweep_dir(tmp_path) / "comparison.md").read_text()
    assert "| all | OOM | OOM |" in md


def test_reversed_job_order_gives_the_same_cells(tmp_path):
    # A planted peak: the batch-16 job holds 16 x 16 MiB in one step, the batch-1 job 16 MiB.
    # The jobs share one process (Hydra's basic launcher): run first, a peak mark that was not
    # reset would carry the big job's 256 MiB into the small one's cell. Each cell is checked
    # against the planted truth, never against a figure measured in the other sweep.
    workload = (*SMALL, "mode=train", "model._target_=memory_module.HoldsMemory",
                "+model.mib_per_example=16")
    cells = {}
    for order in ("1,16", "16,1"):
        cwd = tmp_path / order.replace(",", "_")
        cwd.mkdir()
        done = run_harness(cwd, MULTIRUN, *workload, f"batch_size={order}")
        assert done.returncode == 0, done.stderr[-3000:]
        root = sweep_dir(cwd)
        jobs = job_results(root)
        # the jobs ran in the order asked for
        assert [jobs[n]["knobs"]["batch_size"] for n in sorted(jobs)] == [
            int(b) for b in order.split(",")]
        rows = {r["batch_size"]: r for r in csv.DictReader((root / "comparison.csv").open())}
        for bs, row in rows.items():  # every cell is its own job's figure, whatever ran first
            (result,) = [r for r in jobs.values() if r["knobs"]["batch_size"] == int(bs)]
            assert row["status"] == result["status"] == "ok"
            assert row["memory_source"] == "peak RSS increase"
            assert float(row["peak_memory_bytes"]) == result["metrics"]["train_peak_rss_increase_bytes"]
            assert float(row["train_examples_per_second"]) == pytest.approx(
                result["metrics"]["train_examples_per_second"], rel=1e-12)
        big, small = (float(rows[bs]["peak_memory_bytes"]) / 2**20 for bs in ("16", "1"))
        # The big job's cell holds its planted 256 MiB; the small job's holds its own 16 MiB
        # and the step's tensors, not the big job's 256 MiB, whichever job ran first.
        assert big >= 256 and small < 128, (order, big, small)
        cells[order] = rows
    # The same table either way: the same cells, statuses and columns.
    forward, reverse = cells["1,16"], cells["16,1"]
    assert forward.keys() == reverse.keys() == {"1", "16"}
    for bs in forward:
        assert forward[bs].keys() == reverse[bs].keys()
        assert forward[bs]["status"] == reverse[bs]["status"] == "ok"
        assert forward[bs]["memory_source"] == reverse[bs]["memory_source"]


def test_repeat_in_a_sweep_runs_rounds_with_one_consistent_statistic(tmp_path):
    """repeat=2 in a multirun: 2 rounds of the 2 points (order alternating), one run per job;
    the table pools the rounds, and each row's ex/s x s/it is its examples per iteration."""
    done = run_harness(tmp_path, MULTIRUN, *SMALL, "batch_size=2", "precision=fp32,bf16",
                       "repeat=2", "mode=train")
    assert done.returncode == 0, done.stderr[-3000:]
    root = sweep_dir(tmp_path)
    jobs = job_results(root)
    order = [(jobs[n]["sweep_round"], jobs[n]["knobs"]["precision"]) for n in sorted(jobs)]
    assert order == [(0, "fp32"), (0, "bf16"), (1, "bf16"), (1, "fp32")]
    assert all(r["knobs"]["repeat"] == 1 and "repeats" not in r for r in jobs.values())
    rows = {r["precision"]: r for r in csv.DictReader((root / "comparison.csv").open())}
    assert set(rows) == {"fp32", "bf16"}  # the rounds are samples of a point, not columns
    for row in rows.values():
        assert row["samples"] == "2" and row["rounds"] == "2"
        if row["train_counted"] == "0":  # a busy machine: every job contended, no band, said
            assert row["train_examples_per_second_min"] == "" and row["train_contended"] == "True"
        else:
            lo, mid, hi = (float(row[f"train_examples_per_second{s}"]) for s in ("_min", "", "_max"))
            assert lo <= mid <= hi
        rate, time = float(row["train_examples_per_second"]), float(row["train_seconds_per_iteration"])
        assert rate * time == pytest.approx(2, rel=0.005)  # batch_size 2, one rank
    bf16 = rows["bf16"]
    if bf16["train_speedup_min"]:  # the judge's interval (none where a side counted no job)
        low, high = float(bf16["train_speedup_min"]), float(bf16["train_speedup_max"])
        assert low <= float(bf16["train_speedup"]) <= high
    assert bf16["train_speedup_verdict"] in ("real", "same", "inconclusive")
    md = (root / "comparison.md").read_text()
    assert "Rounds: 2 (each ran every point, order alternating)" in md


def test_bad_repeat_is_one_line(harness):
    done = harness("repeat=0")
    assert done.returncode == 2
    assert "repeat=0 is not valid: expected a value >= 1 or 'auto'. Fix: repeat=3" in done.stderr
    assert "Traceback" not in done.stderr


def test_named_sweeps_compose_and_say_what_they_answer(tmp_path):
    import yaml

    from harness.config.locations import sweeps_dir

    names = sorted(p.stem for p in sweeps_dir().glob("*.yaml"))
    assert {"batch_scaling", "precision_compile", "physicsnemo", "throughput"} <= set(names)
    for name in names:
        text = (sweeps_dir() / f"{name}.yaml").read_text()
        assert text.startswith("# Question:"), name
        params = yaml.safe_load(text)["hydra"]["sweeper"]["params"]
        done = run_harness(tmp_path, MULTIRUN, f"sweep={name}", "--cfg", "hydra", fast=False)
        assert done.returncode == 0, done.stderr
        composed = yaml.safe_load(done.stdout)["hydra"]["sweeper"]["params"]
        assert composed == params, name
