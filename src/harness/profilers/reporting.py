"""The small contract between a preset and the run that hosts it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Reporter(Protocol):
    """A preset that writes reports once the run ends (on global rank zero only).

    `write_reports` returns the headline figures to copy into result.json
    (flat, units in the key names); `console_tables` returns rich renderables
    printed at the end of the run.
    """

    def write_reports(self, reports_dir: Path) -> dict[str, Any]: ...

    def console_tables(self) -> list[Any]: ...
