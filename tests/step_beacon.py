"""A test-only callback that writes the number of training steps done to a file,
so a test knows when a run is mid-training before it sends a signal.

Use: `+profiler.beacon._target_=step_beacon.StepBeacon +profiler.beacon.path=/abs/file`
(tests/ is on PYTHONPATH for runs started by conftest.run_harness).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback


class StepBeacon(Callback):
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.steps = 0

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.steps += 1
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(str(self.steps))
        tmp.replace(self.path)
