"""The user's own pieces kept: data=none (the module's own dataloaders), the user's
trainer.callbacks beside the presets, and the start directory on the import path.

Runs are in-process (run_job on a composed config); the CLI is run only where the console
script's own behaviour is the point (its sys.path, Hydra's `data=null`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run_harness
from omegaconf import OmegaConf, open_dict
from test_config_compose import composed

from harness.config.targets import check_targets
from harness.errors import ConfigError, HarnessError
from harness.run.build import build_user_callbacks
from harness.run.job import run_job


def _own_module_config(tmp_path: Path, target: str, *overrides: str, **model: object):
    cfg = composed("data=none", "logger=none", "trainer.enable_progress_bar=false",
                   "profiler.speed.warmup_steps=2", *overrides, tmp_path=tmp_path)
    with open_dict(cfg):
        cfg.model = OmegaConf.create({"_target_": target, **model})
    return cfg


def _speed(run_dir: Path) -> dict:
    return json.loads((run_dir / "reports" / "speed.json").read_text())["phases"]


def test_data_none_trains_and_infers_on_the_modules_own_loaders(tmp_path):
    # 24 training and 16 validation examples in batches of 4: 6 and 4 steps, 2 of warm-up.
    cfg = _own_module_config(tmp_path, "own_loaders.TrainValOnly", "batch_size=4")
    result = run_job(cfg, tmp_path, ["data=none"])
    assert result.status == "ok", result.reason
    assert result.data is None
    assert result.observed.examples_per_batch == {"train": 4, "validation": 4, "inference": 4}
    phases = _speed(tmp_path)
    assert phases["train"]["measured_steps"] == 6 - 2
    # No predict_dataloader: inference ran on the module's val_dataloader.
    assert phases["inference"]["measured_steps"] == 4 - 2
    assert json.loads((tmp_path / "result.json").read_text())["data"] is None


def test_data_none_inference_only_sets_up_the_validation_data_itself(tmp_path):
    cfg = _own_module_config(tmp_path, "own_loaders.TrainValOnly", "batch_size=4",
                             "mode=inference")
    result = run_job(cfg, tmp_path, [])
    assert result.status == "ok", result.reason
    assert _speed(tmp_path)["inference"]["measured_steps"] == 2


def test_data_none_without_inference_data_keeps_the_training_figures(tmp_path):
    cfg = _own_module_config(tmp_path, "own_loaders.TrainOnly", "batch_size=4")
    result = run_job(cfg, tmp_path, [])
    assert result.status == "partial"
    assert result.phase_errors["inference"] == (
        "inference has no data: TrainOnly (data=none: the module's own) has neither a"
        " predict_dataloader nor a val_dataloader. Fix: give it one, or set mode=train")
    assert result.metrics["train_measured_steps"] == 4


def test_a_batch_size_the_modules_loaders_ignore_names_them(tmp_path):
    cfg = _own_module_config(tmp_path, "own_loaders.TrainValOnly", "batch_size=8",
                             "mode=train")
    result = run_job(cfg, tmp_path, ["batch_size=8"])
    assert result.status == "invalid"
    assert result.reason == (
        "batch_size=8 but train batches hold 4 examples per rank: the module's own dataloaders"
        " (data=none) set the batch size. Fix: set batch_size=4 (per rank) to label the run"
        " with it")


def test_user_callbacks_run_beside_the_presets(tmp_path):
    """A dict of named nodes (lightning-hydra-template's `callbacks` group), one left null."""
    cfg = _own_module_config(tmp_path, "own_loaders.TrainValOnly", "batch_size=4", "mode=train")
    with open_dict(cfg):
        cfg.trainer.callbacks = OmegaConf.create({
            "counter": {"_target_": "own_loaders.BatchCounter", "path": str(tmp_path / "seen")},
            "model_checkpoint": {"_target_": "lightning.pytorch.callbacks.ModelCheckpoint",
                                 "dirpath": str(tmp_path / "checkpoints")},
            "early_stopping": None,
        })
    result = run_job(cfg, tmp_path, [])
    assert result.status == "ok", result.reason
    assert (tmp_path / "seen").read_text() == "6"  # the user's callback saw every batch
    # conf/trainer/default.yaml turns checkpointing off; asking for a ModelCheckpoint wins.
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["epoch=0-step=6.ckpt"]
    assert _speed(tmp_path)["train"]["measured_steps"] == 4  # and the presets still ran


def test_user_callbacks_as_a_list_a_node_or_null(tmp_path):
    target = {"_target_": "own_loaders.BatchCounter", "path": str(tmp_path / "x")}
    as_list = OmegaConf.create([target, None, target])
    assert [type(c).__name__ for c in build_user_callbacks(as_list)] == ["BatchCounter"] * 2
    assert len(build_user_callbacks(OmegaConf.create(target))) == 1
    assert build_user_callbacks(None) == []


def test_a_user_callback_that_is_not_a_callback_is_named():
    with pytest.raises(HarnessError, match=r"trainer\.callbacks\.timer\._target_="
                       r"collections\.OrderedDict built a OrderedDict, not a lightning"):
        build_user_callbacks(OmegaConf.create({"timer": {"_target_": "collections.OrderedDict"}}))


def test_callbacks_that_do_not_import_are_refused_before_the_run(tmp_path):
    cfg = composed("logger=none", tmp_path=tmp_path)
    with open_dict(cfg):
        cfg.trainer.callbacks = [{"_target_": "nowhere.Callback"}]
    with pytest.raises(ConfigError, match=r"^trainer\.callbacks\[0\]\._target_='nowhere"):
        check_targets(cfg)
    with open_dict(cfg):
        cfg.trainer.callbacks = "early_stopping"
    with pytest.raises(ConfigError, match="a callback node with a _target_, a list or a dict"):
        check_targets(cfg)


def test_the_start_directory_is_on_the_import_path(tmp_path, monkeypatch):
    (tmp_path / "start_dir_module.py").write_text(
        "import lightning.pytorch as pl\n\n\nclass Here(pl.LightningModule):\n    pass\n")
    cfg = composed("logger=none", tmp_path=tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    with open_dict(cfg):
        cfg.model._target_ = "start_dir_module.Here"
    # In a Hydra job it is the directory the command started in (hydra.runtime.cwd),
    # even when the job changed into its run directory (hydra.job.chdir=true).
    from hydra.core.hydra_config import HydraConfig

    OmegaConf.set_readonly(cfg.hydra, False)
    cfg.hydra.runtime.cwd = str(tmp_path)
    HydraConfig.instance().set_config(cfg)
    monkeypatch.chdir(tmp_path.parent)
    check_targets(cfg)
    assert sys.path[0] == str(tmp_path)


DDP = ("trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu")


@pytest.mark.slow
def test_the_harness_command_imports_from_where_it_starts(tmp_path, monkeypatch):
    """The console script's sys.path has its bin directory, not the cwd: harness adds it, in
    every DDP rank (rank 0 is the command's own process, as a single run's). data=none with a
    module that owns its loaders, and a user callback from the same folder. The run is also
    README's `harness trainer.strategy=ddp trainer.devices=2` (docs-test: composed only): its
    terminal is held to what tests/test_docs_commands.py holds a page's commands to.
    OMP_NUM_THREADS unset, as in a user's shell (conftest sets it for the suite): Lightning
    sets it for DDP, and the job puts it back (a sweep's next job would inherit it)."""
    from test_docs_commands import terminal_problems

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    ranks = 2
    source = Path(__file__).with_name("own_loaders.py").read_text()
    (tmp_path / "my_own_code.py").write_text(source)
    (tmp_path / "my_conf" / "model").mkdir(parents=True)
    (tmp_path / "my_conf" / "model" / "own.yaml").write_text(
        "_target_: my_own_code.TrainValOnly\n")
    done = run_harness(
        tmp_path, "-cd", "my_conf", "model=own", "data=none", "batch_size=4",
        "logger=none", "trainer.enable_progress_bar=false",
        "profiler.speed.warmup_steps=1", *DDP,
        "+trainer.callbacks=[{_target_: my_own_code.BatchCounter, path: seen}]", fast=False,
        fresh=True, env={"COLUMNS": "80"})  # the console script itself: its import path is the point
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "ok" and result["device"]["world_size"] == ranks
    assert "env:OMP_NUM_THREADS" in result["isolation"]["torch_settings_put_back"]
    # 24 examples in batches of 4, split over the ranks (Lightning's distributed sampler).
    assert (tmp_path / "seen").read_text() == str(6 // ranks)
    assert result["metrics"]["train_measured_steps"] == 6 // ranks - 1
    assert "my_own_code" not in "".join(sys.path)  # it came from the start directory alone
    assert "Speed per rank" in done.stdout
    assert not terminal_problems(done.stdout, done.stderr, verbose=False, width=80)


def test_data_null_says_data_none_in_one_line(harness):
    done = harness("data=null")
    assert done.returncode == 2
    assert done.stderr.strip() == ("harness: error: data=null: a config group takes an option"
                                   " name, not null. Fix: data=none (the LightningModule's own"
                                   " dataloaders)")


def test_lightnings_boring_model_on_its_own_loaders_as_documented(tmp_path):
    """docs/own-model.md's command: the built-in model's keys removed with data=none (its
    `dim` follows data.dim, 128 when there is no data config, so removing it resolves)."""
    overrides = ["model._target_=lightning.pytorch.demos.boring_classes.BoringModel",
                 "~model.dim", "~model.depth", "~model.num_heads", "~model.mlp_ratio",
                 "~model.dropout", "~model.lr", "data=none"]
    cfg = composed(*overrides, "logger=none", "trainer.enable_progress_bar=false",
                   tmp_path=tmp_path)
    result = run_job(cfg, tmp_path, overrides)
    assert result.status == "ok", result.reason
    # BoringModel's own 64-example loaders, batches of 1, 5 warm-up steps per phase.
    assert [result.metrics[f"{p}_measured_steps"] for p in ("train", "validation", "inference")
            ] == [59, 59, 59]
    assert result.observed.notes == [
        "batch_size=32 but train batches hold 1 examples per rank: the module's own dataloaders"
        " (data=none) set the batch size. Fix: set batch_size=1 (per rank) to label the run"
        " with it"]
