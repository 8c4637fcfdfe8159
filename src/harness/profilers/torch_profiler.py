"""The `pytorch` and `memory` presets: Lightning's PyTorchProfiler over a window of steps.

Recording every step costs far more than the steps themselves on a small model,
so both presets record a window (torch.profiler.schedule): `pytorch` as
wait / warmup / active steps, `memory` as `warmup` skipped steps then `steps`
recorded ones. Each window ends in `_trace_ready`, which keeps the structured
events (`key_averages()`) and writes the trace; the reports are built from those.

Lightning takes one profiler and two torch profilers cannot run at once, so
`pytorch` + `memory` MERGE: the pytorch preset records with profile_memory on,
over its own schedule, and writes both reports (see `absorb_memory`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.profilers import PyTorchProfiler
from torch.profiler import ProfilerAction

from harness.config.checks import list_of, non_negative_int, one_of, positive_int
from harness.errors import ConfigError
from harness.instrument import switches
from harness.launch.ranks import global_rank
from harness.profilers.reporting import ChecksBeforeLightningInit
from harness.profilers.torch_events import (
    SORT_COLUMNS,
    event_row,
    is_operator,
    memory_rows,
    top_rows,
)
from harness.profilers.window import check_window
from harness.reports.files import write_csv, write_json

log = logging.getLogger(__name__)

PHASE_OF_STEP = {
    "training_step": "train",
    "validation_step": "validation",
    "test_step": "test",
    "predict_step": "inference",
}
PHASES = tuple(PHASE_OF_STEP.values())

_CANONICAL_SORT = {
    "self_cuda_time_total": "self_device_time_total",
    "cuda_time_total": "device_time_total",
    "self_cuda_memory_usage": "self_device_memory_usage",
    "cuda_memory_usage": "device_memory_usage",
}


def phase_of(action: str) -> str | None:
    for step, phase in PHASE_OF_STEP.items():
        if action.endswith(step):
            return phase
    return None


class _PhaseSchedule:
    """torch's schedule, but only for the phases the preset records (NONE for the others)."""

    def __init__(self, owner: TorchProfilerPreset, wait: int, warmup: int, active: int) -> None:
        self.owner = owner
        self.inner = torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=1)

    def __call__(self, step: int) -> ProfilerAction:
        if self.owner.current_phase not in self.owner.phases:
            return ProfilerAction.NONE
        return self.inner(step)


