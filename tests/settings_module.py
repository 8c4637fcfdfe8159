"""A LightningModule that changes process-wide torch settings, to test that the next job of a
sweep does not inherit them (#23).

`model._target_=settings_module.SettingsFlipper +model.flip=true,false`: the flip=true job
sets FLIPPED in its setup hook, as a user's module might (in the constructor, the Trainer
built after it would reset deterministic algorithms: trainer.deterministic=false); the
flip=false job sets nothing.
"""

from __future__ import annotations

from typing import Any

import torch
from typing_extensions import override

from harness.workload.model import TransformerModule

# harness.run.torch_settings names -> the values a flip=true job sets.
FLIPPED = {"cudnn_benchmark": True, "float32_matmul_precision": "medium",
           "deterministic_algorithms": True, "deterministic_warn_only": True}


class SettingsFlipper(TransformerModule):
    def __init__(self, *args: Any, flip: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.flip = flip

    @override
    def setup(self, stage: str) -> None:
        if self.flip:
            torch.backends.cudnn.benchmark = True
            torch.set_float32_matmul_precision("medium")
            torch.use_deterministic_algorithms(True, warn_only=True)
