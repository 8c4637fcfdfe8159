"""Every report lands as `<name>.json` (the full record) and `<name>.csv` (its table)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _jsonable(value: Any) -> Any:
    # NaN and inf are not JSON; null says "not measured" honestly.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(path: Path, payload: Mapping[str, Any]) -> Path:
    """Write `payload` as indented JSON, creating the parent directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(_jsonable(payload), indent=2, sort_keys=False) + "\n")
    tmp.replace(path)  # readers never see half a file
    return path


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write a list of flat dicts as CSV, one column per key."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(list(rows)).to_csv(path, index=False)
    return path


def write_report(
    reports_dir: Path, name: str, payload: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
) -> list[Path]:
    """Write `reports/<name>.json` with the payload and `reports/<name>.csv` with its rows."""
    return [
        write_json(reports_dir / f"{name}.json", payload),
        write_csv(reports_dir / f"{name}.csv", rows),
    ]
