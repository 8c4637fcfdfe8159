"""The `pytorch` and `memory` presets: Lightning's PyTorchProfiler over a window of steps
(torch.profiler.schedule), and their reports from the rows of its `key_averages()`; one torch
profiler serves both when they run together (`absorb`)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from rich.table import Table
from torch.profiler import ProfilerAction
from typing_extensions import override

from harness.config.checks import NonNegativeInt, PositiveInt, one_or_more
from harness.instrument import switches
from harness.launch.ranks import global_rank
from harness.private_api import PyTorchProfilerAccess
from harness.profilers.preset import Preset, Report, check_window, figures_table
from harness.reports.files import atomic_path, write_csv, write_json, write_text
from harness.terminal import size

log = logging.getLogger(__name__)

PHASE_OF_STEP = {"training_step": "train", "validation_step": "validation", "test_step": "test",
                 "predict_step": "inference"}
PHASES = tuple(PHASE_OF_STEP.values())
Phases = one_or_more(PHASES, least=0)
Rows = list[dict[str, Any]]
# Sort keys a user may name (torch's attribute names, both spellings) -> column of a row.
SORT_COLUMNS: dict[str, str] = {
    "self_cpu_time_total": "self_cpu_time_ms", "cpu_time_total": "cpu_time_ms",
    "self_device_time_total": "self_device_time_ms", "device_time_total": "device_time_ms",
    "self_cuda_time_total": "self_device_time_ms", "cuda_time_total": "device_time_ms",
    "self_cpu_memory_usage": "self_cpu_memory_bytes", "cpu_memory_usage": "cpu_memory_bytes",
    "self_device_memory_usage": "self_device_memory_bytes", "device_memory_usage": "device_memory_bytes",
    "self_cuda_memory_usage": "self_device_memory_bytes", "cuda_memory_usage": "device_memory_bytes",
    "count": "calls",
}

# Not operators: record_function and module ranges, and (with_stack) Python frames "f.py(17): g".
_ANNOTATION_PREFIXES = ("[pl][", "ProfilerStep", "nn.Module:")
_PYTHON_FRAME = re.compile(r"^\S+\(\d+\): |^<built-in ")


def _first(event: Any, *names: str) -> float:
    """The first of `names` (torch's `device_*`, else its older `cuda_*`) that `event` has, or 0."""
    return next((float(value) for name in names if (value := getattr(event, name, None)) is not None), 0.0)


def event_row(event: Any) -> dict[str, Any]:
    """One averaged event as a flat row: bytes and milliseconds."""
    return {
        "name": event.key, "calls": int(event.count),
        "self_cpu_memory_bytes": int(_first(event, "self_cpu_memory_usage")),
        "cpu_memory_bytes": int(_first(event, "cpu_memory_usage")),
        "self_device_memory_bytes": int(_first(event, "self_device_memory_usage", "self_cuda_memory_usage")),
        "device_memory_bytes": int(_first(event, "device_memory_usage", "cuda_memory_usage")),
        "self_cpu_time_ms": _first(event, "self_cpu_time_total") / 1000.0,
        "cpu_time_ms": _first(event, "cpu_time_total") / 1000.0,
        "self_device_time_ms": _first(event, "self_device_time_total", "self_cuda_time_total") / 1000.0,
        "device_time_ms": _first(event, "device_time_total", "cuda_time_total") / 1000.0,
        "flops": int(getattr(event, "flops", 0) or 0),
        "input_shapes": str(event.input_shapes) if getattr(event, "input_shapes", None) else "",
    }


def is_operator(row: dict[str, Any]) -> bool:
    name = str(row["name"])
    return not name.startswith(_ANNOTATION_PREFIXES) and not _PYTHON_FRAME.match(name)


def top_rows(rows: Rows, column: str, limit: int) -> Rows:
    """The `limit` rows with the largest `column` (all rows when limit is -1)."""
    ordered = sorted(rows, key=lambda row: row[column], reverse=True)
    return ordered if limit < 0 else ordered[:limit]


def memory_rows(rows: Rows, limit: int) -> Rows:
    """Operators with the most memory (CPU + device, including children), largest first."""
    operators = [dict(row, total_memory_bytes=row["cpu_memory_bytes"] + row["device_memory_bytes"])
                 for row in rows if is_operator(row)]
    return top_rows(operators, "total_memory_bytes", limit)


def phase_of(action: str) -> str | None:
    return next((phase for step, phase in PHASE_OF_STEP.items() if action.endswith(step)), None)


class PytorchPreset(Preset, PyTorchProfilerAccess):
    """PyTorchProfiler writing reports/pytorch.* (operator table) and/or reports/memory.*."""

    def __init__(self, name: str = "pytorch", wait: NonNegativeInt = 1, warmup: NonNegativeInt = 1,
                 active: PositiveInt = 3, phases: Phases = ("train",),
                 sort_by: Literal[tuple(SORT_COLUMNS)] = "self_cpu_time_total",
                 row_limit: PositiveInt | Literal[-1] = 20,  # -1: all rows
                 record_shapes: bool = False, with_stack: bool = False, with_flops: bool = False,
                 with_modules: bool = False, profile_memory: bool = False, export_trace: bool = True,
                 trace_rank0_only: bool = False, trace_dir: str | None = None,
                 reports: Sequence[Literal["ops", "memory"]] = ("ops",), memory_top: PositiveInt = 20,
                 memory_timeline: bool = False) -> None:
        # read by _schedule_action, which Lightning's __init__ calls
        self.current_phase: str | None = None
        self.phases = (phases,) if isinstance(phases, str) else tuple(phases)
        self._torch_schedule: Any = None
        self.reports = set(reports)
        super().__init__(
            export_to_chrome=False,  # traces are written by _trace_ready
            record_module_names=with_modules, schedule=self._schedule_action,
            on_trace_ready=self._trace_ready, with_flops=with_flops, with_modules=with_modules,
            # torch's memory timeline needs shapes and stacks
            record_shapes=record_shapes or memory_timeline, with_stack=with_stack or memory_timeline,
            profile_memory=profile_memory or "memory" in self.reports)
        self.preset = name
        self.wait, self.warmup_steps, self.active = wait, warmup, active
        self.sort_by = sort_by.replace("cuda", "device")  # torch 2.4's names for the cuda_* keys
        self.row_limit, self.memory_top, self.memory_timeline = row_limit, memory_top, memory_timeline
        self.export_trace, self.trace_rank0_only = export_trace, trace_rank0_only
        self.trace_dir = Path(trace_dir) if trace_dir else None
        self.window_keys = {"wait": wait, "warmup": warmup, "active": active}  # as profiler.<name> sets it
        self.merged_from: str | None = None
        self._window_checked = self._ranges_on = False
        self.windows: list[dict[str, Any]] = []
        self.files: list[str] = []
        self.group_by_shapes = record_shapes

    @classmethod
    def can_absorb(cls, other: type) -> bool:
        """The pytorch preset takes over the memory preset; no other pair merges."""
        return not issubclass(cls, MemoryPreset) and issubclass(other, MemoryPreset)

    def absorb(self, memory: Any) -> None:
        """profile_memory on, the memory report written from our window."""
        self.reports.add("memory")
        self.torch_profiler_kwargs["profile_memory"] = True
        self.memory_top = memory.memory_top
        if memory.memory_timeline:
            self.memory_timeline = True
            self.torch_profiler_kwargs.update(record_shapes=True, with_stack=True)
        self.merged_from = memory.preset

    def _schedule_action(self, step: int) -> ProfilerAction:
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
        if not self._ranges_on:
            switches.enable("record_function")
            self._ranges_on = True

    @override
    def teardown(self, stage: str | None) -> None:
        super().teardown(stage)
        if self._ranges_on:
            switches.disable("record_function")
            self._ranges_on = False

    @override
    def start(self, action_name: str) -> None:
        phase = phase_of(action_name)
        self.current_phase = phase or self.current_phase
        if phase == "train" and "train" in self.phases and not self._window_checked:
            self._window_checked = True
            if self.trainer is not None:
                check_window(self.preset, self.trainer, **self.window_keys)
        super().start(action_name)

    @override
    def stop(self, action_name: str) -> None:
        self.current_phase = phase_of(action_name) or self.current_phase
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
        column = SORT_COLUMNS[self.sort_by]
        if "ops" in self.reports:
            traces = [f for f in self.files if f.endswith(".pt.trace.json")]
            top = self._write(reports_dir, "pytorch", lambda rows: top_rows(rows, column, self.row_limit),
                              sort_by=self.sort_by, row_limit=self.row_limit,
                              traces_in_traces_dir=traces) or {}
            first, last = self.recorded_steps
            tables = [f"[{w['phase']}] sorted by {self.sort_by}\n{w['table']}" for w in self.windows]
            write_text(reports_dir / "pytorch_table.txt", "Time (and memory when on) of every operator the"
                       f" PyTorch profiler saw, averaged by name over steps {first}..{last} (0-based) of each"
                       f" phase in {list(self.phases)}\n\n" + "\n".join(tables))
            metrics.update({"pytorch_windows": len(self.windows), "pytorch_recorded_steps": self.active,
                            "pytorch_top_op": top.get("name"), f"pytorch_top_op_{column}": top.get(column)})
        if "memory" in self.reports:
            top = self._write(reports_dir, "memory", lambda rows: memory_rows(rows, self.memory_top),
                              top=self.memory_top, files_in_traces_dir=self.files) or {}
            metrics.update({"memory_recorded_steps": self.active, "memory_top_op": top.get("name"),
                            "memory_top_op_cpu_bytes": top.get("cpu_memory_bytes"),
                            "memory_top_op_device_bytes": top.get("device_memory_bytes")})
        tables = []
        for window in self.windows:
            phase, rows = window["phase"], window["rows"]
            if "ops" in self.reports:
                tables.append(_table(
                    f"PyTorch profiler, {phase}: top 10 by {self.sort_by}",
                    ("self CPU ms", "CPU ms", "self dev ms", "dev ms"), top_rows(rows, column, 10),
                    ("self_cpu_time_ms", "cpu_time_ms", "self_device_time_ms", "device_time_ms"),
                    lambda value: f"{value:.3f}"))
            if "memory" in self.reports:
                tables.append(_table(
                    f"Memory, {phase}: top 10 operators (allocated; negative: freed)",
                    ("self CPU", "CPU", "self device", "device"), memory_rows(rows, 10),
                    ("self_cpu_memory_bytes", "cpu_memory_bytes", "self_device_memory_bytes",
                     "device_memory_bytes"), size))
        return Report(metrics, tables=tables)

    def _write(self, reports_dir: Path, report: str, choose: Callable[[Rows], Rows], **fields: Any
               ) -> dict[str, Any] | None:
        """reports/<report>.{json,csv}: the window, `fields` and the operators `choose` keeps of
        each window; returns training's top operator (else the first window's)."""
        windows = [{"phase": w["phase"], "operators": choose(w["rows"])} for w in self.windows]
        write_json(reports_dir / f"{report}.json", {
            "report": report, "doc": f"docs/presets/{report}.md#output",
            "recorded_steps": list(self.recorded_steps),  # first and last, 0-based, per phase
            "wait": self.wait, "warmup": self.warmup_steps, "active": self.active,
            "phases": list(self.phases), "phases_recorded": [w["phase"] for w in self.windows],
            "merged": self.merged_from, **fields, "windows": windows})
        write_csv(reports_dir / f"{report}.csv",
                  [{"phase": w["phase"], **row} for w in windows for row in w["operators"]])
        train = next((w for w in windows if w["phase"] == "train"), windows[0] if windows else None)
        return train["operators"][0] if train and train["operators"] else None


def _table(title: str, columns: Sequence[str], rows: Rows, keys: Sequence[str],
           show: Callable[[Any], str]) -> Table:
    return figures_table(title, ("operator", "calls", *columns), [
        (row["name"][:60], str(row["calls"]), *(show(row[key]) for key in keys)) for row in rows])


class MemoryPreset(PytorchPreset):
    """The `memory` preset: profile_memory over `warmup` skipped steps then `steps` recorded."""

    def __init__(self, warmup: NonNegativeInt = 2, steps: PositiveInt = 3, top: PositiveInt = 20,
                 phases: Phases = ("train",), extra_plots: bool = False, trace_rank0_only: bool = True,
                 trace_dir: str | None = None) -> None:
        super().__init__(name="memory", phases=phases, profile_memory=True, export_trace=extra_plots,
                         trace_rank0_only=trace_rank0_only, trace_dir=trace_dir, reports=("memory",),
                         memory_top=top, memory_timeline=extra_plots)
        # The last skipped step warms the profiler up (its first recorded step is slow).
        self.wait, self.warmup_steps, self.active = max(warmup - 1, 0), min(warmup, 1), steps
        self.window_keys = {"warmup": warmup, "steps": steps}