class TorchProfilerPreset(ChecksBeforeLightningInit, PyTorchProfiler):
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
        key = f"profiler.{name}"
        self.preset = name
        self.wait = non_negative_int(f"{key}.wait", wait)
        self.warmup_steps = non_negative_int(f"{key}.warmup", warmup)
        self.active = positive_int(f"{key}.active", active)
        self.phases = tuple(list_of(f"{key}.phases", phases, PHASES, "[train]", allow_empty=True))
        one_of(f"{key}.sort_by", sort_by, tuple(SORT_COLUMNS), "self_cpu_time_total")
        if (
            isinstance(row_limit, bool)
            or not isinstance(row_limit, int)
            or row_limit == 0
            or row_limit < -1
        ):
            raise ConfigError(
                f"{key}.row_limit",
                row_limit,
                "a positive integer, or -1 for all rows",
                f"{key}.row_limit=20",
            )
        self.sort_by = _CANONICAL_SORT.get(sort_by, sort_by)
        self.row_limit = row_limit
        self.reports = set(reports)
        self.memory_top = positive_int("profiler.memory.top", memory_top)
        self.memory_timeline = bool(memory_timeline)
        self.export_trace = bool(export_trace)
        self.trace_rank0_only = bool(trace_rank0_only)
        self.trace_dir = Path(trace_dir) if trace_dir else None
        self.window_key = "wait + warmup + active"
        self.merged_from: str | None = None
        self.current_phase: str | None = None
        self._window_checked = False
        self.windows: list[dict[str, Any]] = []
        self.files: list[str] = []
        needs_stack = self.memory_timeline  # torch's memory timeline needs shapes and stacks
        super().__init__(
            export_to_chrome=False,  # traces are written by _trace_ready
            record_module_names=bool(with_modules),
            schedule=_PhaseSchedule(self, self.wait, self.warmup_steps, self.active),
            on_trace_ready=self._trace_ready,
            record_shapes=bool(record_shapes) or needs_stack,
            with_stack=bool(with_stack) or needs_stack,
            with_flops=bool(with_flops),
            with_modules=bool(with_modules),
            profile_memory=bool(profile_memory) or "memory" in self.reports,
        )
        self.group_by_shapes = bool(record_shapes)

    # -- composition ---------------------------------------------------------------
    def absorb_memory(self, memory: TorchProfilerPreset) -> None:
        """Take over the memory preset: profile_memory on, its report written from our window."""
        self.reports.add("memory")
        self._profiler_kwargs["profile_memory"] = True
        self.memory_top = memory.memory_top
        if memory.memory_timeline:
            self.memory_timeline = True
            self._profiler_kwargs["record_shapes"] = True
            self._profiler_kwargs["with_stack"] = True
        self.merged_from = memory.preset

    @property
    def recorded_steps(self) -> tuple[int, int]:
        """0-based first and last step of each phase's window."""
        first = self.wait + self.warmup_steps
        return first, first + self.active - 1

    # -- Lightning hooks -----------------------------------------------------------
    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        super().setup(stage=stage, local_rank=local_rank, log_dir=log_dir)
        # harness.annotate ranges in the user's code become record_function ranges, so
        # their names appear in this profiler's trace and tables.
        if not getattr(self, "_ranges_on", False):
            switches.enable("record_function")
            self._ranges_on = True

    def teardown(self, stage: str | None) -> None:
        super().teardown(stage)
        if getattr(self, "_ranges_on", False):
            switches.disable("record_function")
            self._ranges_on = False

    def start(self, action_name: str) -> None:
        phase = phase_of(action_name)
        if phase is not None:
            self.current_phase = phase
            if phase == "train" and "train" in self.phases and not self._window_checked:
                self._window_checked = True
                if self._lightning_module is not None:
                    check_window(
                        self.preset,
                        self.window_key,
                        self.recorded_steps[1] + 1,
                        self._lightning_module.trainer,
                        self._window_fix(),
                    )
        super().start(action_name)

    def stop(self, action_name: str) -> None:
        phase = phase_of(action_name)
        if phase is not None:
            self.current_phase = phase
        super().stop(action_name)

    def _cache_functions_events(self) -> None:
        # The reports come from each window's events (_trace_ready); a stage that recorded
        # nothing has no events, and Lightning's own caching would fail on it.
        return None

    def summary(self) -> str:
        # End of a stage: stop the profiler (a window cut short still ends in _trace_ready).
        self._delete_profilers()
        return ""

    def _window_fix(self) -> str:
        return f"lower profiler.{self.preset}.wait / warmup / active"

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
            prof.export_chrome_trace(str(path))
            self.files.append(path.name)
        if self.memory_timeline and "memory" in self.reports:
            path = self.trace_dir / f"{stem}-memory-timeline.html"
            device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
            try:
                prof.export_memory_timeline(str(path), device=device)
                self.files.append(path.name)
            except Exception as err:  # the plot is an extra: never lose the report for it
                log.warning("memory timeline not written: %s: %s", type(err).__name__, err)

    # -- reports -------------------------------------------------------------------
    def _header(self, what: str, overhead: str) -> dict[str, Any]:
        first, last = self.recorded_steps
        return {
            "what": what,
            "steps": f"steps {first}..{last} (0-based) of each phase in {list(self.phases)}:"
            f" {self.wait} waited, {self.warmup_steps} profiler warm-up, {self.active}"
            " recorded",
            "phases_recorded": [w["phase"] for w in self.windows],
            "expected_overhead": overhead,
            "device_columns": "device_* columns are 0 when the run has no CUDA device",
            "times": "milliseconds summed over the recorded steps; memory in bytes, net"
            " (allocated minus freed), so a self figure can be negative",
            "merged": self.merged_from,
        }

    def write_reports(self, reports_dir: Path) -> dict[str, Any]:
        metrics: dict[str, Any] = {}
        if "ops" in self.reports:
            metrics.update(self._write_ops(reports_dir))
        if "memory" in self.reports:
            metrics.update(self._write_memory(reports_dir))
        return metrics

    def _write_ops(self, reports_dir: Path) -> dict[str, Any]:
        column = SORT_COLUMNS[self.sort_by]
        csv_rows, windows = [], []
        for window in self.windows:
            rows = top_rows(window["rows"], column, self.row_limit)
            windows.append({"phase": window["phase"], "operators": rows})
            csv_rows += [{"phase": window["phase"], **row} for row in rows]
        payload = {
            "report": "pytorch",
            **self._header(
                "time (and memory when on) of every operator the PyTorch profiler saw, averaged"
                " by name over the recorded steps",
                "none outside the window; inside it each step is several times slower (every op"
                " recorded), so only the window's figures are affected",
            ),
            "sort_by": self.sort_by,
            "row_limit": self.row_limit,
            "traces_in_traces_dir": [f for f in self.files if f.endswith(".pt.trace.json")],
            "windows": windows,
        }
        write_json(reports_dir / "pytorch.json", payload)
        write_csv(reports_dir / "pytorch.csv", csv_rows)
        tables = [f"[{w['phase']}] sorted by {self.sort_by}\n{w['table']}" for w in self.windows]
        (reports_dir / "pytorch_table.txt").write_text(
            f"{payload['what']}\nSteps: {payload['steps']}\n\n" + "\n".join(tables)
        )
        train = next((w for w in windows if w["phase"] == "train"), windows[0] if windows else None)
        top = train["operators"][0] if train and train["operators"] else None
        return {
            "pytorch_windows": len(windows),
            "pytorch_recorded_steps": self.active,
            "pytorch_top_op": top["name"] if top else None,
            f"pytorch_top_op_{column}": top[column] if top else None,
        }

    def _write_memory(self, reports_dir: Path) -> dict[str, Any]:
        csv_rows, windows = [], []
        for window in self.windows:
            rows = memory_rows(window["rows"], self.memory_top)
            windows.append({"phase": window["phase"], "operators": rows})
            csv_rows += [{"phase": window["phase"], **row} for row in rows]
        payload = {
            "report": "memory",
            **self._header(
                f"the {self.memory_top} operators with the most memory (CPU + device, children"
                " included) over the recorded steps, with their time and calls",
                "none outside the window; inside it profile_memory adds to the profiler's own"
                " cost (each step several times slower)",
            ),
            "top": self.memory_top,
            "files_in_traces_dir": self.files,
            "windows": windows,
        }
        write_json(reports_dir / "memory.json", payload)
        write_csv(reports_dir / "memory.csv", csv_rows)
        train = next((w for w in windows if w["phase"] == "train"), windows[0] if windows else None)
        top = train["operators"][0] if train and train["operators"] else None
        return {
            "memory_recorded_steps": self.active,
            "memory_top_op": top["name"] if top else None,
            "memory_top_op_cpu_bytes": top["cpu_memory_bytes"] if top else None,
            "memory_top_op_device_bytes": top["device_memory_bytes"] if top else None,
        }

    def console_tables(self) -> list[Any]:
        from rich.table import Table

        tables = []
        for window in self.windows:
            if "ops" in self.reports:
                column = SORT_COLUMNS[self.sort_by]
                table = Table(
                    title=f"PyTorch profiler, {window['phase']}: top 10 by {self.sort_by}"
                )
                for name in ("operator", "calls", "self CPU ms", "CPU ms", "self dev ms", "dev ms"):
                    table.add_column(name, justify="left" if name == "operator" else "right")
                for row in top_rows(window["rows"], column, 10):
                    table.add_row(
                        row["name"][:60],
                        str(row["calls"]),
                        f"{row['self_cpu_time_ms']:.3f}",
                        f"{row['cpu_time_ms']:.3f}",
                        f"{row['self_device_time_ms']:.3f}",
                        f"{row['device_time_ms']:.3f}",
                    )
                tables.append(table)
            if "memory" in self.reports:
                table = Table(title=f"Memory, {window['phase']}: top 10 operators (bytes)")
                for name in ("operator", "calls", "self CPU", "CPU", "self device", "device"):
                    table.add_column(name, justify="left" if name == "operator" else "right")
                for row in memory_rows(window["rows"], 10):
                    table.add_row(
                        row["name"][:60],
                        str(row["calls"]),
                        f"{row['self_cpu_memory_bytes']:,}",
                        f"{row['cpu_memory_bytes']:,}",
                        f"{row['self_device_memory_bytes']:,}",
                        f"{row['device_memory_bytes']:,}",
                    )
                tables.append(table)
        return tables


class MemoryPreset(TorchProfilerPreset):
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
        skipped = non_negative_int("profiler.memory.warmup", warmup)
        super().__init__(
            name="memory",
            # The last skipped step warms the profiler up (its first recorded step is slow).
            wait=max(skipped - 1, 0),
            warmup=min(skipped, 1),
            active=positive_int("profiler.memory.steps", steps),
            phases=phases,
            profile_memory=True,
            export_trace=bool(extra_plots),
            trace_rank0_only=trace_rank0_only,
            trace_dir=trace_dir,
            reports=("memory",),
            memory_top=top,
            memory_timeline=bool(extra_plots),
        )
        self.window_key = "warmup + steps"

    def _window_fix(self) -> str:
        return "lower profiler.memory.warmup / profiler.memory.steps"
