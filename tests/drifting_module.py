"""A planted machine drift: every training step sleeps longer the later it runs.

Step time = base_s x (1 + rate x seconds since $HARNESS_TEST_DRIFT_T0), the same for every
job of a sweep whatever its settings, so two identical points differ only by when they
ran; `factor` plants a real difference on top (+model.factor=1.0,1.2: 20 % more per step).
Plug it in with `model._target_=drifting_module.DriftingModule +model.base_s=0.02
+model.rate=0.5` (tests/ is on PYTHONPATH for runs started by conftest.run_harness).
"""

from __future__ import annotations

import os
import time
from typing import Any

from harness.workload.model import TransformerModule


class DriftingModule(TransformerModule):
    def __init__(self, *args: Any, base_s: float = 0.02, rate: float = 0.5, factor: float = 1.0,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.base_s = base_s * factor
        self.rate = rate
        self.origin = float(os.environ.get("HARNESS_TEST_DRIFT_T0", time.time()))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        time.sleep(self.base_s * (1 + self.rate * (time.time() - self.origin)))
        return super().training_step(batch, batch_idx)
