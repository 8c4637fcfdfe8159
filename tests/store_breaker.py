"""Test helper: a callback that removes the MLflow store when training ends, so the
post-run logging finds it gone (tests/test_corpus_runs.py).

Use: `+profiler.breaker._target_=store_breaker.RemoveStore +profiler.breaker.path=/abs/mlflow.db`
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback


class RemoveStore(Callback):
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.path.unlink()
