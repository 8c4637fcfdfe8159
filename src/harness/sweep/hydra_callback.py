"""The Hydra callback that writes the comparison when a multirun ends.

Registered in conf/config.yaml under `hydra.callbacks.sweep_report`. It reads
the jobs back from disk (Hydra gives callbacks no job return values, and other
launchers run jobs elsewhere), so it sees exactly what `harness-report` sees.

Exit-code rule: a multirun exits non-zero only when no job of the sweep
succeeded. The callback cannot exit itself without cutting short the callbacks
after it, so it leaves its verdict in `outcome` for `harness.cli.main`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class Outcome:
    """The verdict of the last multirun in this process (read by the CLI)."""

    exit_code: int = 0
    message: str | None = None


outcome = Outcome()


def verdict(statuses: list[str]) -> tuple[int, str | None]:
    """(exit code, message): non-zero when no job of the sweep ended ok (or none ran)."""
    if not statuses:
        return 1, "the sweep ran no job"
    if "ok" in statuses:
        return 0, None
    return 1, f"all {len(statuses)} jobs of the sweep failed (see comparison.md)"


class SweepReport(Callback):
    """Writes comparison.{md,csv,json,png} into the sweep directory and prints the table."""

    def __init__(self, rows: str | None = None, baseline: str | None = None,
                 plot: bool = True) -> None:
        self.rows = rows
        self.baseline = baseline
        self.plot = plot

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        outcome.exit_code, outcome.message = 0, None

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        try:
            from harness.sweep.report import report_sweep

            comparison = report_sweep(sweep_dir, rows=self.rows, baseline=self.baseline,
                                      plot=self.plot)
            statuses = [job.status for job in comparison.jobs]
        except Exception as err:  # the jobs' own results are safe on disk: say so, go on
            print(f"harness: warning: could not build the sweep comparison: {err}."
                  f" Rebuild it with: harness-report {sweep_dir}", file=sys.stderr)
            statuses = _statuses_on_disk(sweep_dir)
        outcome.exit_code, outcome.message = verdict(statuses)


def _statuses_on_disk(sweep_dir: Path) -> list[str]:
    from harness.errors import HarnessError
    from harness.sweep.collect import collect

    try:
        return [job.status for job in collect(sweep_dir).jobs]
    except HarnessError:
        return []
