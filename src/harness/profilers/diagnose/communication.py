"""Communication against compute in a multi-process run, from a short torch-profiler window
split into compute, communication, their overlap and idle time (docs/presets/diagnose.md)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import torch

# `broadcast` the collective, not aten::broadcast_tensors / broadcast_to (shape broadcasting)
COLLECTIVE = re.compile(r"nccl|gloo:|c10d::|all_?reduce|all_?gather"
                        r"|broadcast(?!_(?:tensors|to|shapes))|reduce_?scatter", re.IGNORECASE)
# Rows that span others (annotations, module and step ranges): they would cover everything.
_SPANNING = re.compile(r"^(ProfilerStep|\[pl\]|nn\.Module|DistributedDataParallel\.forward|"
                       r"Optimizer\.|autograd::engine::evaluate_function)")


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping intervals joined, sorted."""
    out: list[list[float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def total(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Time covered by both merged interval lists."""
    i = j = 0
    covered = 0.0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        covered += max(0.0, end - start)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return covered


def split_window(events: list[Any]) -> dict[str, float]:
    """Seconds of compute, communication, their overlap and idle time in the window."""
    compute, comm, everything = [], [], []
    on_gpu = any(str(getattr(e, "device_type", "")).endswith("CUDA") for e in events)
    # the thread that ran the most operators: the training loop's (gloo has threads of its own)
    counts = Counter(e.thread for e in events if str(e.name).startswith("aten::"))
    main_thread = counts.most_common(1)[0][0] if counts else None
    for event in events:
        span = (event.time_range.start / 1e6, event.time_range.end / 1e6)
        if span[1] <= span[0]:
            continue
        everything.append(span)
        name = str(event.name)
        device = str(getattr(event, "device_type", ""))
        if COLLECTIVE.search(name):
            # on a GPU the NCCL kernel is the collective: the host's spans only enqueue it
            if not on_gpu or device.endswith("CUDA"):
                comm.append(span)
        elif _SPANNING.match(name):
            continue
        elif on_gpu:
            if device.endswith("CUDA"):
                compute.append(span)
        elif main_thread is None or event.thread == main_thread:
            compute.append(span)
    if not everything:
        return {}
    window = max(b for _, b in everything) - min(a for a, _ in everything)
    compute_m, comm_m = merged(compute), merged(comm)
    both = overlap(compute_m, comm_m)
    busy = total(merged(compute_m + comm_m))
    return {
        "window_s": window,
        "compute_s": total(compute_m),
        "communication_s": total(comm_m),
        "overlap_s": both,
        "idle_s": max(0.0, window - busy),
    }


class CommWindow:
    """The torch profiler over the communication window; `finish` parses it after training."""

    def __init__(self) -> None:
        self.profiler: Any = None
        self.recording = False
        self.note: str | None = None

    def start(self, device: Any) -> None:
        if self.profiler is not None:  # a skipped epoch's end brings the first step back
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(activities=activities)
        self.profiler.start()
        self.recording = True

    def stop(self) -> None:
        if self.recording:
            self.profiler.stop()
            self.recording = False

    def finish(self) -> dict[str, float]:
        """The window's split (split_window); {} when nothing was recorded."""
        self.stop()
        if self.profiler is None:
            return {}
        events = list(self.profiler.events())
        self.profiler = None
        figures = split_window(events)
        if not figures:
            self.note = "communication window: the profiler recorded no event"
        return figures
