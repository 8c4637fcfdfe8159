"""The `pytorch` and `memory` presets' reports from a PytorchPreset's windows (docs/presets/)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.profilers.preset import figures_table
from harness.profilers.torch_events import SORT_COLUMNS, memory_rows, top_rows
from harness.reports.files import write_csv, write_json, write_text
from harness.terminal import size


def header(preset: Any, report: str) -> dict[str, Any]:
    """The facts both reports start with: the window and what was recorded."""
    return {
        "report": report,
        "doc": f"docs/presets/{report}.md#output",
        "recorded_steps": list(preset.recorded_steps),  # first and last, 0-based, per phase
        "wait": preset.wait,
        "warmup": preset.warmup_steps,
        "active": preset.active,
        "phases": list(preset.phases),
        "phases_recorded": [w["phase"] for w in preset.windows],
        "merged": preset.merged_from,
    }


def _operators(preset: Any, top: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any] | None]:
    """(each window's `top` operators, their CSV rows, training's top operator, else the first's)."""
    windows = [{"phase": w["phase"], "operators": top(w["rows"])} for w in preset.windows]
    csv_rows = [{"phase": w["phase"], **row} for w in windows for row in w["operators"]]
    train = next((w for w in windows if w["phase"] == "train"), windows[0] if windows else None)
    return windows, csv_rows, train["operators"][0] if train and train["operators"] else None


def write_ops(preset: Any, reports_dir: Path) -> dict[str, Any]:
    column = SORT_COLUMNS[preset.sort_by]
    windows, csv_rows, top = _operators(
        preset, lambda rows: top_rows(rows, column, preset.row_limit))
    payload = {
        **header(preset, "pytorch"),
        "sort_by": preset.sort_by,
        "row_limit": preset.row_limit,
        "traces_in_traces_dir": [f for f in preset.files if f.endswith(".pt.trace.json")],
        "windows": windows,
    }
    write_json(reports_dir / "pytorch.json", payload)
    write_csv(reports_dir / "pytorch.csv", csv_rows)
    first, last = preset.recorded_steps
    tables = [f"[{w['phase']}] sorted by {preset.sort_by}\n{w['table']}" for w in preset.windows]
    write_text(reports_dir / "pytorch_table.txt",
               "Time (and memory when on) of every operator the PyTorch profiler saw, averaged by"
               f" name over steps {first}..{last} (0-based) of each phase in"
               f" {list(preset.phases)}\n\n" + "\n".join(tables))
    return {
        "pytorch_windows": len(windows),
        "pytorch_recorded_steps": preset.active,
        "pytorch_top_op": top["name"] if top else None,
        f"pytorch_top_op_{column}": top[column] if top else None,
    }


def write_memory(preset: Any, reports_dir: Path) -> dict[str, Any]:
    windows, csv_rows, top = _operators(preset, lambda rows: memory_rows(rows, preset.memory_top))
    payload = {
        **header(preset, "memory"),
        "top": preset.memory_top,
        "files_in_traces_dir": preset.files,
        "windows": windows,
    }
    write_json(reports_dir / "memory.json", payload)
    write_csv(reports_dir / "memory.csv", csv_rows)
    return {
        "memory_recorded_steps": preset.active,
        "memory_top_op": top["name"] if top else None,
        "memory_top_op_cpu_bytes": top["cpu_memory_bytes"] if top else None,
        "memory_top_op_device_bytes": top["device_memory_bytes"] if top else None,
    }


def console_tables(preset: Any) -> list[Any]:
    tables = []
    for window in preset.windows:
        if "ops" in preset.reports:
            column = SORT_COLUMNS[preset.sort_by]
            table = figures_table(f"PyTorch profiler, {window['phase']}: top 10 by {preset.sort_by}",
                                  ("operator", "calls", "self CPU ms", "CPU ms", "self dev ms", "dev ms"))
            for row in top_rows(window["rows"], column, 10):
                table.add_row(row["name"][:60], str(row["calls"]), *(f"{row[key]:.3f}" for key in (
                    "self_cpu_time_ms", "cpu_time_ms", "self_device_time_ms", "device_time_ms")))
            tables.append(table)
        if "memory" in preset.reports:
            table = figures_table(
                f"Memory, {window['phase']}: top 10 operators (allocated; negative: freed)",
                ("operator", "calls", "self CPU", "CPU", "self device", "device"))
            for row in memory_rows(window["rows"], 10):
                table.add_row(row["name"][:60], str(row["calls"]), *(size(row[key]) for key in (
                    "self_cpu_memory_bytes", "cpu_memory_bytes", "self_device_memory_bytes",
                    "device_memory_bytes")))
            tables.append(table)
    return tables
