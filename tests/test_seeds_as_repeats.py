"""`harness -m batch_size=8,16 seed=0,1,2`: seeds are repeats of a point, not variants
(hydra.callbacks.sweep_report.repeat_keys, harness-report --repeat-keys)."""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf
from sweep_files import metrics, steps, write_job

from harness.config.locations import conf_dir
from harness.errors import ConfigError
from harness.result.jobs import collect
from harness.sweep.callbacks import CheckCallback
from harness.sweep.diff import diff
from harness.sweep.render import _preamble, ratio_cell
from harness.sweep.report_cli import main
from harness.sweep.table import REPEAT_KEYS, build, check_settings


def seeded(root, per_seed: dict[str, list[float]], batch_sizes=(8, 16)):
    """One job per batch size x variant x seed; `per_seed`: precision -> a rate per seed."""
    n = 0
    for bs in batch_sizes:
        for precision, rates in per_seed.items():
            for seed, rate in enumerate(rates):
                overrides = [f"batch_size={bs}", f"seed={seed}"]
                if len(per_seed) > 1:
                    overrides.insert(1, f"precision={precision}")
                write_job(root / str(n), overrides, schema_version=3,
                          values={**steps(rate * bs / 8, batch_size=bs),
                                  "peak_rss_bytes": 500 * 2**20})
                n += 1
    return root


def test_seeds_pool_into_the_samples_of_each_point(tmp_path):
    root = tmp_path / "sweep"
    n = 0
    for bs in (8, 16):
        for seed, train in zip((0, 1, 2), (100.0, 104.0, 98.0), strict=True):
            write_job(root / str(n), [f"batch_size={bs}", f"seed={seed}"],
                      values=metrics(train * bs / 8, 200.0, batch_size=bs))
            n += 1
    comparison = build(collect(root))
    assert comparison.row_key == "batch_size" and comparison.variant_keys == []
    assert comparison.repeat_keys == {"seed": ["0", "1", "2"]}
    points = comparison.points
    assert list(points["samples"]) == [3, 3]
    assert list(points["pooled"]) == ["3 seeds", "3 seeds"]
    assert points.loc[0, "train_examples_per_second"] == pytest.approx(100.0)  # 100, 104, 98
    band = points.loc[0, "train_band"]  # 98..104, widened to the noise between the seeds
    assert points.loc[0, "train_examples_per_second_min"] == band.low and band.low <= 98.0
    assert "Pooled as repeats of each point: seed=0,1,2" in _preamble(comparison)


def test_the_speedup_verdict_uses_the_spread_across_seeds(tmp_path):
    # bf16 1.3x faster; the seeds agree within 2%: real, and best
    tight = build(collect(seeded(tmp_path / "tight", {"fp32": [100, 101, 99],
                                                      "bf16": [130, 131, 129]})))
    points = tight.points.set_index(["batch_size", "precision"])
    assert list(tight.points["samples"]) == [3, 3, 3, 3]
    assert points.loc[("8", "bf16"), "train_speedup_verdict"] == "real"
    assert points.loc[("8", "bf16"), "train_best"] is True
    # the same medians, but the seeds spread by 40%: no speed-up can be told, none is best
    wide = build(collect(seeded(tmp_path / "wide", {"fp32": [100, 120, 80],
                                                    "bf16": [130, 160, 100]})))
    points = wide.points.set_index(["batch_size", "precision"])
    assert points.loc[("8", "bf16"), "train_speedup_verdict"] == "inconclusive"
    assert ratio_cell(points.loc[("8", "bf16")], "train_speedup").endswith(" ?")
    assert not wide.points["train_best"].any()


def test_no_repeat_keys_makes_seed_a_variant_again(tmp_path):
    root = seeded(tmp_path / "s", {"fp32": [100, 104]}, batch_sizes=(8,))
    assert build(collect(root), repeat_keys=()).variant_keys == ["seed"]
    with pytest.raises(SystemExit) as stopped:
        main([str(root), "--repeat-keys", "", "--no-write"])
    assert stopped.value.code == 0
    assert build(collect(root)).variant_keys == []


def test_a_row_or_baseline_over_a_pooled_key_is_one_line_naming_it():
    swept = {"batch_size": ["8", "16"], "seed": ["0", "1", "2"]}
    with pytest.raises(ConfigError, match=r"sweep_report\.rows='seed'.*seed is in hydra\.callbacks"
                       r"\.sweep_report\.repeat_keys.*Fix: hydra\.callbacks\.sweep_report\.rows"
                       r"=batch_size"):
        check_settings("seed", None, swept)
    with pytest.raises(ConfigError, match=r"--baseline='seed=0'.*seed is in --repeat-keys"):
        check_settings(None, "seed=0", swept, prefix="--")
    check_settings("seed", None, swept, repeat_keys=())  # not pooled: a row like any other


def test_the_sweep_refuses_rows_over_a_pooled_key_when_it_starts(tmp_path, capsys):
    def config(**report: object) -> object:
        return OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "m")},
                                           "sweeper": {"params": None},
                                           "callbacks": {"sweep_report": report},
                                           "overrides": {"task": ["batch_size=8,16", "seed=0,1"]}},
                                 "batch_size": 8, "seed": 0})

    with pytest.raises(SystemExit) as stopped:
        CheckCallback().on_multirun_start(config(rows="seed", repeat_keys=["seed"]))
    assert stopped.value.code == 2
    line = capsys.readouterr().err.strip()
    assert line.count("\n") == 0 and "hydra.callbacks.sweep_report.rows='seed'" in line
    with pytest.raises(SystemExit):
        CheckCallback().on_multirun_start(config(repeat_keys={"seed": 1}))
    assert "hydra.callbacks.sweep_report.repeat_keys=" in capsys.readouterr().err


def test_the_config_pools_seed_and_rounds_by_default():
    config = yaml.safe_load((conf_dir() / "config.yaml").read_text())
    report = config["hydra"]["callbacks"]["sweep_report"]
    assert tuple(report["repeat_keys"]) == REPEAT_KEYS == ("seed", "sweep_round")


def test_repeat_keys_never_make_a_setup_difference(tmp_path):
    # A: one run at seed 0; B: the same point pooled over three seeds
    a = write_job(tmp_path / "a", ["batch_size=8", "seed=0"], values=metrics(100.0, 200.0))
    b = seeded(tmp_path / "b", {"fp32": [100, 101, 99]}, batch_sizes=(8,))
    result = diff(build(collect(a)), build(collect(b)))
    assert result.setup_changes == {}
    assert result.changes
    # two single runs at different seeds: no setup difference either
    c = write_job(tmp_path / "c", ["batch_size=8", "seed=1"], values=metrics(100.0, 200.0))
    assert diff(build(collect(a)), build(collect(c))).setup_changes == {}
