"""The peak memory of one measurement and of each of its phases (docs/running.md,
docs/presets/speed.md#memory); a phase's leaves out the file pages first read during it (the page
cache's: a setting reads the same at any place in a sweep)."""

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
# the highest mark carried within it, "file": (rss) the file pages resident at its start}.
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


def _cuda(device: Any) -> Any:
    """torch.cuda where `device` is a CUDA device, else None (torch is not imported)."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    return torch.cuda


def reset(device: Any = None) -> bool:
    """Start a measurement's peaks from now; returns whether the RSS mark could be reset."""
    _carried.clear()
    _phases.clear()
    if cuda := _cuda(device):
        cuda.reset_peak_memory_stats(device)
    return _reset_rss_mark()


def read(device: Any = None) -> dict[str, int | None]:
    """Peak resident set of the process and (CUDA) peak device memory of this measurement."""
    figures: dict[str, int | None] = {"peak_rss_bytes": _peak_rss(),
                                      "peak_device_allocated_bytes": None,
                                      "peak_device_reserved_bytes": None}
    if cuda := _cuda(device):
        figures["peak_device_allocated_bytes"] = cuda.max_memory_allocated(device)
        figures["peak_device_reserved_bytes"] = cuda.max_memory_reserved(device)
    for key, value in _carried.items():
        if figures.get(key) is not None:
            figures[key] = max(figures[key], value)  # type: ignore[type-var]
    return figures


@contextlib.contextmanager
def excluded(device: Any = None) -> Iterator[bool]:
    """A pass whose memory counts in no peak; yields whether that holds (the RSS mark resets)."""
    _carry(device)
    holds = _CLEAR_REFS.exists()
    try:
        yield holds
    finally:
        # No gc.collect (a quarter of a second with torch loaded): the pass's copies are freed
        # as it returns. Its cached blocks go back to the driver before the peaks reset, or
        # they would be the floor of peak_device_reserved_bytes.
        if cuda := _cuda(device):
            cuda.empty_cache()
            cuda.reset_peak_memory_stats(device)
        _reset_rss_mark()


def _marks(device: Any, figures: dict[str, dict[str, int]]) -> dict[str, int | None]:
    """A phase's marks now: VmHWM less the file pages read since the phase started (those read
    after the mark are a few at most) and, on CUDA, torch's allocated peak."""
    rss, file_now = _status_bytes("VmHWM"), _status_bytes("RssFile")
    file_start = figures.get("rss", {}).get("file")
    if rss is not None and file_now is not None and file_start is not None:
        rss -= max(0, file_now - file_start)
    marks: dict[str, int | None] = {"rss": rss, "device_allocated": None}
    if cuda := _cuda(device):
        marks["device_allocated"] = cuda.max_memory_allocated(device)
    return marks


def _carry(device: Any) -> None:
    """Keep the marks reached so far (the measurement's, every open phase's) before they reset."""
    for key, value in read(device).items():
        if value is not None:
            _carried[key] = max(_carried.get(key, 0), value)
    for figures in _phases.values():
        for name, mark in _marks(device, figures).items():
            if mark is not None and name in figures:
                figures[name]["peak"] = max(figures[name]["peak"], mark)


def phase_start(phase: str, device: Any = None) -> None:
    """`phase`'s marks start now (resident set, CUDA allocated); it stays in an open phase's peak."""
    _carry(device)
    _reset_rss_mark()
    start: dict[str, dict[str, int]] = {}
    rss, file = rss_bytes(), _status_bytes("RssFile")
    if rss is not None:
        start["rss"] = {"start": rss, "peak": rss}
        if file is not None:
            start["rss"]["file"] = file
    if cuda := _cuda(device):
        cuda.reset_peak_memory_stats(device)
        allocated = cuda.memory_allocated(device)
        start["device_allocated"] = {"start": allocated, "peak": allocated}
    _phases[phase] = start


def phase_end(phase: str, device: Any = None) -> dict[str, int]:
    """`<phase>_peak_rss_bytes`, `_rss_start_bytes`, `_peak_rss_increase_bytes` (over the start),
    and on CUDA the same of torch's allocated memory; empty for a phase never started, off Linux."""
    figures = _phases.pop(phase, None)
    if figures is None:
        return {}
    marks = _marks(device, figures)
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
