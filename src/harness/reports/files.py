"""Every file harness writes goes through `write_text`: whole or not at all.

A report lands as `<name>.json` (the full record) and `<name>.csv` (its table).
Each file is written to a temporary name beside it and renamed into place, so a
reader never sees half a file, and a failed write (disk full) leaves neither a
partial file nor the temporary one behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
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


def write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` atomically, creating the parent directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def write_json(path: Path, payload: Mapping[str, Any]) -> Path:
    """Write `payload` as indented JSON."""
    return write_text(path, json.dumps(_jsonable(payload), indent=2, sort_keys=False) + "\n")


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]] | Any) -> Path:
    """Write a list of flat dicts (or a pandas DataFrame) as CSV, one column per key."""
    import pandas as pd

    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    return write_text(path, frame.to_csv(index=False))


def write_report(
    reports_dir: Path, name: str, payload: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
) -> list[Path]:
    """Write `reports/<name>.json` with the payload and `reports/<name>.csv` with its rows."""
    return [
        write_json(reports_dir / f"{name}.json", payload),
        write_csv(reports_dir / f"{name}.csv", rows),
    ]
