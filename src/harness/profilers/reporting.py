"""The small contract between a preset and the run that hosts it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness.errors import HarnessError


class ReportError(HarnessError):
    """A preset's report could not be made; the message (one line) says why. Raised by
    `write_reports` after it wrote what it could: result.json's `report_errors` records it."""


@runtime_checkable
class Reporter(Protocol):
    """A preset that writes reports once the run ends (on global rank zero only).

    `write_reports` returns the headline figures to copy into result.json
    (flat, units in the key names), or raises (ReportError: a one-line reason);
    `console_tables` returns rich renderables printed at the end of the run.
    """

    def write_reports(self, reports_dir: Path) -> dict[str, Any]: ...

    def console_tables(self) -> list[Any]: ...


@runtime_checkable
class Flagging(Protocol):
    """A preset with cautions about the run's figures for result.json's `flags`."""

    def flags(self) -> list[str]: ...


@runtime_checkable
class Diagnosing(Protocol):
    """A preset that turns the run's other figures into a diagnosis, after every report.

    `diagnose` gets the reports directory and the run's RunResult (metrics filled by the
    other presets) and returns (metrics to add, the `diagnosis` object of result.json).
    """

    def diagnose(self, reports_dir: Path, result: Any) -> tuple[dict[str, Any], dict[str, Any]]: ...


class ChecksBeforeLightningInit:
    """Base for presets built on a Lightning Profiler that check their options before
    calling Lightning's __init__: a refused preset has no output file, and Lightning's
    __del__ (which tears one down) must not run for it. List it first among the bases."""

    def __del__(self) -> None:
        try:
            from harness import private_api
        except ImportError:  # the interpreter is shutting down (a script's last objects)
            return

        if private_api.profiler_was_initialised(self):
            super().__del__()  # type: ignore[misc]
