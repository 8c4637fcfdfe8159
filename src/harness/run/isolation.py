"""Start every measurement from the same state, even when jobs share one process.

Hydra's basic launcher runs the jobs of a sweep one after another in one
Python process. Without a reset, a job would inherit the previous job's
compiled graphs, cached allocator blocks, freed-but-kept heap and peak-memory
counters, and its numbers would depend on what ran before it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc

# rich is for the reports at the end of a job; loaded up front, with the first job, every job
# of a sweep starts from the same resident baseline. (pandas was too; no job loads it now:
# reports.files writes a list's CSV with the csv module, MLflow runs in the tracker process.)
import rich.table  # noqa: F401
import torch

from harness import memory_peaks, private_api
from harness.instrument import line_profile, switches


def _return_freed_heap() -> None:
    # glibc keeps freed blocks in its arenas; without a trim a big job before a
    # small one would raise the small job's resident set.
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(libc_name).malloc_trim(0)


_measured_before = False  # whether a measurement ran in this process already


def _collect_garbage() -> None:
    """Free what an earlier measurement left. The first one in a process has none to free,
    only the heap the imports made (torch, Lightning: ~400k objects, 0.2-0.3 s to walk), which
    it freezes instead: a later job's gc.collect() walks only what the jobs made since, and a
    single run pays nothing (docs/sweeps.md, "Honest numbers across jobs")."""
    global _measured_before
    if _measured_before:
        gc.collect()
    else:
        gc.collect(1)  # the young generations' garbage, not frozen with the rest (cheap)
        gc.freeze()
        _measured_before = True


def start_clean() -> dict[str, bool | int | None]:
    """Forget compiled graphs, free memory and caches, reset the peak-RSS mark, switch off
    instrumentation a failed job left on (Lightning skips callback teardown on errors).

    Returns which resets took effect and the resident set the job starts from
    (`rss_at_start_bytes`: what earlier jobs left loaded, e.g. TorchInductor's
    modules, cannot be unloaded), recorded in result.json as `isolation`.
    """
    torch.compiler.reset()  # compiled graphs
    private_api.reset_compile_counters()  # graphs and breaks counted from here (result.json)
    _collect_garbage()
    _return_freed_heap()
    done: dict[str, bool | int | None] = {"compiler_reset": True, "gc": True}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the job resets the peak counters itself, just before it measures
        done["cuda_cache_emptied"] = True
    switches.reset()
    line_profile.detach()
    done["peak_rss_reset"] = memory_peaks.reset()
    done["rss_at_start_bytes"] = memory_peaks.rss_bytes()
    return done
