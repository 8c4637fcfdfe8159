"""The `simple` preset: wall time per Lightning action, from Lightning's SimpleProfiler
(docs/presets/simple.md)."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Any

from lightning.pytorch.profilers import SimpleProfiler
from typing_extensions import override

from harness.config.checks import NonNegativeInt
from harness.profilers.preset import Preset, Report, figures_table
from harness.reports.files import write_report

_CALLBACK_HOOK = re.compile(r"^\[Callback\](?P<callback>[^.]+)\..+$")


def time_rows(durations: dict[str, list[float]], run_s: float, verbose: bool) -> list[dict[str, Any]]:
    """Rows of the time report, longest total first; unless `verbose`, a callback's hooks are one row."""
    grouped: dict[str, list[float]] = {}
    for action, values in durations.items():
        hook = None if verbose else _CALLBACK_HOOK.match(action)
        grouped.setdefault(f"[Callback]{hook['callback']} (all hooks)" if hook else action, []).extend(values)
    rows = []
    for action, values in grouped.items():
        total = math.fsum(values)
        rows.append({"action": action, "calls": len(values), "total_s": total, "mean_s": total / len(values),
                     "share_of_run_pct": 100.0 * total / run_s if run_s > 0 else None})
    return sorted(rows, key=lambda row: row["total_s"], reverse=True)


class SimplePreset(Preset, SimpleProfiler):
    """Lightning's SimpleProfiler that writes reports/simple.{json,csv} instead of printing."""

    def __init__(self, verbose: bool = False, console_rows: NonNegativeInt = 15) -> None:
        super().__init__(extended=True)
        self.verbose, self.console_rows = verbose, console_rows
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

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        run_s = 0.0 if self._first_setup is None else (
            (self._last_describe or time.perf_counter()) - self._first_setup)
        rows = time_rows(self.recorded_durations, run_s, self.verbose)
        write_report(reports_dir, "simple", {
            "report": "simple", "doc": "docs/presets/simple.md#output", "clock": "time.perf_counter",
            "stages": self.stages, "verbose": self.verbose, "run_s": run_s, "actions": rows}, rows)
        top = rows[0] if rows else {}
        metrics = {"simple_run_s": run_s, "simple_actions": len(rows), "simple_top_action": top.get("action"),
                   "simple_top_action_s": top.get("total_s")}
        return Report(metrics, tables=[figures_table(
            f"Time per action (top {self.console_rows}; reports/simple.csv has all)",
            ("action", "calls", "total s", "mean s", "share %"),
            [(row["action"], str(row["calls"]), f"{row['total_s']:.4f}", f"{row['mean_s']:.6f}",
              "-" if row["share_of_run_pct"] is None else f"{row['share_of_run_pct']:.1f}")
             for row in rows[: self.console_rows]])])
