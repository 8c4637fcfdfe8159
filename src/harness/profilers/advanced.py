"""The `advanced` preset: cProfile of every Lightning action (Lightning's AdvancedProfiler),
captured per stage before Lightning resets it (docs/presets/advanced.md).
"""

from __future__ import annotations

import io
import pstats
from pathlib import Path
from typing import Any

from lightning.pytorch.profilers import AdvancedProfiler
from rich.table import Table
from typing_extensions import override

from harness import private_api
from harness.config.checks import one_of, positive_int
from harness.errors import ConfigError
from harness.profilers.preset import Preset, Report, figures_table
from harness.reports.files import write_json, write_text

DOC = "docs/presets/advanced.md#output"
SORT_KEYS = ("cumulative", "tottime", "ncalls")


class AdvancedPreset(Preset, AdvancedProfiler):
    """Lightning's AdvancedProfiler that writes reports/advanced.txt and advanced.json."""

    def __init__(self, lines: int | float = 20, sort_by: str = "cumulative", max_actions: int = 30
                 ) -> None:
        # first: Lightning's __del__ needs a whole profiler even when an option is refused
        super().__init__(line_count_restriction=lines)
        if isinstance(lines, bool) or not isinstance(lines, (int, float)) or lines <= 0 or (
                isinstance(lines, float) and lines > 1):
            raise ConfigError("profiler.advanced.lines", lines,
                              "a positive integer (lines) or a fraction in (0, 1]",
                              "profiler.advanced.lines=20")
        self.sort_by = one_of("profiler.advanced.sort_by", sort_by, SORT_KEYS, "cumulative")
        self.max_actions = positive_int("profiler.advanced.max_actions", max_actions, 30)
        # stage -> action -> (seconds inside the action, function calls, pstats text)
        self.stages: dict[str, dict[str, tuple[float, int, str]]] = {}

    @override
    def summary(self) -> str:
        captured = {}
        for action, profile in self.profiled_actions.items():
            stats = pstats.Stats(profile, stream=io.StringIO())
            if not stats.stats:  # an action that never ran a Python function
                continue
            text = io.StringIO()
            stats.stream = text
            stats.strip_dirs().sort_stats(self.sort_by).print_stats(self.line_count_restriction)
            captured[action] = (float(stats.total_tt), int(stats.total_calls), text.getvalue())
        self.stages[private_api.profiler_stage(self) or "run"] = captured
        return ""

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        rows = sorted(({"stage": stage, "action": action, "profiled_s": seconds, "function_calls": calls}
                       for stage, actions in self.stages.items()
                       for action, (seconds, calls, _) in actions.items()),
                      key=lambda row: row["profiled_s"], reverse=True)
        kept = rows[: self.max_actions]
        lines = [
            "Advanced profile: cProfile of each Lightning action (Python functions only;"
            " nested actions pause their parent, so times are exclusive; time inside C/CUDA"
            " kernels shows as the Python call that launched them).",
            f"Steps: every step of every stage ({', '.join(self.stages)}).",
            f"Actions: the {len(kept)} with the most profiled time of {len(rows)};"
            f" per action the top {self.line_count_restriction} functions by {self.sort_by}.",
            "Expected overhead: cProfile slows Python code 1.5-3x; treat the times as relative.",
            "",
        ]
        for row in kept:
            seconds, calls, text = self.stages[row["stage"]][row["action"]]
            lines += [f"==== [{row['stage']}] {row['action']}: {seconds:.4f} s profiled,"
                      f" {calls} function calls", text.rstrip(), ""]
        write_text(reports_dir / "advanced.txt", "\n".join(lines) + "\n")
        write_json(reports_dir / "advanced.json", {
            "report": "advanced", "doc": DOC, "stages": list(self.stages), "sort_by": self.sort_by,
            "lines_per_action": self.line_count_restriction, "actions": rows,
        })
        return Report({"advanced_actions": len(rows)}, tables=[self._table(rows)])

    def _table(self, rows: list[dict[str, Any]]) -> Table:
        table = figures_table("cProfile per action (top 10; reports/advanced.txt has the functions)",
                              ("stage", "action", "profiled s", "calls"), labels=2)
        for row in rows[:10]:
            table.add_row(row["stage"], row["action"], f"{row['profiled_s']:.4f}",
                          str(row["function_calls"]))
        return table
