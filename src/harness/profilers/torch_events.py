"""Rows of the PyTorch profiler's `key_averages()`, reading torch's `cuda_*` and `device_*` names."""

from __future__ import annotations

import re
from typing import Any

# Sort keys a user may name (torch's attribute names, both spellings) -> column of a row.
SORT_COLUMNS: dict[str, str] = {
    "self_cpu_time_total": "self_cpu_time_ms",
    "cpu_time_total": "cpu_time_ms",
    "self_device_time_total": "self_device_time_ms",
    "device_time_total": "device_time_ms",
    "self_cuda_time_total": "self_device_time_ms",
    "cuda_time_total": "device_time_ms",
    "self_cpu_memory_usage": "self_cpu_memory_bytes",
    "cpu_memory_usage": "cpu_memory_bytes",
    "self_device_memory_usage": "self_device_memory_bytes",
    "device_memory_usage": "device_memory_bytes",
    "self_cuda_memory_usage": "self_device_memory_bytes",
    "cuda_memory_usage": "device_memory_bytes",
    "count": "calls",
}

# Not operators: record_function and module ranges, and (with_stack) Python frames "f.py(17): g".
_ANNOTATION_PREFIXES = ("[pl][", "ProfilerStep", "nn.Module:")
_PYTHON_FRAME = re.compile(r"^\S+\(\d+\): |^<built-in ")


def _first(event: Any, *names: str) -> float:
    for name in names:
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0


def event_row(event: Any) -> dict[str, Any]:
    """One averaged event as a flat row: bytes and milliseconds."""
    return {
        "name": event.key,
        "calls": int(event.count),
        "self_cpu_memory_bytes": int(_first(event, "self_cpu_memory_usage")),
        "cpu_memory_bytes": int(_first(event, "cpu_memory_usage")),
        "self_device_memory_bytes": int(_first(event, "self_device_memory_usage",
                                               "self_cuda_memory_usage")),
        "device_memory_bytes": int(_first(event, "device_memory_usage", "cuda_memory_usage")),
        "self_cpu_time_ms": _first(event, "self_cpu_time_total") / 1000.0,
        "cpu_time_ms": _first(event, "cpu_time_total") / 1000.0,
        "self_device_time_ms": _first(event, "self_device_time_total",
                                      "self_cuda_time_total") / 1000.0,
        "device_time_ms": _first(event, "device_time_total", "cuda_time_total") / 1000.0,
        "flops": int(getattr(event, "flops", 0) or 0),
        "input_shapes": str(event.input_shapes) if getattr(event, "input_shapes", None) else "",
    }


def is_operator(row: dict[str, Any]) -> bool:
    name = str(row["name"])
    return not name.startswith(_ANNOTATION_PREFIXES) and not _PYTHON_FRAME.match(name)


def top_rows(rows: list[dict[str, Any]], column: str, limit: int) -> list[dict[str, Any]]:
    """The `limit` rows with the largest `column` (all rows when limit is -1)."""
    ordered = sorted(rows, key=lambda row: row[column], reverse=True)
    return ordered if limit < 0 else ordered[:limit]


def memory_rows(rows: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Operators with the most memory (CPU + device, including children), largest first."""
    operators = [dict(row, total_memory_bytes=row["cpu_memory_bytes"] + row["device_memory_bytes"])
                 for row in rows if is_operator(row)]
    return top_rows(operators, "total_memory_bytes", limit)
