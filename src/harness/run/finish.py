"""The end of a run, for a job and a ProfileSession alike: every preset's reports, then the
diagnosis (the `Preset` contract: `write_reports`, then `diagnose`)."""

from __future__ import annotations

import logging

from harness.errors import HarnessError, first_line
from harness.launch.slurm import SLURM_REPORT
from harness.profilers.preset import Preset
from harness.reports.files import write_json
from harness.run.record import RunRecord
from harness.terminal import show

REPORTS_DIR = "reports"
log = logging.getLogger(__name__)


def write_reports(presets: dict[str, Preset], record: RunRecord, diagnose: bool = True) -> None:
    """Every preset's reports under reports/, figures and flags into result.json, tables on the
    terminal; a failed one goes to `report_errors`. `diagnose=False`: later (repeat=N). Rank 0."""
    reports_dir = record.output_dir / REPORTS_DIR
    result = record.result
    for name, preset in presets.items():
        try:
            report = preset.write_reports(reports_dir)
        except Exception as err:  # one broken report must not lose the others
            _failed(name, err, result.report_errors)
            continue
        result.metrics.update(report.metrics)
        result.flags = sorted(set(result.flags) | set(report.flags))
        if report.clocks:
            result.clocks = {**(result.clocks or {}), **report.clocks}
        for block, value in report.blocks.items():
            setattr(result, block, value)
        for table in report.tables:
            show(table)
    if diagnose:
        diagnose_run(presets, record)
    if result.slurm:
        write_json(reports_dir / SLURM_REPORT, {"report": "slurm", "what": "the SLURM job this run"
                   " ran in (from the SLURM_* environment variables)", **result.slurm})
    if reports_dir.is_dir():
        record.add_reports(sorted(p for p in reports_dir.rglob("*") if p.is_file()))


def diagnose_run(presets: dict[str, Preset], record: RunRecord) -> None:
    """The diagnosis from result.json's figures (after every other report)."""
    reports_dir = record.output_dir / REPORTS_DIR
    result = record.result
    for name, preset in presets.items():
        try:  # a diagnosis that fails must not lose the measured figures
            diagnosis = preset.diagnose(reports_dir, result)
        except Exception as err:
            _failed(name, err, result.report_errors)
            continue
        if diagnosis is not None:
            result.diagnosis = diagnosis
            show(f"[bold]diagnosis:[/bold] {diagnosis.verdict}")
            record.add_reports(sorted(reports_dir.glob("diagnosis.*")))


def _failed(name: str, err: Exception, report_errors: dict[str, str]) -> None:
    report_errors[name] = first_line(err, with_type=not isinstance(err, HarnessError))
    log.warning("%s report: %s", name, report_errors[name])
