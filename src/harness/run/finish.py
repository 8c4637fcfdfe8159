"""The reports the presets write at the end of a run.

Shared by harness's own jobs (harness.run.measure) and by a user's own training script
(harness.session.ProfileSession), so both write the same reports/ and result.json.
"""

from __future__ import annotations

import logging
from typing import Any

from harness.errors import HarnessError, first_line
from harness.result.schema import Diagnosis, RunResult
from harness.run.record import RunRecord

REPORTS_DIR = "reports"
log = logging.getLogger(__name__)


def write_reports(presets: dict[str, Any], record: RunRecord, diagnose: bool = True) -> None:
    """Every preset's reports under reports/, its figures and flags into result.json, its
    tables on the terminal. A report that fails is recorded in `report_errors` and said in
    one warning line; the others are still written. `diagnose=False` leaves the diagnosis
    to `diagnose_run` (repeat=N: once, on the pooled figures). Call on global rank zero only."""
    from harness.launch.slurm import SLURM_REPORT, slurm_report
    from harness.profilers.reporting import Flagging, Reporter
    from harness.reports.files import write_json
    from harness.terminal import show

    reports_dir = record.output_dir / REPORTS_DIR
    result = record.result
    for name, preset in presets.items():
        if not isinstance(preset, Reporter):
            continue
        try:
            result.metrics.update(preset.write_reports(reports_dir))
            if isinstance(preset, Flagging):
                result.flags = sorted(set(result.flags) | set(preset.flags()))
            for table in preset.console_tables():
                show(table)
        except Exception as err:  # one broken report must not lose the others
            result.report_errors[name] = first_line(err, with_type=not isinstance(err, HarnessError))
            log.warning("%s report: %s", name, result.report_errors[name])
    if diagnose:
        diagnose_run(presets, record)
    if result.slurm:
        write_json(reports_dir / SLURM_REPORT, slurm_report(result.slurm))
    if reports_dir.is_dir():
        record.add_reports(sorted(p for p in reports_dir.rglob("*") if p.is_file()))


def diagnose_run(presets: dict[str, Any], record: RunRecord) -> None:
    """The diagnosis from result.json's metrics as they stand (after every other report: it
    reads their figures), into reports/diagnosis.* and result.json."""
    from harness.profilers.reporting import Diagnosing

    reports_dir = record.output_dir / REPORTS_DIR
    for name, preset in presets.items():
        if isinstance(preset, Diagnosing):
            _diagnose(name, preset, reports_dir, record.result)
            record.add_reports(sorted(reports_dir.glob("diagnosis.*")))


def _diagnose(name: str, preset: Any, reports_dir: Any, result: RunResult) -> None:
    from harness.terminal import show

    try:
        metrics, diagnosis = preset.diagnose(reports_dir, result)
        result.metrics.update(metrics)
        result.diagnosis = Diagnosis.model_validate(diagnosis)
        show(f"[bold]diagnosis:[/bold] {result.diagnosis.verdict}")
    except Exception as err:  # a diagnosis that fails must not lose the measured figures
        result.report_errors[name] = first_line(err)
        log.warning("%s report: %s", name, result.report_errors[name])
