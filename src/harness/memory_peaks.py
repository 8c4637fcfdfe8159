"""The peak memory of one measurement and of each of its phases, and the passes that must not
count in them.

Two high-water marks make `peak_rss_bytes` and `peak_device_*_bytes`: the kernel's
peak resident set of the process (VmHWM, Linux: reset by writing 5 to
/proc/self/clear_refs) and torch's CUDA allocator peaks. Each measurement resets both at
its start. A pass harness adds to a run (the diagnose preset's speed-of-light passes) runs
inside `excluded()`: the marks reached before it are carried over, the marks are reset
after it, and `read()` reports the larger of the two, so the pass's own memory (a copy of
the model's state, say) never shows as the run's peak.

A phase (`phase_start` .. `phase_end`: training, validation inside it, and inference) starts
its own marks from the resident set (and, on CUDA, the memory torch has allocated) at its
start: its peak *increase* over that start is what the phase's work itself needed, without
the libraries, the model and the data loaded before it (several hundred MiB of a CPU run's
peak). The measurement's marks and every open phase's are carried over each reset, so a
phase never lowers the measurement's peak, and an excluded pass counts in neither.

On a CPU the increase is what the process took from the machine, glibc's retention included:
glibc serves allocations below its mmap threshold (which it raises by itself, up to 32 MiB,
after freeing a mapped chunk) from its heap and keeps freed chunks there, so a tensor freed and
allocated again may read as twice its size or more at small batches
(docs/presets/speed.md#memory). MALLOC_MMAP_THRESHOLD_=131072 in the environment makes the
figure follow the tensors exactly, at a cost in speed harness does not impose.
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
# Open phases: phase -> figure ("rss", "device_allocated") -> {"start": at its start, "peak":
# the highest mark carried within it}.
_phases: dict[str, dict[str, dict[str, int]]] = {}


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
    _phases.clear()
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
    _carry(device)
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


def _marks(device: Any) -> dict[str, int | None]:
    """The phases' high-water marks now: VmHWM and, on CUDA, torch's allocated peak."""
    marks: dict[str, int | None] = {"rss": _status_bytes("VmHWM"), "device_allocated": None}
    if _cuda(device):
        import torch

        marks["device_allocated"] = torch.cuda.max_memory_allocated(device)
    return marks


def _carry(device: Any) -> None:
    """Keep the marks reached so far (the measurement's and every open phase's) before the
    kernel's and torch's marks are reset."""
    for key, value in read(device).items():
        if value is not None:
            _carried[key] = max(_carried.get(key, 0), value)
    marks = _marks(device)
    for figures in _phases.values():
        for name, mark in marks.items():
            if mark is not None and name in figures:
                figures[name]["peak"] = max(figures[name]["peak"], mark)


def phase_start(phase: str, device: Any = None) -> None:
    """`phase` starts: its marks start from the resident set (and, on CUDA, the device memory
    torch has allocated) now. The marks are not reset at a phase's end: one that started
    inside another stays in the other's peak."""
    _carry(device)
    _reset_rss_mark()
    start: dict[str, dict[str, int]] = {}
    rss = rss_bytes()
    if rss is not None:
        start["rss"] = {"start": rss, "peak": rss}
    if _cuda(device):
        import torch

        torch.cuda.reset_peak_memory_stats(device)
        allocated = torch.cuda.memory_allocated(device)
        start["device_allocated"] = {"start": allocated, "peak": allocated}
    _phases[phase] = start


def phase_end(phase: str, device: Any = None) -> dict[str, int]:
    """`phase`'s figures: `<phase>_peak_rss_bytes` (absolute), `<phase>_rss_start_bytes` and
    `<phase>_peak_rss_increase_bytes` (the peak over the start); on CUDA the same for torch's
    allocated memory (`<phase>_peak_device_allocated_bytes`, `..._start_bytes`,
    `..._increase_bytes`). Empty for a phase that never started, or off Linux."""
    figures = _phases.pop(phase, None)
    if figures is None:
        return {}
    marks = _marks(device)
    out: dict[str, int] = {}
    for name, found in figures.items():
        mark = marks.get(name)
        if mark is None:
            continue
        peak = max(found["peak"], mark)
        out[f"{phase}_peak_{name}_bytes"] = peak
        out[f"{phase}_{name}_start_bytes"] = found["start"]
        out[f"{phase}_peak_{name}_increase_bytes"] = peak - found["start"]
    return out
