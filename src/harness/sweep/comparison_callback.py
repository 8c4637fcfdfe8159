"""The Hydra callback that writes the comparison when a multirun ends.

Registered in conf/config.yaml under `hydra.callbacks.sweep_report`. It reads
the jobs back from disk (Hydra gives callbacks no job return values, and other
launchers run jobs elsewhere), so it sees exactly what `harness-report` sees.
Its own settings (`rows`, `baseline`) are checked when the sweep starts, against
the keys and values the sweep varies, so a typo costs no compute.

Exit-code rule: a multirun exits non-zero only when no job of the sweep
succeeded. The callback cannot exit itself without cutting short the callbacks
after it, so it leaves its verdict in `outcome` for `harness.cli.main`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from typing_extensions import override

from harness.config.checks import one_of

log = logging.getLogger(__name__)
KEY = "hydra.callbacks.sweep_report"


class Outcome:
    """The verdict of the last multirun in this process (read by the CLI)."""

    exit_code: int = 0
    message: str | None = None


outcome = Outcome()


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


def check_settings(rows: str | None, baseline: str | None, swept: dict[str, list[str]]) -> None:
    """Raise a ConfigError naming the key when `rows` or `baseline` cannot match this sweep."""
    from harness.errors import ConfigError
    from harness.sweep.table import NOT_AXES, choose_row_key, parse_variant_spec

    axes = [k for k in swept if k not in NOT_AXES]
    if rows is not None:
        one_of(f"{KEY}.rows", rows, axes or ["(nothing is swept)"])
    if not baseline:
        return
    row_key = choose_row_key(axes, rows)
    columns = [k for k in axes if k != row_key]
    for key, value in parse_variant_spec(baseline).items():
        if key not in columns:
            raise ConfigError(f"{KEY}.baseline", baseline,
                              f"key=value pairs of the column keys ({', '.join(columns) or 'none'})",
                              f"{KEY}.baseline='{columns[0]}={swept[columns[0]][0]}'" if columns
                              else f"drop {KEY}.baseline")
        if value not in swept[key]:
            raise ConfigError(f"{KEY}.baseline", baseline,
                              f"one of the swept values of {key}: {', '.join(swept[key])}",
                              f"{KEY}.baseline='{key}={swept[key][0]}'")


class ComparisonCallback(Callback):
    """Writes comparison.{md,csv,json,png} into the sweep directory and shows the table."""

    def __init__(self, rows: str | None = None, baseline: str | None = None,
                 plot: bool = True) -> None:
        self.rows = rows
        self.baseline = baseline
        self.plot = plot

    @override
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from harness.config.sweep_keys import swept_values_of

        outcome.exit_code, outcome.message = 0, None
        check_settings(self.rows, self.baseline, swept_values_of(config))

    @override
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        try:
            from harness.sweep.report import report_sweep

            comparison = report_sweep(sweep_dir, rows=self.rows, baseline=self.baseline,
                                      plot=self.plot)
            statuses = [job.status for job in comparison.jobs]
        except Exception as err:  # the jobs' own results are safe on disk: say so, go on
            log.warning("could not build the sweep comparison: %s. Rebuild it with:"
                        " harness-report %s", err, sweep_dir)
            statuses = _statuses_on_disk(sweep_dir)
        outcome.exit_code, outcome.message = verdict(statuses)


def _statuses_on_disk(sweep_dir: Path) -> list[str]:
    from harness.errors import HarnessError
    from harness.sweep.collect import collect

    try:
        return [job.status for job in collect(sweep_dir).jobs]
    except HarnessError:
        return []
