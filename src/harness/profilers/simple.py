"""The `simple` preset: wall time per Lightning action, from Lightning's SimpleProfiler
(docs/presets/simple.md)."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Any

from lightning.pytorch.profilers import SimpleProfiler
from rich.table import Table
from typing_extensions import override

from harness.config.checks import boolean, non_negative_int
from harness.profilers.preset import Preset, Report, figures_table
from harness.reports.files import write_report

DOC = "docs/presets/simple.md#output"
_CALLBACK_HOOK = re.compile(r"^\[Callback\](?P<callback>[^.]+)\..+$")


def fold_action(action: str) -> str:
    """The row an action belongs to in the concise report: callbacks fold into one row each."""
    match = _CALLBACK_HOOK.match(action)
    if match:
        return f"[Callback]{match['callback']} (all hooks)"
    return action


def time_rows(durations: dict[str, list[float]], run_s: float, verbose: bool) -> list[dict[str, Any]]:
    """Rows of the time report, longest total first."""
    grouped: dict[str, list[float]] = {}
    for action, values in durations.items():
        grouped.setdefault(action if verbose else fold_action(action), []).extend(values)
    rows = []
    for action, values in grouped.items():
        total = math.fsum(values)
        rows.append({"action": action, "calls": len(values), "total_s": total,
                     "mean_s": total / len(values),
                     "share_of_run_pct": 100.0 * total / run_s if run_s > 0 else None})
    return sorted(rows, key=lambda row: row["total_s"], reverse=True)


class SimplePreset(Preset, SimpleProfiler):
    """Lightning's SimpleProfiler that writes reports/simple.{json,csv} instead of printing."""

    def __init__(self, verbose: bool = False, console_rows: int = 15) -> None:
        # first: Lightning's __del__ needs a whole profiler even when an option is refused
        super().__init__(extended=True)
        self.verbose = boolean("profiler.simple.verbose", verbose)
        self.console_rows = non_negative_int("profiler.simple.console_rows", console_rows, 15)
        self._first_setup: float | None = None
        self._last_describe: float | None = None
        self.stages: list[str] = []

    @override
    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        super().setup(stage, local_rank, log_dir)
        if self._first_setup is None:
            self._first_setup = time.perf_counter()
        self.stages.append(str(getattr(stage, "value", stage)))

    @override
    def summary(self) -> str:
        # Called by Lightning at the end of every stage; the report is written once, at the end.
        self._last_describe = time.perf_counter()
        return ""

    def run_seconds(self) -> float:
        if self._first_setup is None:
            return 0.0
        return (self._last_describe or time.perf_counter()) - self._first_setup

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        rows = time_rows(self.recorded_durations, self.run_seconds(), self.verbose)
        payload = {
            "report": "simple",
            "doc": DOC,
            "clock": "time.perf_counter",
            "stages": self.stages,
            "verbose": self.verbose,
            "run_s": self.run_seconds(),
            "actions": rows,
        }
        write_report(reports_dir, "simple", payload, rows)
        top = rows[0] if rows else None
        metrics = {
            "simple_run_s": payload["run_s"],
            "simple_actions": len(rows),
            "simple_top_action": top["action"] if top else None,
            "simple_top_action_s": top["total_s"] if top else None,
        }
        return Report(metrics, tables=[self._table(rows)])

    def _table(self, rows: list[dict[str, Any]]) -> Table:
        table = figures_table(f"Time per action (top {self.console_rows}; reports/simple.csv has all)",
                              ("action", "calls", "total s", "mean s", "share %"))
        for row in rows[: self.console_rows]:
            share = row["share_of_run_pct"]
            table.add_row(row["action"], str(row["calls"]), f"{row['total_s']:.4f}",
                          f"{row['mean_s']:.6f}", "-" if share is None else f"{share:.1f}")
        return table
