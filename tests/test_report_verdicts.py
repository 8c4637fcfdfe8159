"""`harness-report` and the sweep table on hand-made job directories whose result.json carry
issue #20's flags and step figures: planted contention and planted spikes never make a
speed-up, a best or a regression; a planted real slow-down on a quiet machine still does.
Exit statuses: 0 done, 1 regression, 2 bad input, 3 inconclusive."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from sweep_files import steps, write_job

from harness.result.jobs import collect
from harness.sweep.gate import FOUND_REGRESSION as REGRESSION
from harness.sweep.gate import NOT_DECIDED as INCONCLUSIVE
from harness.sweep.render import legend, ratio_cell, sections, terminal_table, value_cell
from harness.sweep.report_cli import main, parser
from harness.sweep.table import build


def sweep(root: Path, rates: list[float], flags: list[str] | None = None,
          spiky: bool = False, batch_sizes: tuple[int, ...] = (8, 16)) -> str:
    """One job per (batch size, round) at these training rates (examples/s at the median)."""
    n = 0
    for bs in batch_sizes:
        for round_, rate in enumerate(rates):
            figures = steps(rate, batch_size=bs, cv=0.4 if spiky else 0.03,
                            mean_over_median=3.0 if spiky else 1.02)
            write_job(root / str(n), [f"batch_size={bs}", "repeat=1", f"+sweep_round={round_}"],
                      values={**figures, "peak_rss_bytes": 500 * 2**20},
                      flags=flags, schema_version=3)
            n += 1
    return str(root)


def report(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--no-write"])
    out = capsys.readouterr()
    return stopped.value.code, out.out + out.err


def gate_lines(out: str) -> list[str]:
    return [line for line in out.splitlines()
            if re.match(r"^(regression|improvement|no change|undecided|failed): ", line)]


def test_identical_quiet_sweeps_pass(tmp_path, capsys):
    a, b = sweep(tmp_path / "a", [100, 101]), sweep(tmp_path / "b", [99, 100.5])
    code, out = report(capsys, a, b, "--fail-if-worse", "0.1")
    assert code == 0, out
    lines = gate_lines(out)
    # per point: training and memory (mode=train: no inference)
    assert len(lines) == 4 and all(line.startswith("no change: ") for line in lines), out
    assert "no change: batch_size=8: training 0.7 % slower (B/A" in out


def test_a_planted_30_percent_slowdown_is_a_regression(tmp_path, capsys):
    a = sweep(tmp_path / "a", [100, 101])
    b = sweep(tmp_path / "b", [70, 71])
    code, out = report(capsys, a, b, "--fail-if-worse", "0.1", "--out", str(tmp_path / "d"))
    assert code == REGRESSION, out
    assert "regression: batch_size=8: training 29.9 % slower (B/A 0.690-0.713, the two points'" \
        " bands), beyond 10%" in out
    rows = {r["metric"]: r for r in csv.DictReader((tmp_path / "d" / "diff.csv").open())}
    assert rows["train_examples_per_second"]["verdict"] == "real"
    assert rows["train_seconds_per_iteration"]["verdict"] == "real"
    assert rows["peak_memory_bytes"]["verdict"] == "same"  # the judge's rule, lower is better
    assert "no change: batch_size=8: peak memory the same (500.0 MiB -> 500.0 MiB), within 10%" in out


def test_one_run_a_side_is_undecided_the_noise_between_runs_unknown(tmp_path, capsys):
    # one process a side: its steps' spread says nothing of how far a second run would land
    a, b = sweep(tmp_path / "a", [100]), sweep(tmp_path / "b", [70])
    code, out = report(capsys, a, b, "--fail-if-worse", "0.1")
    assert code == INCONCLUSIVE, out
    assert "undecided: batch_size=8: training 30.0 % slower (B/A" in out
    assert "a side rests on one counted job, and nothing measured the noise between runs" in out


def test_the_observed_case_a_contended_side_is_undecided(tmp_path, capsys):
    # the same sweep run again beside two CPU-bound processes read B/A=0.121: a regression
    a = sweep(tmp_path / "a", [100, 101])
    b = sweep(tmp_path / "b", [12.1, 12.3], flags=["contended:train"])
    code, out = report(capsys, a, b, "--fail-if-worse", "0.1", "--out", str(tmp_path / "d"))
    assert code == INCONCLUSIVE, out
    assert "undecided: batch_size=8: training 87.9 % slower: B: contended 2/2" in gate_lines(out), out
    assert not any(line.startswith("regression") for line in gate_lines(out))
    changes = json.loads((tmp_path / "d" / "diff.json").read_text())["changes"]
    train = next(c for c in changes if c["metric"] == "train_examples_per_second")
    assert (train["verdict"], train["verdict_reason"]) == ("inconclusive", "B: contended 2/2")
    assert "0.12x ?" in out  # the table reads it as the sweep table does
    # without --fail-if-worse: one warning, no gate, exit 0
    code, out = report(capsys, a, b)
    assert code == 0 and not gate_lines(out), out
    (warning,) = [line for line in out.splitlines() if "warning:" in line]
    assert "2 of 4 comparisons undecided; the first: undecided: batch_size=8: training 87.9 % slower: B:" \
        " contended 2/2" in warning


def test_planted_spikes_are_undecided(tmp_path, capsys):
    a, b = sweep(tmp_path / "a", [100, 101]), sweep(tmp_path / "b", [100, 101], spiky=True,
                                                     flags=["noisy:train"])
    code, out = report(capsys, a, b, "--fail-if-worse", "0.1")
    assert code == INCONCLUSIVE, out
    assert "B: noisy 2/2" in out


def test_a_regression_wins_over_undecided(tmp_path, capsys):
    a = sweep(tmp_path / "a", [100, 101], batch_sizes=(8, 16))
    b = tmp_path / "b"
    sweep(b / "quiet", [70, 71], batch_sizes=(8,))  # batch 8: a real 30% slow-down
    sweep(b / "busy", [20, 30], batch_sizes=(16,), flags=["contended:train"])
    code, out = report(capsys, a, str(b), "--fail-if-worse", "0.1")
    assert code == REGRESSION, out
    said = {line.split(":")[0] + ":" + line.split(":")[1] for line in gate_lines(out)
            if "training" in line}
    assert said == {"regression: batch_size=8", "undecided: batch_size=16"}, out


def test_a_side_that_failed_is_a_failure_for_b_and_undecided_for_a(tmp_path, capsys):
    quiet = sweep(tmp_path / "quiet", [100, 101], batch_sizes=(8,))
    broken = tmp_path / "broken"
    for n in range(2):
        write_job(broken / str(n), ["batch_size=8", "repeat=1", f"+sweep_round={n}"],
                  status="failed", reason="RuntimeError: boom", schema_version=3)
    code, out = report(capsys, quiet, str(broken), "--fail-if-worse", "0.1")
    assert code == REGRESSION, out
    assert "failed: run: training: no figure where the baseline has one (failed)" in out
    code, out = report(capsys, str(broken), quiet, "--fail-if-worse", "0.1")
    assert code == INCONCLUSIVE, out
    assert gate_lines(out) == ["undecided: run: the baseline has no figure (failed)"]


def test_help_names_every_exit_status(capsys):
    epilog = parser().epilog
    for status in ("0 done", "1 --fail-if-worse found a regression", "2 bad input",
                   "3 --fail-if-worse found no regression but could not decide"):
        assert status in epilog


def precision_sweep(root: Path, bf16_flags: list[str] | None = None,
                    bf16_rates: tuple[float, float] = (246, 250)) -> Path:
    """fp32 quiet at ~100 ex/s, bf16 at `bf16_rates`, two rounds each."""
    n = 0
    for precision, rates, flags in (("fp32", (100, 101), None), ("bf16", bf16_rates, bf16_flags)):
        for round_, rate in enumerate(rates):
            write_job(root / str(n), ["batch_size=8", f"precision={precision}", "repeat=1",
                                      f"+sweep_round={round_}"],
                      values={**steps(rate), **steps(4 * rate, phase="inference"),
                              "peak_rss_bytes": 500 * 2**20}, flags=flags, schema_version=3)
            n += 1
    return root


def test_a_contended_point_is_never_best_and_its_speedup_is_a_question(tmp_path):
    comparison = build(collect(precision_sweep(tmp_path / "busy", ["contended:train"])))
    points = comparison.points.set_index("precision")
    assert not points["train_best"].any()
    bf16 = points.loc["bf16"]
    assert re.fullmatch(r"2\.4\dx \?", ratio_cell(bf16, "train_speedup"))  # no range
    assert value_cell(bf16, "train_examples_per_second").endswith(" contended")
    assert (bf16["train_speedup_verdict"], bf16["train_speedup_verdict_reason"]) == (
        "inconclusive", "B: contended 2/2")
    # its inference was quiet: that speed-up stands, and is the row's best
    assert bf16["inference_best"] is True
    assert bf16["inference_speedup_verdict"] == "real"
    assert not value_cell(bf16, "inference_examples_per_second").endswith("contended")
    text = "\n".join(legend(comparison))
    for mark in ("contended: other processes took the CPUs", "?: undecided", "*: the same within"):
        assert mark in text
    training = next(s for s in sections(comparison) if s.title == "Training")
    header, rows = terminal_table(training, comparison)
    ex_s, between, speedup = rows[0][3].split("\n")
    assert ex_s.endswith(" contended") and speedup.endswith("x ?")
    # the same sweep on a quiet machine: a real speed-up, and bf16 is best
    quiet = build(collect(precision_sweep(tmp_path / "quiet"))).points.set_index("precision")
    assert quiet.loc["bf16", "train_best"] is True
    assert quiet.loc["bf16", "train_speedup_verdict"] == "real"
    assert re.fullmatch(r"2\.4\dx \(2\.4\d-2\.5\d\)", ratio_cell(quiet.loc["bf16"], "train_speedup"))


def test_the_verdict_and_its_reason_are_columns_of_the_csv_and_json(tmp_path, capsys):
    root = precision_sweep(tmp_path / "s", ["noisy:train"], bf16_rates=(100.5, 99.5))
    main_code = None
    with pytest.raises(SystemExit) as stopped:
        main([str(root), "--no-plot"])
    main_code = stopped.value.code
    assert main_code == 0
    rows = {r["precision"]: r for r in csv.DictReader((root / "comparison.csv").open())}
    assert rows["bf16"]["train_speedup_verdict"] == "inconclusive"
    assert rows["bf16"]["train_speedup_verdict_reason"] == "B: noisy 2/2"
    assert rows["bf16"]["train_noisy"] == "True" and rows["bf16"]["train_counted"] == "0"
    assert rows["bf16"]["inference_speedup_verdict"] == "same"  # identical, quiet
    assert rows["fp32"]["train_speedup_verdict"] == ""  # the baseline: nothing to judge
    points = json.loads((root / "comparison.json").read_text())["points"]
    bf16 = next(p for p in points if p["precision"] == "bf16")
    assert bf16["train_speedup_verdict_reason"] == "B: noisy 2/2"
    md = (root / "comparison.md").read_text()
    assert "| 1.00x ? |" in md and re.search(r"\| 1\.00x \(0\.9\d-1\.0\d\)\* \|", md)
