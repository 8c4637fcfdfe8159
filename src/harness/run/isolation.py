"""Start every measurement from the same state, even when jobs share one process
(docs/sweeps.md, "Honest numbers across jobs")."""

from __future__ import annotations

import gc

# Loaded up front, not by the first job's reports: every job starts from the same resident set.
import rich.table  # noqa: F401
import torch

from harness import memory_peaks, private_api
from harness.instrument import line_profile, switches

_measured_before = False  # whether a measurement ran in this process already


def start_clean() -> dict[str, bool | int | None]:
    """The measurement starts from the same state as any other; returns result.json's `isolation`."""
    global _measured_before
    torch.compiler.reset()  # compiled graphs
    private_api.reset_compile_counters()  # graphs and breaks counted from here (result.json)
    # Free what an earlier measurement left. The first one freezes the heap the imports made
    # (~400k objects, 0.2-0.3 s to walk) instead: later collections walk only the jobs' objects.
    if _measured_before:
        gc.collect()
    else:
        gc.collect(1)  # the young generations' garbage, not frozen with the rest (cheap)
        gc.freeze()
        _measured_before = True
    done: dict[str, bool | int | None] = {"compiler_reset": True, "gc": True}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the peak counters are reset just before the measurement
        done["cuda_cache_emptied"] = True
    switches.reset()
    line_profile.detach()
    done["peak_rss_reset"] = memory_peaks.reset()
    done["rss_at_start_bytes"] = memory_peaks.rss_bytes()
    return done
