"""Composition rule for presets that need Lightning's single profiler slot.

Callback presets (speed, snapshot, system, summary) combine freely. Of the
profiler-backed presets only `pytorch` + `memory` combine: they MERGE into one
PyTorch profiler (pytorch's schedule, profile_memory on) that writes both
reports. Any other pair is refused with an error naming both presets.
"""

from __future__ import annotations

from typing import Any

from harness.errors import HarnessError


def combine_profilers(
    first_name: str, first: Any, second_name: str, second: Any
) -> tuple[str, Any]:
    """The (name, profiler) that does the work of both presets, or a HarnessError."""
    from harness.profilers.torch_profiler import MemoryPreset, PytorchPreset

    pair = {first_name: first, second_name: second}
    memory = [(n, p) for n, p in pair.items() if isinstance(p, MemoryPreset)]
    ops = [
        (n, p)
        for n, p in pair.items()
        if isinstance(p, PytorchPreset) and not isinstance(p, MemoryPreset)
    ]
    if len(memory) == 1 and len(ops) == 1:
        (ops_name, ops_profiler), (_, memory_profiler) = ops[0], memory[0]
        ops_profiler.absorb_memory(memory_profiler)
        return ops_name, ops_profiler
    raise HarnessError(
        f"profiler presets '{first_name}' and '{second_name}' cannot run together: Lightning"
        " takes one profiler and each of them is one (only pytorch + memory merge)."
        f" Fix: keep one of them, e.g. profiler=[speed,system,{second_name}], and run the other"
        " in a second run"
    )
