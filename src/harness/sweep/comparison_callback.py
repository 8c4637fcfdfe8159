"""The Hydra callback that writes the comparison when a multirun ends.

Registered in conf/config.yaml under `hydra.callbacks.sweep_report`. It reads
the jobs back from disk (Hydra gives callbacks no job return values, and other
launchers run jobs elsewhere), so it sees exactly what `harness-report` sees.
Its own settings (`rows`, `baseline`) are checked when the sweep starts, against
the keys and values the sweep varies, so a typo costs no compute.

Exit-code rule: a multirun exits non-zero only when no job of the sweep
succeeded. The callback cannot exit itself without cutting short the callbacks
after it, so it leaves its verdict in `outcome` for `harness.cli.main`.

A sweep stopped before its end (Ctrl-C, SIGTERM) never reaches `on_multirun_end`:
`harness.cli.main` calls `end_early` instead, which writes the table of the jobs
that finished and says how to rebuild it once the rest have run.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from typing_extensions import override

from harness.launch.signals import restore_sigterm

log = logging.getLogger(__name__)
KEY = "hydra.callbacks.sweep_report"


class Outcome:
    """The verdict of the last multirun in this process (read by the CLI)."""

    exit_code: int = 0
    message: str | None = None


outcome = Outcome()
_running: ComparisonCallback | None = None  # the sweep whose jobs are being launched


def verdict(statuses: list[str]) -> tuple[int, str | None]:
    """(exit code, message): non-zero when no job of the sweep ended ok (or none ran)."""
    if not statuses:
        return 1, "the sweep ran no job"
    if "ok" in statuses or "partial" in statuses:
        return 0, None
    if "invalid" not in statuses:
        return 1, f"all {len(statuses)} jobs of the sweep failed (see comparison.md)"
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))
    return 1, f"no job of the sweep measured what it was asked ({counts}; see comparison.md)"


class ComparisonCallback(Callback):
    """Writes comparison.{md,csv,json,png} into the sweep directory and shows the table."""

    def __init__(self, rows: str | None = None, baseline: str | None = None,
                 plot: bool = True) -> None:
        self.rows = rows
        self.baseline = baseline
        self.plot = plot
        self.sweep_dir: Path | None = None
        self._sigterm_before: Any = None

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from harness.config.composed import as_typed, check_added_keys
        from harness.config.sweep_keys import swept_values_of
        from harness.errors import ConfigError
        from harness.launch.signals import stop_sweep_on_sigterm
        from harness.sweep.table import check_settings

        global _running
        outcome.exit_code, outcome.message = 0, None
        try:
            # `+batchsize=1,2` would fail every job: said once, before the first.
            check_added_keys(as_typed(config.hydra.overrides.task),
                             [k for k in config if k != "hydra"])
            check_settings(self.rows, self.baseline, swept_values_of(config))
        except ConfigError as err:
            log.error("%s", err)
            # Hydra turns a callback's Exception into a warning and runs the sweep anyway.
            raise SystemExit(err.exit_status) from None
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        _running = self
        self._sigterm_before = stop_sweep_on_sigterm()

    @override
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _running
        _running = None
        restore_sigterm(self._sigterm_before)
        statuses = self.write_comparison(Path(str(config.hydra.sweep.dir)))
        outcome.exit_code, outcome.message = verdict(statuses)

    def write_comparison(self, sweep_dir: Path) -> list[str]:
        """comparison.* and the table of the jobs in `sweep_dir`; their statuses. (What it
        prints also lands in sweep.log: harness.sweep.progress.)"""
        try:
            from harness.sweep.report_cli import report_sweep

            comparison = report_sweep(sweep_dir, rows=self.rows, baseline=self.baseline,
                                      plot=self.plot)
            statuses = [job.status for job in comparison.jobs]
        except Exception as err:  # the jobs' own results are safe on disk: say so, go on
            log.warning("could not build the sweep comparison: %s. Rebuild it with:"
                        " harness-report %s", err, sweep_dir)
            statuses = _statuses_on_disk(sweep_dir)
        return statuses


def end_early(interrupted: bool) -> None:
    """The sweep stopped before its end (`interrupted`: by Ctrl-C or SIGTERM, else by an
    error): the table of the jobs that finished, and the command that rebuilds it.
    harness.cli.main calls this; Hydra does not."""
    global _running
    callback, _running = _running, None
    if callback is None or callback.sweep_dir is None:
        return
    restore_sigterm(callback._sigterm_before)
    sweep_dir = callback.sweep_dir
    if not any(p.is_dir() and p.name != ".submitit" for p in sweep_dir.glob("*")):
        return  # stopped before its first job: no table to write
    statuses = callback.write_comparison(sweep_dir)
    done = sum(status not in ("interrupted", "missing") for status in statuses)
    log.warning("the sweep %s: %s in %s. Rebuild the table once the rest have run:"
                " harness-report %s", "was interrupted" if interrupted else "stopped early",
                f"the table shows the {done} job(s) that finished" if done
                else "no job finished", sweep_dir, sweep_dir)


def _statuses_on_disk(sweep_dir: Path) -> list[str]:
    from harness.errors import HarnessError
    from harness.sweep.collect import collect

    try:
        return [job.status for job in collect(sweep_dir).jobs]
    except HarnessError:
        return []
