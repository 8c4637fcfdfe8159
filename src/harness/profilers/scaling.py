"""The `scaling` preset: where each rank's optimizer steps go (compute, exposed communication,
data wait, waiting for a late rank), the late rank, and what the gradients' allreduce moves
(docs/presets/scaling.md). The timing is harness.profilers.rank_timer's; this writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from harness.config.checks import Share
from harness.measured import RANK_PARTS
from harness.profilers.preset import Preset, Report, figures_table
from harness.profilers.rank_timer import breakdown
from harness.reports.files import write_json

DOC = "docs/presets/scaling.md#output"


class ScalingPreset(Preset, Callback):
    """Writes reports/scaling.json and result.json's `scaling` (rank 0, after the fit)."""

    needs_rank_timer = "always"  # its baseline is a single process

    def __init__(self, late_above: Share = 0.05) -> None:
        self.late_above = late_above

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        timer = self.shared.rank_timer
        found = None
        if timer is not None and timer.ranks:
            found = breakdown(timer.ranks, timer.measured_from(self.shared.timed_from_step or 0),
                              self.late_above)
        if found is None:
            return Report()
        body: dict[str, Any] = {
            "world_size": len(found.ranks), "measured_steps": found.steps, "step_s": found.step_s,
            "ranks": found.ranks, "straggler": found.straggler, "comm": found.comm,
            "comm_hooks": sorted({name for r in timer.ranks for name in r["hooks"]}),
            "late_above": self.late_above,
        }
        write_json(reports_dir / "scaling.json", {"report": "scaling", "doc": DOC, **body})
        table = figures_table(f"Where each rank's optimizer step goes (median of {found.steps},"
                              " seconds)", ("rank", "node", *RANK_PARTS.values()), labels=2)
        for rank in found.ranks:
            table.add_row(str(rank["rank"]), rank["node"], *(f"{rank[k]:.4f}" for k in RANK_PARTS))
        late = found.straggler
        said = ("no rank late beyond the noise" if late is None else
                f"rank {late['rank']} ({late['node']}) is late by {late['wait_s']:.4f} s a step,"
                f" in its {late['late_in']}: the others wait for it")
        return Report(tables=[table, f"scaling: {said}"], blocks={"scaling": body})
