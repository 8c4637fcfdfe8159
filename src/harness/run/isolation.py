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

# pandas and rich are for the reports at the end of a job; loaded up front, with the first
# job, every job of a sweep starts from the same resident baseline (not ~60 MiB lighter).
import pandas  # noqa: F401
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


def start_clean() -> dict[str, bool | int | None]:
    """Forget compiled graphs, free memory and caches, reset the peak-RSS mark, switch off
    instrumentation a failed job left on (Lightning skips callback teardown on errors).

    Returns which resets took effect and the resident set the job starts from
    (`rss_at_start_bytes`: what earlier jobs left loaded, e.g. TorchInductor's
    modules, cannot be unloaded), recorded in result.json as `isolation`.
    """
    torch.compiler.reset()  # compiled graphs
    private_api.reset_compile_counters()  # graphs and breaks counted from here (result.json)
    gc.collect()
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
