"""The `line` preset: line-by-line timings of the functions marked with `@harness.profile` or
listed in `profiler.line.functions`; its tracer slows every line (docs/profiling-your-code.md)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from hydra.utils import get_object
from lightning.pytorch.callbacks import Callback
from rich.table import Table
from typing_extensions import override

from harness.config.checks import PositiveNumber
from harness.errors import ConfigError, HarnessError, first_line
from harness.instrument import line_profile
from harness.profilers.preset import Preset, Report, figures_table
from harness.reports.files import write_report, write_text

TEXT_REPORT = "line.txt"


def resolve_function(dotted: str) -> Any:
    """The function, method or class named by a dotted path such as `pkg.mod.Class.method`."""
    try:
        found = get_object(dotted)
    except Exception as err:
        expected = f"a dotted path to an importable function ({first_line(err.__cause__ or err, False)})"
    else:
        if callable(found):
            return found
        expected = f"a function, method or class, not a {type(found).__name__}"
    raise ConfigError("profiler.line.functions", dotted, expected,
                      "list functions as package.module.function or package.module.Class.method")


class LinePreset(Preset, Callback):
    """Runs line_profiler over the marked and listed functions; writes reports/line.{txt,json,csv}."""

    def __init__(self, functions: str | Sequence[str] = (), output_unit: PositiveNumber = 1e-6,
                 strip_zeros: bool = True) -> None:
        self.listed = [functions] if isinstance(functions, str) else list(functions)
        self.output_unit = output_unit  # seconds per printed unit
        self.strip_zeros = strip_zeros
        self._listed_objects = [resolve_function(name) for name in self.listed]
        try:
            from line_profiler import LineProfiler
        except ImportError:
            raise HarnessError(
                "profiler=line needs the line_profiler package, which is not installed."
                " Fix: pip install 'lightning-harness[line]' (or pip install line_profiler)"
            ) from None
        self.profiler = LineProfiler()
        self._added: set[int] = set()
        self._running = 0

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # read now: modules imported while the objects were built have registered theirs
        for func in [*line_profile.marked(), *self._listed_objects]:
            if id(func) not in self._added:
                self._added.add(id(func))
                self.profiler.add_callable(func)
        line_profile.attach(self.profiler)
        self.profiler.enable_by_count()
        self._running += 1

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._stop_one()

    @override
    def on_exception(self, *_: Any) -> None:
        while self._running:  # Lightning calls no teardown after an error: stop tracing here
            self._stop_one()

    def _stop_one(self) -> None:
        if self._running:
            self.profiler.disable_by_count()
            self._running -= 1
        if not self._running:
            line_profile.detach()

    def rows(self) -> list[dict[str, Any]]:
        """One row per line that ran: hits, total and per-hit time in seconds."""
        stats = self.profiler.get_stats()
        rows = []
        for (filename, def_line, function), lines in stats.timings.items():
            total = sum(t for _, _, t in lines) * stats.unit
            for lineno, hits, time in lines:
                seconds = time * stats.unit
                rows.append({"function": function, "file": filename, "function_line": def_line,
                             "line": lineno, "hits": hits, "time_s": seconds,
                             "per_hit_s": seconds / hits if hits else None,
                             "share_of_function": seconds / total if total else None})
        return rows

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        self.on_exception()  # a run that failed mid-stage never reached teardown
        text = io.StringIO()
        if not self._added:
            text.write("No functions were line-profiled: mark some with @harness.profile or list"
                       " them in profiler.line.functions=[package.module.function].\n")
        self.profiler.print_stats(stream=text, output_unit=self.output_unit,
                                  stripzeros=self.strip_zeros, config=False)
        write_text(reports_dir / TEXT_REPORT, text.getvalue())
        rows = self.rows()
        called = sorted({(r["file"], r["function_line"], r["function"]) for r in rows if r["hits"]})
        write_report(reports_dir, "line", {
            "report": "line", "doc": "docs/profiling-your-code.md#4-which-line-profilerline",
            "text_report": TEXT_REPORT, "listed": self.listed, "functions_profiled": len(self._added),
            "functions_called": [f"{name} ({file}:{line})" for file, line, name in called]}, rows)
        metrics = {"line_functions": len(self._added), "line_functions_called": len(called)}
        return Report(metrics, tables=[self._table(rows)])

    def _table(self, rows: list[dict[str, Any]]) -> Table:
        by_function: dict[str, dict[str, float]] = {}
        for row in rows:
            entry = by_function.setdefault(f"{row['function']} ({Path(row['file']).name})",
                                           {"time_s": 0.0, "hits": 0})
            entry["time_s"] += row["time_s"]
            entry["hits"] = max(entry["hits"], row["hits"])
        return figures_table(f"Line profile (details in reports/{TEXT_REPORT})",
                             ("function", "time s", "most hits on a line"),
                             [(name, f"{entry['time_s']:.4f}", str(entry["hits"])) for name, entry
                              in sorted(by_function.items(), key=lambda kv: -kv[1]["time_s"])])
