"""Rates reach the loggers outside the timed steps: a slow logger costs no step any time, and
neither does the run's between-steps work (a logger's flush to its store)."""

from __future__ import annotations

import time

import lightning.pytorch as pl
import pytest
from lightning.pytorch.loggers.logger import Logger

from harness.profilers import step_timer
from harness.profilers.preset import Presets
from harness.profilers.speed import SpeedPreset
from harness.workload.data import SyntheticDataModule
from harness.workload.model import TransformerModule

SLOW_S = 1000.0  # what each log_metrics call costs on the speed preset's clock


class FakeClock:
    """perf_counter plus the time the slow logger "spent" so far."""

    def __init__(self) -> None:
        self.real = time.perf_counter
        self.spent = 0.0

    def __call__(self) -> float:
        return self.real() + self.spent


class SlowLogger(Logger):
    """Every call moves the clock on by SLOW_S, as a very slow store write would."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.logged: list[tuple[str, int]] = []
        self.values: list[dict[str, float]] = []

    @property
    def name(self) -> str:
        return "slow"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        self.clock.spent += SLOW_S
        self.logged.extend((key, step) for key in metrics)
        self.values.append(dict(metrics))


def test_a_slow_logger_is_not_charged_to_any_step(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(step_timer.time, "perf_counter", clock)
    logger, monitor = SlowLogger(clock), SpeedPreset(warmup_steps=0)
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=2, logger=logger, callbacks=[monitor], log_every_n_steps=1000,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    data = SyntheticDataModule(batch_size=2, seq_len=8, dim=16, train_batches=6, val_batches=3)
    trainer.fit(TransformerModule(dim=16), datamodule=data)

    rates = [step for key, step in logger.logged if key == "training_rate"]
    assert rates == list(range(1, 13))  # one per step, at trainer.global_step after it
    assert len([k for k, _ in logger.logged if k == "validation_rate"]) == 6
    # the logger ran (and moved the clock) 18+ times, yet no step or batch wait contains a call
    for phase in ("train", "validation"):
        steps = monitor.timers[phase].steps
        assert max(s.step_s for s in steps) < SLOW_S and max(s.between_s for s in steps) < SLOW_S
    # beside each it/s, the step's examples/s: 2 examples per step, so twice the it/s
    train = [v for v in logger.values if "training_rate" in v]
    assert len(train) == 12
    assert [v["training_examples_rate"] for v in train] == pytest.approx(
        [2 * v["training_rate"] for v in train], rel=1e-12)


def _fit(callbacks: list, logger=False) -> None:
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=2, logger=logger, callbacks=callbacks,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    data = SyntheticDataModule(batch_size=2, seq_len=8, dim=16, train_batches=6, val_batches=3)
    trainer.fit(TransformerModule(dim=16), datamodule=data)


def test_between_steps_work_runs_once_where_no_step_is_timed(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(step_timer.time, "perf_counter", clock)
    ran: list[str] = []

    def flush() -> None:  # a store write as slow as the slow logger's
        clock.spent += SLOW_S
        ran.append("flush")

    # The speed preset runs it before its clock restarts, whatever the callbacks' order;
    # harness's observer, also in the Trainer, leaves it to the preset.
    presets = Presets.of({"speed": SpeedPreset(warmup_steps=0)})
    presets.shared.between_steps.append(flush)
    _fit([presets.observer, *presets.callbacks])
    assert len(ran) == 4  # after each of 2 validations and at each of 2 epoch ends
    monitor = presets.by_name["speed"]
    for phase in ("train", "validation"):
        steps = monitor.timers[phase].steps
        assert max(s.step_s for s in steps) < SLOW_S and max(s.between_s for s in steps) < SLOW_S
    # Without a preset that times steps, the observer runs it at the same moments.
    ran.clear()
    alone = Presets.of({})
    alone.shared.between_steps.append(flush)
    _fit([alone.observer])
    assert len(ran) == 4
