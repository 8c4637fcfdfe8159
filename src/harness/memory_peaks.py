"""The peak memory of one measurement and of each of its phases (docs/running.md,
docs/presets/speed.md#memory); a phase's leaves out the file pages first read during it (the page
cache's: a setting reads the same at any place in a sweep). On a CPU with glibc, a phase's warm-up
steps map every allocation of 128 KiB and more and give it back when freed, so the resident set
follows the tensors; its timed steps get glibc's fast steady state (docs/presets/speed.md#memory)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import resource
import sys
import threading
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
# Phases whose figures were frozen when their timed steps started: phase -> phase_end's figures.
_frozen: dict[str, dict[str, int]] = {}


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


# glibc's mallopt parameters M_TRIM_THRESHOLD and M_MMAP_THRESHOLD
_TRIM, _MMAP = -1, -3
# (mmap, trim threshold). Exact: glibc's starting mmap threshold, every block of 128 KiB and more
# mapped and unmapped when freed (its pages faulted in afresh each step). Fast: the ceiling glibc's
# dynamic threshold rises to (32 MiB on 64-bit) and the trim threshold it sets with it (twice):
# step tensors come from a heap kept resident and reused, without the faults.
_EXACT = (128 * 1024, 128 * 1024)
_FAST = (4 * 2**20 * ctypes.sizeof(ctypes.c_long), 8 * 2**20 * ctypes.sizeof(ctypes.c_long))
_PLUG = 64 * 1024  # what fills a hole of the heap: the holes left are smaller
_TOP = 2**20  # what grows the heap's top (below the fast mmap threshold)
_plugs: list[int] = []  # the blocks filling the heap's holes while a phase runs exact


@functools.cache
def _glibc() -> Any:
    """The process's glibc, or None (other systems and C libraries: the allocator is left as is)."""
    libc = ctypes.CDLL(None) if sys.platform.startswith("linux") else None
    if not hasattr(libc, "gnu_get_libc_version"):
        return None
    libc.malloc.restype = libc.sbrk.restype = ctypes.c_void_p
    return libc


def _cpu_glibc(device: Any) -> Any:
    """glibc where `device` is a CPU, else None: only there does harness set the allocator."""
    return _glibc() if getattr(device, "type", None) == "cpu" else None


def _give_back_freed() -> None:
    """Freed heap pages back to the system: else what was freed before a mark is reused unseen."""
    if libc := _glibc():
        libc.malloc_trim(0)


def _exact(device: Any) -> None:
    """On a CPU with glibc: blocks of 128 KiB and more mapped, and the heap's holes (free chunks
    under live blocks, their pages given back by _give_back_freed) filled, untouched, until _fast.
    A step's small blocks split off such holes land on pages not yet resident from step to step
    (the built-in step at batch 8 read 23.4-30.6 MiB after a batch-32 job, 14.5-14.8 with the
    holes filled); from the heap's top they land on the same pages each step."""
    if not (libc := _cpu_glibc(device)):
        return
    libc.mallopt(_MMAP, _EXACT[0])
    libc.mallopt(_TRIM, _EXACT[1])
    if threading.current_thread() is not threading.main_thread():
        return  # another thread's blocks come from another of glibc's heaps
    top, most = libc.sbrk(0), (_status_bytes("VmData") or 0) // _PLUG  # holes lie inside VmData
    while len(_plugs) < most and (block := libc.malloc(_PLUG)):
        if libc.sbrk(0) != top:  # the heap grew for it: no hole this size is left
            libc.free(ctypes.c_void_p(block))
            return
        _plugs.append(block)


