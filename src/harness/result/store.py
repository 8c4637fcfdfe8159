"""The one writer and the one loader of result.json: every reader loads through `load_result`,
so a truncated, foreign or too-new file is refused the same way everywhere, in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from harness.errors import HarnessError
from harness.reports.files import write_json
from harness.result.schema import READABLE_VERSIONS, SCHEMA_VERSION, RunResult

RESULT_FILE = "result.json"
# Metric names an earlier harness wrote, under today's names: old sweeps still compare.
RENAMED_METRICS = {"_dataloader_wait_share": "_between_steps_share", "_dataloader_wait_s": "_between_steps_s"}


class ResultFileError(HarnessError):
    """A result.json that cannot be used; the message is one line naming the file."""


def write_result(run_dir: Path, result: RunResult) -> Path:
    """Write `run_dir/result.json` atomically (readers never see half a file)."""
    return write_json(Path(run_dir) / RESULT_FILE, result.as_json())


def _why_unreadable(text: str, err: json.JSONDecodeError) -> str:
    if not text.strip():
        return "empty file"
    if err.pos >= len(text.rstrip()) - 1 or err.msg.startswith("Unterminated string"):
        return f"truncated: the JSON ends early (line {err.lineno})"
    return f"not JSON: {err.msg} at line {err.lineno} column {err.colno}"


def load_result(path: Path) -> RunResult:
    """The RunResult in `path` (a result.json, or the run directory holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULT_FILE
    try:
        text = path.read_text()
    except OSError as err:
        raise ResultFileError(f"{path}: cannot be read ({err.strerror or err})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise ResultFileError(f"{path}: {_why_unreadable(text, err)}") from None
    if not isinstance(raw, dict) or "status" not in raw:
        raise ResultFileError(f"{path}: not a harness result (no 'status' field)")
    version = raw.get("schema_version", 1)
    if version not in READABLE_VERSIONS:
        newer = isinstance(version, int) and version > SCHEMA_VERSION
        why = "newer than this harness reads" if newer else "not one harness wrote"
        raise ResultFileError(f"{path}: schema_version {version!r} is {why} (it reads"
                              f" {', '.join(map(str, READABLE_VERSIONS))})"
                              + (". Fix: upgrade lightning-harness" if newer else ""))
    _rename_metrics(raw)
    try:
        return RunResult.model_validate(raw)
    except ValidationError as err:
        problem = err.errors()[0]
        where = ".".join(str(p) for p in problem["loc"])
        raise ResultFileError(f"{path}: field {where}: {problem['msg']}") from None


def _rename_metrics(raw: dict) -> None:
    """`raw`'s metrics (and its repeats' copies) under today's names, in place."""
    repeats = raw.get("repeats") if isinstance(raw.get("repeats"), dict) else {}
    tables = [raw.get("metrics"), repeats.get("min"), repeats.get("max"), *(repeats.get("per_repeat") or [])]
    for table in (t for t in tables if isinstance(t, dict)):
        for key in list(table):
            for old, new in RENAMED_METRICS.items():
                if key.endswith(old) and key[: -len(old)] + new not in table:
                    table[key[: -len(old)] + new] = table.pop(key)


OVERRIDES_FILE = Path(".hydra") / "overrides.yaml"  # Hydra's record of a job's overrides


def job_dirs(root: Path) -> list[Path]:
    """The job directories of a sweep under `root` (a result.json or Hydra's overrides.yaml
    in them), in natural order (2 before 10); a job's own nested outputs are not jobs."""
    root = Path(root)
    found = {p.parent for p in root.rglob(RESULT_FILE)}
    found |= {p.parent.parent for p in root.rglob(str(OVERRIDES_FILE))}
    found.discard(root)
    jobs = [d for d in found if not any(other in d.parents for other in found)]
    return sorted(jobs, key=lambda d: [int(part) if part.isdigit() else part
                                       for part in re.split(r"(\d+)", str(d.relative_to(root)))])


def read_yaml(path: Path) -> Any:
    """What the YAML file `path` holds (Hydra's records of a job or a sweep); None when it
    cannot be read."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None


def hydra_overrides(job_dir: Path) -> list[str] | None:
    """The overrides Hydra recorded for the job in `job_dir`; None where it recorded none."""
    loaded = read_yaml(Path(job_dir) / OVERRIDES_FILE)
    return [str(o) for o in loaded] if isinstance(loaded, list) else None
