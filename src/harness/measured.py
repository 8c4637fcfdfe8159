"""What counts as a measured number: a finite int or float, never a bool, NaN or infinity."""

from __future__ import annotations

import math
from typing import Any


def is_finite_number(value: Any) -> bool:
    """True for 3, 2.5 and 0; False for None, True, NaN, inf and strings."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
