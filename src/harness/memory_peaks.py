"""The peak memory of one measurement, and the passes that must not count in it.

Two high-water marks make `peak_rss_bytes` and `peak_device_*_bytes`: the kernel's
peak resident set of the process (VmHWM, Linux: reset by writing 5 to
/proc/self/clear_refs) and torch's CUDA allocator peaks. Each measurement resets both at
its start. A pass harness adds to a run (the diagnose preset's speed-of-light passes) runs
inside `excluded()`: the marks reached before it are carried over, the marks are reset
after it, and `read()` reports the larger of the two, so the pass's own memory (a copy of
the model's state, say) never shows as the run's peak.
"""

from __future__ import annotations

import contextlib
import resource
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")
# Marks reached before an excluded pass, carried into read(): name -> bytes.
_carried: dict[str, int] = {}


def _status_bytes(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024  # reported in kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_bytes() -> int | None:
    """Resident set now (VmRSS), or None off Linux."""
    return _status_bytes("VmRSS")


def _peak_rss() -> int:
    rss = _status_bytes("VmHWM")
    if rss is None:  # no /proc: ru_maxrss is bytes on macOS, KiB elsewhere
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        rss = maxrss if sys.platform == "darwin" else maxrss * 1024
    return rss


def _reset_rss_mark() -> bool:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0); False where impossible."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def _cuda(device: Any) -> bool:
    return getattr(device, "type", None) == "cuda"


def reset(device: Any = None) -> bool:
    """Start a measurement's peaks from now; returns whether the RSS mark could be reset."""
    _carried.clear()
    if _cuda(device):
        import torch

        torch.cuda.reset_peak_memory_stats(device)
    return _reset_rss_mark()


def read(device: Any = None) -> dict[str, int | None]:
    """Peak resident set of the process and (CUDA) peak device memory of this measurement."""
    figures: dict[str, int | None] = {"peak_rss_bytes": _peak_rss(),
                                      "peak_device_allocated_bytes": None,
                                      "peak_device_reserved_bytes": None}
    if _cuda(device):
        import torch

        figures["peak_device_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        figures["peak_device_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
    for key, value in _carried.items():
        if figures.get(key) is not None:
            figures[key] = max(figures[key], value)  # type: ignore[type-var]
    return figures


@contextlib.contextmanager
def excluded(device: Any = None) -> Iterator[bool]:
    """Run a pass whose memory must not count as the measurement's peak.

    Yields whether the exclusion holds (False where the RSS mark cannot be reset: then the
    pass's resident memory does count, and the caller should say so).
    """
    before = read(device)
    for key, value in before.items():
        if value is not None:
            _carried[key] = max(_carried.get(key, 0), value)
    holds = _CLEAR_REFS.exists()
    try:
        yield holds
    finally:
        # The pass's copies are freed by reference counting as it returns (no gc.collect:
        # a full collection costs a quarter of a second with torch loaded).
        if _cuda(device):
            import torch

            torch.cuda.reset_peak_memory_stats(device)
        _reset_rss_mark()
