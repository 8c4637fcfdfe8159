"""The `pytorch` and `memory` presets: Lightning's PyTorchProfiler over a window of steps
(torch.profiler.schedule); one torch profiler serves both when they run together (`absorb`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import torch
from torch.profiler import ProfilerAction
from typing_extensions import override

from harness.config.checks import PositiveInt, check, list_of, non_negative_int, one_of, positive_int
from harness.instrument import switches
from harness.launch.ranks import global_rank
from harness.private_api import PyTorchProfilerAccess
from harness.profilers import torch_reports
from harness.profilers.preset import Preset, Report, check_window
from harness.profilers.torch_events import SORT_COLUMNS, event_row, is_operator
from harness.reports.files import atomic_path

log = logging.getLogger(__name__)

PHASE_OF_STEP = {
    "training_step": "train",
    "validation_step": "validation",
    "test_step": "test",
    "predict_step": "inference",
}
PHASES = tuple(PHASE_OF_STEP.values())


def phase_of(action: str) -> str | None:
    for step, phase in PHASE_OF_STEP.items():
        if action.endswith(step):
            return phase
    return None


class PytorchPreset(Preset, PyTorchProfilerAccess):
    """PyTorchProfiler writing reports/pytorch.* (operator table) and/or reports/memory.*."""

    def __init__(
        self,
        name: str = "pytorch",
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        phases: list[str] | tuple[str, ...] = ("train",),
        sort_by: str = "self_cpu_time_total",
        row_limit: int = 20,
        record_shapes: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        profile_memory: bool = False,
        export_trace: bool = True,
        trace_rank0_only: bool = False,
        trace_dir: str | None = None,
        reports: tuple[str, ...] = ("ops",),
        memory_top: int = 20,
        memory_timeline: bool = False,
    ) -> None:
        self.preset = name
        self.current_phase: str | None = None
        self.phases: tuple[str, ...] = ()  # none recorded until the options are checked
        self._torch_schedule: Any = None
        reports = set(reports)
        needs_stack = bool(memory_timeline)  # torch's memory timeline needs shapes and stacks
        # first: Lightning's __del__ needs a whole profiler even when an option is refused
        super().__init__(
            export_to_chrome=False,  # traces are written by _trace_ready
            record_module_names=bool(with_modules),
            schedule=self._schedule_action,
            on_trace_ready=self._trace_ready,
            record_shapes=bool(record_shapes) or needs_stack,
            with_stack=bool(with_stack) or needs_stack,
            with_flops=bool(with_flops),
            with_modules=bool(with_modules),
            profile_memory=bool(profile_memory) or "memory" in reports,
        )
        key = f"profiler.{name}"
        self.wait = non_negative_int(f"{key}.wait", wait)
        self.warmup_steps = non_negative_int(f"{key}.warmup", warmup)
        self.active = positive_int(f"{key}.active", active)
        self.phases = tuple(list_of(f"{key}.phases", phases, PHASES, "[train]", allow_empty=True))
        one_of(f"{key}.sort_by", sort_by, tuple(SORT_COLUMNS), "self_cpu_time_total")
        check(f"{key}.row_limit", row_limit, PositiveInt | Literal[-1], 20,
              "a positive integer, or -1 for all rows")
        self.sort_by = sort_by.replace("cuda", "device")  # torch 2.4's names for the cuda_* keys
        self.row_limit = row_limit
        self.reports = reports
        self.memory_top = positive_int("profiler.memory.top", memory_top)
        self.memory_timeline = needs_stack
        self.export_trace = bool(export_trace)
        self.trace_rank0_only = bool(trace_rank0_only)
        self.trace_dir = Path(trace_dir) if trace_dir else None
        self.window_key = "wait + warmup + active"
        self.window_fix = f"lower profiler.{name}.wait / warmup / active"
        self.merged_from: str | None = None
        self._window_checked = False
        self.windows: list[dict[str, Any]] = []
        self.files: list[str] = []
        self.group_by_shapes = bool(record_shapes)

    @override
    @classmethod
    def can_absorb(cls, other: type) -> bool:
        """The pytorch preset takes over the memory preset; no other pair merges."""
        return not issubclass(cls, MemoryPreset) and issubclass(other, MemoryPreset)

    @override
    def absorb(self, memory: Any) -> None:
        """profile_memory on, the memory report written from our window."""
        self.reports.add("memory")
        self.torch_profiler_kwargs["profile_memory"] = True
        self.memory_top = memory.memory_top
        if memory.memory_timeline:
            self.memory_timeline = True
            self.torch_profiler_kwargs["record_shapes"] = True
            self.torch_profiler_kwargs["with_stack"] = True
        self.merged_from = memory.preset

    def _schedule_action(self, step: int) -> ProfilerAction:
        """torch's schedule for recorded phases, built lazily (Lightning's __init__ asks first)."""
        if self.current_phase not in self.phases:
            return ProfilerAction.NONE
        if self._torch_schedule is None:
            self._torch_schedule = torch.profiler.schedule(
                wait=self.wait, warmup=self.warmup_steps, active=self.active, repeat=1)
        return self._torch_schedule(step)

    @property
    def recorded_steps(self) -> tuple[int, int]:
        """0-based first and last step of each phase's window."""
        first = self.wait + self.warmup_steps
        return first, first + self.active - 1

    @override
    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        super().setup(stage=stage, local_rank=local_rank, log_dir=log_dir)
        # harness.annotate ranges become record_function ranges in this profiler's trace
        if not getattr(self, "_ranges_on", False):
            switches.enable("record_function")
            self._ranges_on = True

    @override
    def teardown(self, stage: str | None) -> None:
        super().teardown(stage)
        if getattr(self, "_ranges_on", False):
            switches.disable("record_function")
            self._ranges_on = False

    @override
    def start(self, action_name: str) -> None:
        phase = phase_of(action_name)
        if phase is not None:
            self.current_phase = phase
            if phase == "train" and "train" in self.phases and not self._window_checked:
                self._window_checked = True
                if self.trainer is not None:
                    check_window(self.preset, self.window_key, self.recorded_steps[1] + 1,
                                 self.trainer, self.window_fix)
        super().start(action_name)

    @override
    def stop(self, action_name: str) -> None:
        phase = phase_of(action_name)
        if phase is not None:
            self.current_phase = phase
        super().stop(action_name)

    @override
    def summary(self) -> str:
        # End of a stage: stop the profiler (a window cut short still ends in _trace_ready).
        self.stop_profiling()
        return ""

    def _trace_ready(self, prof: torch.profiler.profile) -> None:
        phase = self.current_phase or "unknown"
        averages = prof.key_averages(group_by_input_shape=self.group_by_shapes)
        rows = [row for row in map(event_row, averages) if is_operator(row)]
        window: dict[str, Any] = {"phase": phase, "steps": list(self.recorded_steps), "rows": rows}
        if "ops" in self.reports:
            window["table"] = averages.table(sort_by=self.sort_by, row_limit=self.row_limit)
        self.windows.append(window)
        rank = global_rank()
        if self.trace_dir is None or (self.trace_rank0_only and rank != 0):
            return
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        stem = f"{self.preset}-{phase}-rank{rank}"
        if self.export_trace:
            path = self.trace_dir / f"{stem}.pt.trace.json"
            with atomic_path(path) as tmp:
                prof.export_chrome_trace(str(tmp))
            self.files.append(path.name)
        if self.memory_timeline and "memory" in self.reports:
            path = self.trace_dir / f"{stem}-memory-timeline.html"
            device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
            try:
                with atomic_path(path, suffix=".tmp.html") as tmp:  # format from the suffix
                    prof.export_memory_timeline(str(tmp), device=device)
                self.files.append(path.name)
            except Exception as err:  # the plot is an extra: never lose the report for it
                log.warning("memory timeline not written: %s: %s", type(err).__name__, err)

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        metrics: dict[str, Any] = {}
        if "ops" in self.reports:
            metrics.update(torch_reports.write_ops(self, reports_dir))
        if "memory" in self.reports:
            metrics.update(torch_reports.write_memory(self, reports_dir))
        return Report(metrics, tables=torch_reports.console_tables(self))


class MemoryPreset(PytorchPreset):
    """The `memory` preset: profile_memory over `warmup` skipped steps then `steps` recorded."""

    def __init__(
        self,
        warmup: int = 2,
        steps: int = 3,
        top: int = 20,
        phases: list[str] | tuple[str, ...] = ("train",),
        extra_plots: bool = False,
        trace_rank0_only: bool = True,
        trace_dir: str | None = None,
    ) -> None:
        super().__init__(
            name="memory",
            phases=phases,
            profile_memory=True,
            export_trace=bool(extra_plots),
            trace_rank0_only=trace_rank0_only,
            trace_dir=trace_dir,
            reports=("memory",),
            memory_top=top,
            memory_timeline=bool(extra_plots),
        )
        skipped = non_negative_int("profiler.memory.warmup", warmup)
        # The last skipped step warms the profiler up (its first recorded step is slow).
        self.wait, self.warmup_steps = max(skipped - 1, 0), min(skipped, 1)
        self.active = positive_int("profiler.memory.steps", steps)
        self.window_key = "warmup + steps"
        self.window_fix = "lower profiler.memory.warmup / profiler.memory.steps"
