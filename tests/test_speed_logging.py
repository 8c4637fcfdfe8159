"""Rates reach the loggers outside the timed steps: a slow logger costs no step any time."""

from __future__ import annotations

import time

import lightning.pytorch as pl
from lightning.pytorch.loggers.logger import Logger

from harness.profilers.speed import SpeedMonitor
from harness.workload.data import SyntheticDataModule
from harness.workload.model import TransformerModule

SLOW_S = 0.05  # what each log_metrics call costs, like a synchronous write to a remote store


class SlowLogger(Logger):
    def __init__(self) -> None:
        super().__init__()
        self.logged: list[tuple[str, int]] = []

    @property
    def name(self) -> str:
        return "slow"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        time.sleep(SLOW_S)
        self.logged.extend((key, step) for key in metrics)


def test_a_slow_logger_is_not_charged_to_any_step():
    logger, monitor = SlowLogger(), SpeedMonitor(warmup_steps=0)
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=2, logger=logger, callbacks=[monitor], log_every_n_steps=1000,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    data = SyntheticDataModule(batch_size=2, seq_len=8, dim=16, train_batches=6, val_batches=3)
    trainer.fit(TransformerModule(dim=16), datamodule=data)

    train = monitor.timers["train"].steps
    assert len(train) == 12
    # every step and every batch wait is shorter than one logger call
    assert max(s.step_s for s in train) < SLOW_S and max(s.wait_s for s in train) < SLOW_S
    rates = [step for key, step in logger.logged if key == "training_rate"]
    assert rates == list(range(1, 13))  # one per step, at trainer.global_step after it
    assert len([k for k, _ in logger.logged if k == "validation_rate"]) == 6
