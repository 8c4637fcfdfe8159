"""Every file harness writes is written whole or not at all: to a temporary name beside it,
then renamed into place."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
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
    """A temporary name beside `path` for a tool that writes the file: renamed at the end."""
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
    with atomic_path(path) as tmp, open(tmp, "wb") as out:
        out.write(data)
    return Path(path)


def write_text(path: Path, text: str) -> Path:
    return write_bytes(path, text.encode())


def write_json(path: Path, payload: Mapping[str, Any]) -> Path:
    return write_text(path, json.dumps(_jsonable(payload), indent=2, sort_keys=False) + "\n")


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]] | Any) -> Path:
    """Flat dicts (or a DataFrame) as CSV, byte for byte as pandas; plain values without it (~0.4 s)."""
    if hasattr(rows, "to_csv"):  # a DataFrame
        return write_text(path, rows.to_csv(index=False))
    rows = list(rows)
    if (text := _csv_of_rows(rows)) is None:
        import pandas as pd

        text = pd.DataFrame(rows).to_csv(index=False)
    return write_text(path, text)


def _csv_of_rows(rows: list[Mapping[str, Any]]) -> str | None:
    """pandas' `DataFrame(rows).to_csv(index=False)` for plain values; None for the others."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    if not all(isinstance(key, str) for key in columns):
        return None
    cells = [_column_texts([row.get(column) for row in rows]) for column in columns]
    if None in cells:
        return None
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")  # pandas: QUOTE_MINIMAL, '\n' on POSIX
    writer.writerow(columns)
    writer.writerows(zip(*cells, strict=True) if cells else ([] for _ in rows))
    return out.getvalue()


def _cell_kind(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "missing"
    kind = type(value)
    if kind is bool:
        return "bool"
    if kind is int:
        return "int" if -(2**63) <= value < 2**63 else None  # beyond int64 pandas keeps objects
    if isinstance(value, float):  # float and numpy.float64, written by repr as pandas does
        return "float"
    return "str" if isinstance(value, str) else None  # a str enum is written by its value


def _float_text(value: float) -> str:
    return repr(float(value))


def _column_texts(values: list[Any]) -> list[str] | None:
    """A column as pandas writes it: its dtype decides how a number reads; missing is ''."""
    kinds = [_cell_kind(v) for v in values]
    present = set(kinds) - {"missing"}
    if None in present:
        return None
    if present == {"bool"} or (present == {"int"} and "missing" not in kinds):
        write: Callable[[Any], str] = str  # True, False; an int64 column
    elif present and present <= {"int", "float"}:  # a float64 column, a gap included
        write = _float_text
    elif present <= {"str"}:
        write = str.__str__  # a str enum's value, as the csv module writes it
    else:  # bools beside numbers or text, numbers beside text: object columns
        return None
    return ["" if kind == "missing" else write(v) for v, kind in zip(values, kinds, strict=True)]


def write_report(reports_dir: Path, name: str, payload: Mapping[str, Any],
                 rows: Sequence[Mapping[str, Any]]) -> list[Path]:
    """Write `reports/<name>.json` with the payload and `reports/<name>.csv` with its rows."""
    return [write_json(reports_dir / f"{name}.json", payload), write_csv(reports_dir / f"{name}.csv", rows)]