def _fast(device: Any, warm: int | None = None) -> None:
    """On a CPU with glibc: its fast setting (fixed: the dynamic threshold is off for the rest of
    the process). Anywhere: the holes' blocks freed, for the steps to reuse. With `warm` (bytes),
    the holes are first made resident, and `warm` more at the heap's top (at most 3/4 of the trim
    threshold: glibc gives back a free top past it): the heap as glibc's own warm-up would leave
    it, so that the first timed steps do not pay for its pages."""
    top: list[int] = []
    if libc := _cpu_glibc(device):
        libc.mallopt(_MMAP, _FAST[0])
        libc.mallopt(_TRIM, _FAST[1])
        if warm is not None:  # the holes still held, these blocks come from the top
            blocks = min(warm, _FAST[1] * 3 // 4) // _TOP
            top = [block for _ in range(blocks) if (block := libc.malloc(_TOP))]
            for blocks, size in ((_plugs, _PLUG), (top, _TOP)):
                for block in blocks:
                    ctypes.memset(block, 0, size)
    for block in (*reversed(top), *_plugs):  # the top's last first: each joins the free top
        _glibc().free(ctypes.c_void_p(block))
    _plugs.clear()


def _cuda(device: Any) -> Any:
    """torch.cuda where `device` is a CUDA device, else None (torch is not imported)."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    return torch.cuda


def reset(device: Any = None) -> bool:
    """Start a measurement's peaks from now (on a CPU `device`, glibc at its fast setting until a
    phase starts); returns whether the RSS mark could be reset."""
    _fast(device)
    _give_back_freed()
    _carried.clear()
    _phases.clear()
    _frozen.clear()
    if cuda := _cuda(device):
        cuda.reset_peak_memory_stats(device)
    return _reset_rss_mark()


def read(device: Any = None) -> dict[str, int | None]:
    """Peak resident set of the process and (CUDA) peak device memory of this measurement."""
    figures: dict[str, int | None] = {"peak_rss_bytes": _peak_rss(), "peak_device_allocated_bytes": None,
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
    """A pass whose memory counts in no peak, nor what it leaves held (each open phase's start rises
    by that, up to the phase's peak: the steps may free it); yields whether that holds."""
    _carry(device)
    _give_back_freed()  # what was freed before counts as free on both sides
    before = _held(device)
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
        _give_back_freed()
        for name, held in _held(device).items():
            for figures in _phases.values():
                if name in figures and held is not None and before[name] is not None:
                    figures[name]["start"] += max(0, held - before[name])
        _reset_rss_mark()


def _held(device: Any) -> dict[str, int | None]:
    """Memory held now: the resident set less file pages (as in _marks), CUDA's allocated bytes."""
    rss, file, cuda = rss_bytes(), _status_bytes("RssFile"), _cuda(device)
    return {"rss": None if rss is None or file is None else rss - file,
            "device_allocated": cuda.memory_allocated(device) if cuda else None}


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
    """`phase`'s marks start now (resident set, CUDA allocated); it stays in an open phase's peak.
    On a CPU its allocations are exact (glibc maps what is 128 KiB or more) until phase_timed."""
    _carry(device)
    # Exact from here: with glibc's dynamic threshold a step's freed tensors stay in its heap,
    # split by small blocks, and miss the next step's (8 MiB held read 8 to 32 by the job order).
    _give_back_freed()
    _exact(device)
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


def phase_timed(phase: str, device: Any, warmed_up: bool) -> None:
    """`phase`'s timed steps start (its first measured window opens). On a CPU with glibc, its figures are
    frozen now when `warmed_up` (its warm-up steps ran exact), else phase_end reads them over the whole phase;
    glibc goes to its fast setting. Nothing for a phase not open, on CUDA, or elsewhere."""
    if phase not in _phases or not _cpu_glibc(device):
        return
    if not warmed_up:
        _fast(device)
        return
    _frozen[phase] = _figures(phase, device)
    _fast(device, warm=_frozen[phase].get(f"{phase}_peak_rss_increase_bytes", 0))


def no_warmup_note(device: Any) -> str | None:
    """speed.json's note for phases timed from their first step (no warm-up): where warm-ups run
    exact (a CPU with glibc), their memory figures are not; None elsewhere."""
    if not _cpu_glibc(device):
        return None
    return ("warmup_steps=0: each phase's memory figure is over all its steps at glibc's fast"
            " setting (freed memory glibc keeps included) and may depend on what ran before it")


def phase_end(phase: str, device: Any = None) -> dict[str, int]:
    """`<phase>_peak_rss_bytes`, `_rss_start_bytes`, `_peak_rss_increase_bytes` (over the start),
    and on CUDA the same of torch's allocated memory, as frozen by phase_timed or read now; empty
    for a phase never started, off Linux."""
    _fast(device)
    return _frozen.pop(phase) if phase in _frozen else _figures(phase, device)


def _figures(phase: str, device: Any) -> dict[str, int]:
    """phase_end's figures of an open phase, read now; it is no longer open."""
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
        out[f"{phase}_{name}_start_bytes"] = start = min(found["start"], peak)  # see excluded()
        out[f"{phase}_peak_{name}_increase_bytes"] = peak - start
    return out
