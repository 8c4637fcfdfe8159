"""result.json: the one-file summary of a run that sweeps and tools read back.

It is written when the run ends, whatever the ending: a run that fails still
leaves its status, a one-line reason and whatever it measured.
"""

from __future__ import annotations

import datetime as dt
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.reports.files import write_json

RESULT_FILE = "result.json"
ERROR_LOG = "error.log"
SCHEMA_VERSION = 1


def classify_failure(err: BaseException) -> tuple[str, str]:
    """(status, one-line reason) for an exception that ended a run."""
    if isinstance(err, (KeyboardInterrupt, SystemExit)):
        # Lightning turns Ctrl+C into a graceful shutdown that ends in SystemExit.
        return "interrupted", f"interrupted ({type(err).__name__})"
    if isinstance(err, HarnessError):
        return "failed", str(err)
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if type(err).__name__ == "OutOfMemoryError" or "out of memory" in text.lower():
        return "oom", f"out of memory: {text[:300]}"
    if type(err).__module__.startswith(("torch._dynamo", "torch._inductor")):
        return "failed", f"compile failed: {type(err).__name__}: {text[:300]}"
    return "failed", f"{type(err).__name__}: {text[:300]}"


@dataclass
class RunRecord:
    """Collects what a run learns about itself and writes it as result.json."""

    output_dir: Path
    overrides: list[str] = field(default_factory=list)
    status: str = "running"
    reason: str | None = None
    knobs: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    reports: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)

    def fail(self, err: BaseException) -> None:
        self.status, self.reason = classify_failure(err)
        if not isinstance(err, (HarnessError, KeyboardInterrupt, SystemExit)):
            log = self.output_dir / ERROR_LOG
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("".join(traceback.format_exception(err)))
            self.details["error_log"] = ERROR_LOG

    def add_reports(self, paths: list[Path]) -> None:
        for path in paths:
            self.reports.append(str(path.relative_to(self.output_dir)))

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "status": self.status,
            "reason": self.reason,
            "knobs": self.knobs,
            "overrides": self.overrides,
            "metrics": self.metrics,
            **self.details,
            "reports": sorted(set(self.reports)),
            "started_at": dt.datetime.fromtimestamp(self.started, dt.timezone.utc).isoformat(),
            "duration_s": time.time() - self.started,
        }

    def write(self) -> Path:
        return write_json(self.output_dir / RESULT_FILE, self.as_dict())
