"""The comparison table and `harness-report` on hand-made job directories (no training)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from sweep_files import diagnosis, metrics, multirun_yaml, write_job

from harness.errors import HarnessError
from harness.result.jobs import collect
from harness.sweep.diff import diff
from harness.sweep.gate import changes
from harness.sweep.render import (
    Figure,
    Section,
    _fill,
    legend,
    markdown_table,
    sections,
    terminal_table,
    write_tables,
)
from harness.sweep.table import build


def report(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    code = "from harness.sweep.report_cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def grid(root: Path, scale: float = 1.0) -> Path:
    """batch_size 2,4 x precision fp32,bf16; bf16 is 2x faster in training."""
    n = 0
    for bs in (2, 4):
        for precision, speed in (("fp32", 1.0), ("bf16", 2.0)):
            write_job(root / str(n), ["data.dim=32", f"batch_size={bs}", f"precision={precision}"],
                      values=metrics(10 * bs * speed * scale, 50 * bs * scale, batch_size=bs))
            n += 1
    (root / "multirun.yaml").write_text("{}\n")
    return root


def test_layout_fixed_keys_and_speedups(tmp_path):
    comparison = build(collect(grid(tmp_path / "sweep")))
    assert comparison.row_key == "batch_size"
    assert comparison.variant_keys == ["precision"]
    assert comparison.fixed == {"data.dim": "32"}
    assert comparison.baseline == "precision=fp32"
    points = comparison.points.set_index(["batch_size", "precision"])
    assert points.loc[("4", "bf16"), "train_speedup"] == pytest.approx(2.0)
    assert points.loc[("4", "bf16"), "inference_speedup"] == pytest.approx(1.0)
    assert points.loc[("2", "fp32"), "train_speedup"] == pytest.approx(1.0)
    # other baseline, other row key
    other = build(collect(tmp_path / "sweep"), rows="precision", baseline="batch_size=4")
    assert other.row_key == "precision" and other.baseline == "batch_size=4"
    points = other.points.set_index(["precision", "batch_size"])
    assert points.loc[("fp32", "2"), "train_speedup"] == pytest.approx(0.5)


def test_bad_baseline_and_rows_name_the_choices(tmp_path):
    collection = collect(grid(tmp_path / "sweep"))
    with pytest.raises(HarnessError, match="precision=fp32; precision=bf16"):
        build(collection, baseline="precision=fp8")
    with pytest.raises(HarnessError, match="swept: batch_size, precision"):
        build(collection, rows="seed")


def test_repeats_give_median_spread_and_noise_flag(tmp_path):
    root = tmp_path / "sweep"
    runs = {"fp32": [100.0, 90.0, 110.0], "bf16": [105.0, 80.0, 130.0], "fp16": [200, 198, 202]}
    for n, (precision, values) in enumerate(runs.items()):
        per_repeat = [metrics(v, 50.0) for v in values]
        write_job(root / str(n), ["batch_size=4", f"precision={precision}"],
                  values=metrics(sorted(values)[1], 50.0), per_repeat=per_repeat)
    points = build(collect(root)).points.set_index("precision")
    assert points.loc["bf16", "samples"] == 3
    assert points.loc["bf16", "train_examples_per_second"] == pytest.approx(105.0)
    assert (points.loc["bf16", "train_examples_per_second_min"],
            points.loc["bf16", "train_examples_per_second_max"]) == (80.0, 130.0)
    # 1.05x with a 50 examples/s spread: noise. 2x with spreads of 20 and 4: real.
    assert points.loc["bf16", "train_speedup_verdict"] == "inconclusive"
    assert points.loc["fp16", "train_speedup_verdict"] == "real"


def test_failed_and_missing_jobs_are_cells(tmp_path):
    root = grid(tmp_path / "sweep")
    write_job(root / "3", ["data.dim=32", "batch_size=4", "precision=bf16"], status="oom",
              reason="out of memory: CUDA out of memory")
    (root / "4" / ".hydra").mkdir(parents=True)
    (root / "4" / ".hydra" / "overrides.yaml").write_text("- data.dim=32\n- batch_size=8\n"
                                                         "- precision=fp32\n")
    done = report(str(root), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    md = (root / "comparison.md").read_text()
    assert "| 4 | 0.1000 | 40.0 | 25% | OOM | OOM | OOM | OOM |" in md
    assert "| 8 | no result | no result | no result | - | - | - | - |" in md
    assert "job 3 (batch_size=4, precision=bf16): oom: out of memory" in md
    table = csv.DictReader((root / "comparison.csv").open())
    rows = {(r["batch_size"], r["precision"]): r for r in table}
    assert rows[("4", "bf16")]["status"] == "oom"
    assert rows[("8", "fp32")]["status"] == "missing"


def test_corrupt_result_is_reported_and_the_rest_still_shown(tmp_path):
    root = grid(tmp_path / "sweep")
    (root / "1" / "result.json").write_text('{"status": "ok", "metrics": {')
    done = report(str(root), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "1/result.json: unreadable" in done.stderr  # a warning: on stderr, one line
    md = (root / "comparison.md").read_text()
    assert "| 2 | 0.1000 | 20.0 | 25% | unreadable | unreadable | unreadable | unreadable |" in md
    assert "| 4 | 0.1000 | 40.0 | 25% | 0.0500 | 80.0 | 25% | 2.00x ? |" in md  # each ran once


@pytest.mark.parametrize(("setup", "message"), [
    ("empty", "is not a sweep or run directory"),
    ("multirun_only", "is a sweep directory with no jobs in it yet"),
    ("missing", "does not exist"),
    ("file", "is not a directory"),
])
def test_bad_directories_get_one_line(tmp_path, setup, message):
    target = tmp_path / "target"
    if setup == "empty":
        (target / "notes").mkdir(parents=True)
    elif setup == "multirun_only":
        target.mkdir()
        (target / "multirun.yaml").write_text("{}\n")
    elif setup == "file":
        target.write_text("hello")
    done = report(str(target), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("harness-report: error: ")
    assert message in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def test_compare_two_sweeps_with_ratios_and_regression_exit(tmp_path):
    a = grid(tmp_path / "a")
    b = grid(tmp_path / "b", scale=0.5)  # everything half as fast
    result = diff(build(collect(a)), build(collect(b)))
    train = [c for c in result.changes if c.metric == "train_examples_per_second"]
    assert len(train) == 4 and all(c.ratio == pytest.approx(0.5) for c in train)
    # one run a point and no step samples: no spread, so the gate decides no speed (memory: by
    # the threshold alone)
    found = {(d.phase, d.outcome) for d in changes(result)}
    assert found == {("train", "undecided"), ("inference", "undecided"), ("memory", "no change")}

    done = report(str(a), str(b), "--fail-if-worse", "0.1", "--out", str(tmp_path / "d"),
                  cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "undecided: batch_size=2, precision=fp32: training 50.0 % slower: each side ran once," \
        " with no spread known" in done.stdout
    rows = json.loads((tmp_path / "d" / "diff.json").read_text())["changes"]
    assert {round(r["ratio_b_over_a"], 3) for r in rows
            if r["metric"] == "train_examples_per_second"} == {0.5}


def test_compare_two_single_runs(tmp_path):
    a = write_job(tmp_path / "fp32", ["precision=fp32"], values=metrics(100.0, 400.0))
    b = write_job(tmp_path / "bf16", ["precision=bf16"], values=metrics(150.0, 400.0))
    result = diff(build(collect(a)), build(collect(b)))
    ratios = {c.metric: c.ratio for c in result.changes}
    assert ratios["train_examples_per_second"] == pytest.approx(1.5)
    assert result.setup_changes == {"precision": ("fp32", "bf16")}


def test_report_cli_never_imports_torch(tmp_path):
    root = grid(tmp_path / "sweep")
    code = (
        "import sys; from harness.sweep.report_cli import _run, parser;"
        f" _run(parser().parse_args([{str(root)!r}]));"
        " heavy = [m for m in ('torch', 'lightning') if m in sys.modules];"
        " print('heavy:', heavy)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "heavy: []" in done.stdout
    assert (root / "comparison.md").is_file()


def _repeated(root: Path, speeds: dict[str, list[float]]) -> Path:
    """batch_size=4 x precision, each point from repeats at these training examples/s."""
    for n, (precision, values) in enumerate(speeds.items()):
        per_repeat = [metrics(v, 50.0) for v in values]
        write_job(root / str(n), ["batch_size=4", f"precision={precision}"],
                  values=per_repeat[0], per_repeat=per_repeat)
    return root


def _terminal(comparison) -> dict[str, list[list[str]]]:
    return {s.title: [*terminal_table(s, comparison)] for s in sections(comparison)}


def test_the_best_variant_is_marked_only_beyond_the_noise_of_the_others(tmp_path):
    # bf16's slowest (150) beats fp32's and fp16's fastest (104, 130): marked.
    clear = build(collect(_repeated(tmp_path / "clear", {
        "fp32": [100, 104, 98], "bf16": [150, 160, 155], "fp16": [99, 130, 101]})))
    assert clear.points.set_index("precision")["train_best"].to_dict() == {
        "fp32": False, "bf16": True, "fp16": False}
    header, rows = _terminal(clear)["Training"]
    assert header == ["run", "", "fp32", "bf16", "fp16"]  # one swept key: one row, "all"
    assert rows[0][1] == "ex/s\nbetween steps %\nspeed-up x"
    assert rows[0][3].split("\n")[0] == "155.0 ±3% best"
    assert "best" not in rows[0][2] + rows[0][4]
    assert not clear.points["inference_best"].any()  # inference: all alike
    # fp16's band (152-160, its one slow job an outlier) overlaps bf16's: nobody is marked.
    close = build(collect(_repeated(tmp_path / "close", {
        "fp32": [100, 104, 98], "bf16": [150, 160, 155], "fp16": [99, 160, 152]})))
    assert not close.points["train_best"].any()
    # ran once: no noise known, nothing marked however far apart
    once = build(collect(grid(tmp_path / "once")))
    assert not once.points["train_best"].any()
    md = tmp_path / "md"
    md.mkdir()
    write_tables(clear, md)
    assert "| all | 0.0400 ±3% | 100.0 ±3% | 25% | 0.0258 ±3% | 155.0 ±3% best |" in (
        md / "comparison.md").read_text()
    assert any(line.startswith("best: the row's fastest, beyond the others' noise") for line in
               legend(clear))


def test_one_swept_key_gives_one_column_per_figure_with_units(tmp_path):
    root = tmp_path / "sweep"
    for n, bs in enumerate((2, 4)):
        write_job(root / str(n), ["data.dim=32", f"batch_size={bs}"],
                  values=metrics(10.0 * bs, 50.0 * bs, batch_size=bs))
    comparison = build(collect(root))
    tables = _terminal(comparison)
    assert list(tables) == ["Training", "Inference", "Peak memory (process RSS)"]
    header, rows = tables["Training"]
    assert header == ["batch_size", "ex/s", "between steps %"]
    assert rows == [["2", "20.0", "25%"], ["4", "40.0", "25%"]]
    assert tables["Peak memory (process RSS)"][0] == ["batch_size", "peak MiB"]
    assert [s.terminal_title for s in sections(comparison)] == [
        "Training", "Inference", "Peak memory (process RSS)"]  # no "speed-up vs all"


def test_a_section_can_show_words(tmp_path):
    comparison = build(collect(grid(tmp_path / "sweep")))
    comparison.points["verdict"] = ["data-bound", "compute-bound", "compute-bound", None]
    section = _fill(Section("Diagnosis", "Diagnosis", [Figure("bound by", "verdict")]),
                    comparison)
    header, rows = markdown_table(section, comparison)
    assert header == ["batch_size", "fp32 bound by", "bf16 bound by"]
    assert rows == [["2", "data-bound", "compute-bound"], ["4", "compute-bound", "-"]]


def test_the_plot_labels_axes_starts_at_zero_and_shows_speedups_and_spread(tmp_path):
    from matplotlib.container import BarContainer

    from harness.sweep.plot import figure

    comparison = build(collect(_repeated(tmp_path / "sweep", {
        "fp32": [100, 104, 98], "bf16": [150, 160, 155]})))
    fig = figure(comparison)
    top, bottom = fig.axes[:3], fig.axes[3:6]
    assert [ax.get_ylabel() for ax in top] == [
        "training throughput (examples/s)", "inference throughput (examples/s)",
        "peak memory, process RSS (MiB)"]
    assert [ax.get_ylabel() for ax in bottom] == [
        "training speed-up vs fp32 (x)", "inference speed-up vs fp32 (x)",
        "peak memory vs fp32 (x)"]
    assert all(ax.get_ylim()[0] == 0 for ax in fig.axes)
    assert all(ax.get_xlabel() == "precision" for ax in fig.axes)  # one row: bars per variant
    # a dashed line at 1.0 on every speed-up panel
    assert all(any(list(line.get_ydata()) == [1.0, 1.0] for line in ax.get_lines())
               for ax in bottom)
    # error bars from the samples: bf16's training bar spans its 150..160
    (bf16,) = [c for c in top[0].containers
               if isinstance(c, BarContainer) and c.get_label() == "bf16"]
    (segment,) = bf16.errorbar.lines[2][0].get_segments()
    assert [float(y) for _, y in segment] == [150.0, 160.0]
    name = fig._suptitle.get_text()
    assert name.startswith(f"{tmp_path.name}/sweep (precision): device unknown")
    assert "baseline: precision=fp32; points: median of each point's samples; bars: its band" \
        " (the table's ±), the judge's interval under a ratio" in name

    single = figure(build(collect(grid(tmp_path / "once"))))
    assert "each point ran once" in single._suptitle.get_text()
    assert single.axes[0].get_xlabel() == "batch_size"
    assert not any(getattr(c, "has_yerr", False) for ax in single.axes for c in ax.containers)


def test_memory_headroom_from_the_slope_of_memory_against_batch(tmp_path):
    root = tmp_path / "sweep"
    for n, bs in enumerate((2, 4, 8)):  # 100 MiB fixed + 50 MiB per example, exactly
        job = write_job(root / str(n), [f"batch_size={bs}"],
                        values=metrics(10.0 * bs, 50.0 * bs, rss_mib=100 + 50 * bs, batch_size=bs))
        result = json.loads((job / "result.json").read_text())
        result["device"] = {"accelerator": "cuda", "device_name": "x", "device_count": 1,
                            "memory_bytes": 1024 * 2**20}  # 1 GiB
        (job / "result.json").write_text(json.dumps(result))
    comparison = build(collect(root))
    fit = comparison.headroom["all"]
    assert fit["bytes_per_example"] == pytest.approx(50 * 2**20)
    assert fit["fixed_bytes"] == pytest.approx(100 * 2**20)
    # 90 % of 1024 MiB = 921.6 MiB; (921.6 - 100) / 50 = 16.4 -> 16
    assert fit["largest_batch_size"] == 16
    done = report(str(root), cwd=tmp_path)
    assert "batch_size up to ~16 should fit" in (root / "comparison.md").read_text()
    assert json.loads((root / "comparison.json").read_text())["headroom"]["all"][
        "largest_batch_size"] == 16
    assert done.returncode == 0


def _memory_sweep(root, rss_by_batch: dict[int, list[float]], memory_mib: int) -> object:
    """Jobs whose repeats peaked at the given RSS (MiB), on a 'GPU' of `memory_mib`."""
    for n, (bs, rss) in enumerate(rss_by_batch.items()):
        per_repeat = [metrics(10.0 * bs, 50.0 * bs, rss_mib=r, batch_size=bs) for r in rss]
        job = write_job(root / str(n), [f"batch_size={bs}"], per_repeat=per_repeat,
                        values=metrics(10.0 * bs, 50.0 * bs, rss_mib=sorted(rss)[len(rss) // 2],
                                       batch_size=bs))
        result = json.loads((job / "result.json").read_text())
        result["device"] = {"accelerator": "cuda", "device_name": "x", "device_count": 1,
                            "memory_bytes": memory_mib * 2**20}
        (job / "result.json").write_text(json.dumps(result))
    return build(collect(root))


def test_memory_headroom_is_not_read_off_noise_nor_far_past_the_data(tmp_path):
    from harness.sweep.render import headroom_lines

    # 33 MiB of growth between the sizes, 40 MiB between repeats of one size: noise.
    noisy = _memory_sweep(tmp_path / "noisy", {8: [1000, 1040], 16: [1033, 1060]}, 64 * 1024)
    assert noisy.headroom == {}
    # A clear 10 MiB per example, but 1 TiB would fit far more than 4x the largest size.
    far_sweep = _memory_sweep(tmp_path / "far", {8: [180, 181], 16: [260, 261]}, 2**20)
    far = far_sweep.headroom["all"]
    assert far["bytes_per_example"] == pytest.approx(10 * 2**20)
    assert far["at_least"] is True and far["largest_batch_size"] == 64
    assert "batch_size up to at least 64 (as far as the line is trusted: 4x" in headroom_lines(far_sweep)[0]


def test_the_bound_over_rounds_is_the_majority_and_a_tie_names_both():
    from harness.sweep.table import majority

    assert majority(["compute", "host", "compute"]) == "compute"
    assert majority(["host", "compute"]) == "host/compute"
    assert majority([]) is None


def test_a_repeated_jobs_pooled_diagnosis_reaches_the_table(tmp_path):
    # repeat=3 diagnoses once, on the pooled figures: FLOP/s is in metrics, not per repeat
    root = tmp_path / "sweep"
    for n, bs in enumerate((2, 4)):
        per_repeat = [metrics(10.0 * bs * f, 50.0 * bs, batch_size=bs) for f in (0.9, 1.0, 1.1)]
        write_job(root / str(n), [f"batch_size={bs}"], per_repeat=per_repeat,
                  values={**metrics(10.0 * bs, 50.0 * bs, batch_size=bs),
                          "train_flop_per_s": 1e9 * bs})
    (job,) = [j for j in collect(root).jobs if j.name == "1"]
    assert [s["train_flop_per_s"] for s in job.samples] == [4e9] * 3
    assert [s["train_examples_per_second"] for s in job.samples] == [36.0, 40.0, 44.0]
    comparison = build(collect(root))
    assert sorted(comparison.points["train_flop_per_s"]) == [2e9, 4e9]


def _diagnosed_sweep(root: Path, schema_version: int) -> Path:
    """batch_size 2,4, repeat=3 in each job, diagnosed: the same figures written as schema 2
    (the diagnosis's figures copied into metrics) or as schema 3 (in the diagnosis only)."""
    for n, bs in enumerate((2, 4)):
        per_repeat = [metrics(10.0 * bs * f, 50.0 * bs, batch_size=bs) for f in (0.9, 1.0, 1.1)]
        figures = {"train_flop_per_s": 1e9 * bs, "train_mfu": 0.1 * bs}
        values = metrics(10.0 * bs, 50.0 * bs, batch_size=bs)
        if schema_version < 3:
            values.update(figures)
        write_job(root / str(n), [f"batch_size={bs}"], values=values, per_repeat=per_repeat,
                  schema_version=schema_version,
                  diagnosed=diagnosis("host" if bs == 2 else "compute", **figures))
    return root


def test_the_table_reads_the_diagnosis_where_it_lives_and_old_results_still_compare(tmp_path):
    new = build(collect(_diagnosed_sweep(tmp_path / "v3", 3)))
    old = build(collect(_diagnosed_sweep(tmp_path / "v2", 2)))
    for comparison in (new, old):
        points = comparison.points.set_index("batch_size")
        # the job's diagnosis once, joined to each repeat's own speed figures
        assert points.loc["4", "samples"] == 3
        assert points.loc["4", "train_flop_per_s"] == 4e9
        assert points.loc["4", "train_mfu"] == pytest.approx(0.4)
        assert (points.loc["4", "train_examples_per_second_min"],
                points.loc["4", "train_examples_per_second_max"]) == (
            pytest.approx(36.0), pytest.approx(44.0))
        assert points["bound_by"].to_dict() == {"2": "host", "4": "compute"}
        (diagnosis_table,) = [s for s in sections(comparison) if s.title.startswith("Diagnosis")]
        # 2e9 and 4e9 FLOP/s: in GFLOP/s, not as 0.002 / 0.004 TFLOP/s
        header, rows = markdown_table(diagnosis_table, comparison)
        assert header == ["batch_size", "bound by", "GFLOP/s", "MFU %"]
        assert rows == [["2", "host", "2.00", "20%"], ["4", "compute", "4.00", "40%"]]
    # a schema-2 sweep and a schema-3 one of the same figures: nothing changed between them
    changes = diff(old, new).changes
    assert changes and all(c.ratio == pytest.approx(1.0) for c in changes if c.ratio is not None)


def test_on_a_cpu_memory_is_the_training_phases_peak_rss_increase(tmp_path):
    """Jobs whose training takes 1 MiB more per example (measured with a few % of noise), in
    a process that holds ~490 MiB of libraries before training starts: the memory section
    and the headroom read the increase, and the slope comes out at 1 MiB per example."""
    from harness.sweep.render import headroom_lines

    mib, root = 2**20, tmp_path / "sweep"
    noise = {8: 1.03, 16: 0.97, 32: 1.02, 64: 0.99}
    for n, bs in enumerate(noise):
        increase = (40 + bs * noise[bs]) * mib
        start = (490 + n % 2 * 6) * mib  # the start moves a little from job to job
        values = {**metrics(10.0 * bs, 50.0 * bs, batch_size=bs),
                  "peak_rss_bytes": start + increase + 30 * mib,  # the whole job's peak
                  "train_rss_start_bytes": start, "train_peak_rss_bytes": start + increase,
                  "train_peak_rss_increase_bytes": increase}
        write_job(root / str(n), [f"batch_size={bs}"], values=values, schema_version=3,
                  device={"accelerator": "cpu", "device_name": "x", "device_count": 1,
                          "memory_bytes": 4 * 2**30})
    comparison = build(collect(root))
    assert set(comparison.points["memory_source"]) == {"peak RSS increase"}
    fit = comparison.headroom["all"]
    assert fit["bytes_per_example"] == pytest.approx(mib, rel=0.10)
    assert fit["start_bytes"] == pytest.approx(493 * mib)
    assert fit["fixed_bytes"] == pytest.approx((493 + 40) * mib, rel=0.05)
    # 90% of 4 GiB = 3686 MiB, less ~533 MiB fixed: ~3150 examples, capped at 4x 64
    assert fit["largest_batch_size"] == 256 and fit["at_least"] is True
    assert "resident before training started" in headroom_lines(comparison)[0]
    titles = [s.title for s in sections(comparison)]
    assert "Peak memory (peak RSS increase)" in titles
    assert any(line.startswith("peak RSS increase: the training phase's peak")
               for line in legend(comparison))
    points = comparison.points.set_index("batch_size")
    assert points.loc["64", "peak_memory_bytes"] == pytest.approx((40 + 64 * 0.99) * mib)
    # a CUDA run's device figures win, as before; a result without the increase: process RSS
    from harness.measured import peak_memory

    assert peak_memory({"peak_device_allocated_bytes": 5.0, "train_peak_rss_increase_bytes": 3,
                        "peak_rss_bytes": 9})[1] == "device allocated"
    assert peak_memory({"peak_rss_bytes": 9})[1] == "process RSS"


def _report_in_process(capsys, *argv: str) -> tuple[int, str]:
    from harness.sweep.report_cli import main

    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--no-plot"])
    out = capsys.readouterr()
    return stopped.value.code, out.out + out.err


def _written(root: Path) -> dict:
    return json.loads((root / "comparison.json").read_text())


def test_harness_report_dir_keeps_the_sweeps_own_rows_and_baseline(tmp_path, capsys):
    # `harness -m batch_size=2,4 precision=fp32,bf16
    #  "hydra.callbacks.sweep_report.baseline='precision=bf16'"`: multirun.yaml records it
    root = grid(tmp_path / "sweep")
    multirun_yaml(root, baseline="precision=bf16")
    code, out = _report_in_process(capsys, str(root))
    assert code == 0, out
    assert _written(root)["baseline"] == "precision=bf16"  # not rebuilt against fp32
    assert "Baseline: precision=bf16." in out
    assert ("the table as the sweep set it (multirun.yaml):"
            " hydra.callbacks.sweep_report.baseline='precision=bf16'; --baseline changes it"
            in out)
    points = pd_points(root)
    assert points[("4", "fp32")]["train_speedup"] == pytest.approx(0.5)
    # the command line wins
    code, out = _report_in_process(capsys, str(root), "--baseline", "precision=fp32")
    assert code == 0 and _written(root)["baseline"] == "precision=fp32"
    assert "as the sweep set it" not in out
    # --rows precision: the sweep's baseline names the row key now; the first variant is
    # the baseline, said in a line, and a baseline of the new column key works
    code, out = _report_in_process(capsys, str(root), "--rows", "precision")
    assert code == 0, out
    assert (_written(root)["row_key"], _written(root)["baseline"]) == ("precision", "batch_size=2")
    assert "the sweep's baseline 'precision=bf16' names precision, now the row key" in out
    code, out = _report_in_process(capsys, str(root), "--rows", "precision",
                                   "--baseline", "batch_size=4")
    assert code == 0 and _written(root)["baseline"] == "batch_size=4"
    # a baseline of the row key is refused, naming the column keys (docs/sweeps.md)
    code, out = _report_in_process(capsys, str(root), "--baseline", "precision=bf16",
                                   "--rows", "precision")
    assert code == 2
    assert "--baseline='precision=bf16' is not valid: expected key=value pairs of the column" \
        " keys (batch_size). Fix: --baseline='batch_size=2'" in out


def pd_points(root: Path) -> dict[tuple[str, str], dict]:
    return {(p["batch_size"], p["precision"]): p for p in _written(root)["points"]}


def test_harness_report_dir_keeps_the_sweeps_own_rows_and_repeat_keys(tmp_path, capsys):
    root = grid(tmp_path / "sweep")
    multirun_yaml(root, rows="precision", baseline="batch_size=4")
    code, out = _report_in_process(capsys, str(root))
    assert code == 0, out
    assert (_written(root)["row_key"], _written(root)["baseline"]) == ("precision", "batch_size=4")
    assert "rows='precision', baseline='batch_size=4'; --rows, --baseline change them" in out
    # repeat_keys: [] (seed a variant again), recorded by the sweep
    seeded = tmp_path / "seeded"
    for n, (bs, seed) in enumerate([(8, 0), (8, 1), (16, 0), (16, 1)]):
        write_job(seeded / str(n), [f"batch_size={bs}", f"seed={seed}"],
                  values=metrics(10.0 * bs + seed, 50.0 * bs, batch_size=bs))
    multirun_yaml(seeded, repeat_keys=[])
    code, out = _report_in_process(capsys, str(seeded))
    assert code == 0, out
    assert _written(seeded)["variant_keys"] == ["seed"]
    assert "repeat_keys=[]; --repeat-keys changes it" in out
    code, out = _report_in_process(capsys, str(seeded), "--repeat-keys", "seed")
    assert code == 0 and _written(seeded)["variant_keys"] == []
    assert _written(seeded)["repeat_keys"] == {"seed": ["0", "1"]}
    # the default recorded (every sweep's multirun.yaml has it): nothing to say
    multirun_yaml(seeded)
    code, out = _report_in_process(capsys, str(seeded))
    assert code == 0 and "as the sweep set it" not in out
    assert _written(seeded)["repeat_keys"] == {"seed": ["0", "1"]}


def test_the_sweeps_fastest_point_is_a_line_under_the_tables_decided_or_not(tmp_path, caplog):
    from types import SimpleNamespace

    from harness.sweep.render import fastest_lines, show_tables, to_markdown

    comparison = build(collect(grid(tmp_path / "sweep")))
    comparison.fastest = {  # as harness.sweep.table sets it, by hand
        "inference": {"point": "batch_size=4 precision=fp32", "examples_per_second": 200.0,
                      "low": 190.0, "high": 210.0, "decided": False,
                      "ties": ["batch_size=4 precision=bf16"],
                      "why": "within the noise of 1 other"},
        "train": {"point": "batch_size=16", "examples_per_second": 2706.4, "low": 2650.0,
                  "high": 2760.2, "decided": True, "ties": [], "why": None},
    }
    training = "fastest (training): batch_size=16: 2,706 ex/s (2,650-2,760), beyond the others' noise"
    inference = ("fastest (inference): batch_size=4 precision=fp32: 200 ex/s (190-210), unproven:"
                 " within the noise of 1 other, tied with: batch_size=4 precision=bf16")
    assert fastest_lines(comparison) == [training, inference]
    assert f"{training}  \n{inference}  \n" in to_markdown(comparison)
    with caplog.at_level("INFO", logger="harness.output"):
        show_tables(comparison)
    shown = [r.getMessage() for r in caplog.records]
    assert shown.index(training) + 1 == shown.index(inference)
    assert shown.index(training) > max(n for n, line in enumerate(shown) if "┃" in line)
    # a Comparison without the field (or an empty one) has no such line
    assert fastest_lines(SimpleNamespace()) == [] and fastest_lines(SimpleNamespace(fastest={})) == []
