"""The built-in model, plus the kind of output libraries make: a Python warning and an
INFO line from a logger of its own, both at construction (once per job).

Plug it in with `model._target_=noisy_module.Noisy` (the test fixture puts tests/ on
PYTHONPATH). tests/test_terminal.py checks where these lines end up.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from harness.workload.model import TransformerModule

WARNING_TEXT = "noisy-module: a hint nobody asked for"
INFO_TEXT = "noisy-module: a tip from a library"


class Noisy(TransformerModule):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        warnings.warn(WARNING_TEXT, UserWarning, stacklevel=1)
        logging.getLogger("noisy_library").info(INFO_TEXT)
