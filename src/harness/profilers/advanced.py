"""The `advanced` preset: cProfile of every Lightning action (Lightning's AdvancedProfiler),
captured per stage before Lightning resets it (docs/presets/advanced.md)."""

from __future__ import annotations

import io
import pstats
from pathlib import Path
from typing import Annotated, Literal

from annotated_types import Gt, Le
from lightning.pytorch.profilers import AdvancedProfiler
from typing_extensions import override

from harness import private_api
from harness.config.checks import PositiveInt
from harness.profilers.preset import Preset, Report, figures_table
from harness.reports.files import write_json, write_text


class AdvancedPreset(Preset, AdvancedProfiler):
    """Lightning's AdvancedProfiler that writes reports/advanced.txt and advanced.json."""

    def __init__(self, lines: PositiveInt | Annotated[float, Gt(0), Le(1)] = 20,  # lines, or a share
                 sort_by: Literal["cumulative", "tottime", "ncalls"] = "cumulative",
                 max_actions: PositiveInt = 30) -> None:
        super().__init__(line_count_restriction=lines)
        self.sort_by, self.max_actions = sort_by, max_actions
        # stage -> action -> (seconds inside the action, function calls, pstats text)
        self.stages: dict[str, dict[str, tuple[float, int, str]]] = {}

    @override
    def summary(self) -> str:
        captured = {}
        for action, profile in self.profiled_actions.items():
            text = io.StringIO()
            stats = pstats.Stats(profile, stream=text)
            if not stats.stats:  # an action that never ran a Python function
                continue
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
            "Advanced profile: cProfile of each Lightning action (Python functions only; nested actions pause"
            " their parent, so times are exclusive; time inside C/CUDA kernels shows as the Python call that"
            " launched them).", f"Steps: every step of every stage ({', '.join(self.stages)}).",
            f"Actions: the {len(kept)} with the most profiled time of {len(rows)}; per action the top"
            f" {self.line_count_restriction} functions by {self.sort_by}.",
            "Expected overhead: cProfile slows Python code 1.5-3x; treat the times as relative.", "",
        ]
        for row in kept:
            seconds, calls, text = self.stages[row["stage"]][row["action"]]
            lines += [f"==== [{row['stage']}] {row['action']}: {seconds:.4f} s profiled,"
                      f" {calls} function calls", text.rstrip(), ""]
        write_text(reports_dir / "advanced.txt", "\n".join(lines) + "\n")
        write_json(reports_dir / "advanced.json", {
            "report": "advanced", "doc": "docs/presets/advanced.md#output", "stages": list(self.stages),
            "sort_by": self.sort_by, "lines_per_action": self.line_count_restriction, "actions": rows})
        return Report({"advanced_actions": len(rows)}, tables=[figures_table(
            "cProfile per action (top 10; reports/advanced.txt has the functions)",
            ("stage", "action", "profiled s", "calls"),
            [(row["stage"], row["action"], f"{row['profiled_s']:.4f}", str(row["function_calls"]))
             for row in rows[:10]], labels=2)])
