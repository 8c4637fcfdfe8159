"""Users' own LightningModule and DataModule, through `_target_` overrides and config groups."""

from __future__ import annotations

import pytest
from conftest import TESTS_DIR

pytestmark = pytest.mark.slow


def _check(done, batch_size: int) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "ok"
    assert result["model"] == "user_workload.TinyClassifier"
    phases = done.report("speed")["phases"]
    # 96 examples / batch_size batches per epoch, warm-up of 2 left out.
    assert phases["train"]["measured_steps"] == 96 // batch_size - 2
    assert phases["inference"]["measured_steps"] == 96 // batch_size - 2
    s_per_it = phases["train"]["seconds_per_iteration"]
    assert phases["train"]["examples_per_second"] == pytest.approx(batch_size / s_per_it)


def test_user_module_through_target_overrides(harness):
    done = harness(
        "model._target_=user_workload.TinyClassifier",
        "~model.dim", "~model.depth", "~model.num_heads", "~model.mlp_ratio", "~model.dropout",
        "~model.lr",
        "data._target_=user_workload.TinyData",
        "~data.seq_len", "~data.dim", "~data.train_batches", "~data.val_batches",
        "~data.predict_batches", "~data.generate_on", "~data.num_workers", "~data.pin_memory",
        "+data.examples=96",
        "batch_size=8",
        "profiler.speed.warmup_steps=2",
        "logger=none",
        fast=False,
    )
    _check(done, 8)


def test_user_config_group_through_config_dir(harness):
    done = harness(
        "--config-dir", str(TESTS_DIR / "user_conf"),
        "model=tiny", "data=tiny", "batch_size=12", "profiler.speed.warmup_steps=2",
        "trainer.enable_progress_bar=false", "logger=none",
        fast=False,
    )
    _check(done, 12)


def test_target_that_is_not_a_lightning_module(harness):
    done = harness("model._target_=user_workload.NotAModule", "~model.dim", "~model.depth",
                   "~model.num_heads", "~model.mlp_ratio", "~model.dropout", "~model.lr")
    assert done.returncode != 0
    assert done.returncode == 2  # found on the class, before anything is built
    assert "model._target_" in done.stderr and "LightningModule subclass" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.result()["status"] == "failed"
