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
from collections.abc import Iterator, Mapping, Sequence
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


@contextlib.contextmanager
def atomic_path(path: Path, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary name beside `path` for a tool that writes the file itself (a trace
    exporter, matplotlib): renamed to `path` when the block ends, removed when it fails.
    `suffix` ends the temporary name, for tools that pick the format by it."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    except OSError as err:
        err.filename = str(path)  # the file asked for, not the temporary name
        raise
    os.close(handle)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes(path: Path, data: bytes) -> Path:
    """Write `data` to `path` atomically, creating the parent directory."""
    with atomic_path(path) as tmp, open(tmp, "wb") as out:
        out.write(data)
    return Path(path)


def write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` atomically, creating the parent directory."""
    return write_bytes(path, text.encode())


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
