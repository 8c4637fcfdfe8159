"""result.json: one typed schema, one atomic writer, one loader that refuses bad files in a line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest

from harness.result.schema import SCHEMA_VERSION, Device, RunResult
from harness.result.store import RESULT_FILE, ResultFileError, load_result, write_result

DOCS = Path(__file__).resolve().parent.parent / "docs" / "running.md"


def _written(tmp_path: Path) -> Path:
    result = RunResult(status="ok", knobs={"batch_size": 4}, metrics={"x_s": 1.5, "y": None},
                       device=Device(accelerator="cpu", device_name="cpu", device_count=1))
    return write_result(tmp_path, result)


def test_written_result_loads_back_the_same(tmp_path):
    path = _written(tmp_path)
    assert path == tmp_path / RESULT_FILE
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == SCHEMA_VERSION and raw["status"] == "ok"
    loaded = load_result(tmp_path)
    assert loaded.device.device_name == "cpu" and loaded.metrics == {"x_s": 1.5, "y": None}
    assert [p.name for p in tmp_path.iterdir()] == [RESULT_FILE]  # no temporary file left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    _written(tmp_path)
    before = (tmp_path / RESULT_FILE).read_text()

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError):
        write_result(tmp_path, RunResult(status="failed"))
    assert (tmp_path / RESULT_FILE).read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == [RESULT_FILE]


@pytest.mark.parametrize(("text", "message"), [
    ('{"schema_version": 2, "status": "ok", "metrics": {', "truncated"),
    ("", "empty file"),
    ('{"hello": 1}', "not a harness result"),
    ('[1, 2]', "not a harness result"),
    ('{"schema_version": 99, "status": "ok"}', "newer than this harness reads"),
    ('{"schema_version": 2, "status": "sideways"}', "field status"),
    ('{"schema_version": 2, "status": "ok", "metrics": 3}', "field metrics"),
    ("not json at all", "not JSON"),
])
def test_bad_files_are_refused_in_one_line_naming_the_file(tmp_path, text, message):
    (tmp_path / RESULT_FILE).write_text(text)
    with pytest.raises(ResultFileError) as caught:
        load_result(tmp_path)
    line = str(caught.value)
    assert line.startswith(str(tmp_path / RESULT_FILE)) and message in line and "\n" not in line


def test_version_1_files_still_load(tmp_path):
    (tmp_path / RESULT_FILE).write_text(json.dumps(
        {"schema_version": 1, "status": "ok", "metrics": {"train_examples_per_second": 3.0},
         "precision_used": "32-true", "device": {"accelerator": "cpu", "device_name": "x",
                                                 "device_count": 1, "world_size": 1}}))
    assert load_result(tmp_path).metrics["train_examples_per_second"] == 3.0


def test_metrics_an_earlier_harness_named_load_under_todays_names(tmp_path):
    (tmp_path / RESULT_FILE).write_text(json.dumps(
        {"schema_version": 2, "status": "ok",
         "metrics": {"train_dataloader_wait_share": 0.25, "inference_dataloader_wait_s": 1.5},
         "repeats": {"requested": 2, "completed": 2, "what": "-",
                     "min": {"train_dataloader_wait_share": 0.2},
                     "max": {"train_dataloader_wait_share": 0.3},
                     "per_repeat": [{"train_dataloader_wait_share": 0.2}]}}))
    result = load_result(tmp_path)
    assert result.metrics == {"train_between_steps_share": 0.25,
                              "inference_between_steps_s": 1.5}
    assert result.repeats.min == {"train_between_steps_share": 0.2}
    assert result.repeats.per_repeat == [{"train_between_steps_share": 0.2}]


def fields_table() -> str:
    """The markdown table of result.json's top-level fields that docs/running.md shows."""
    lines = ["| field | type | meaning |", "|---|---|---|"]
    for name, info in RunResult.model_fields.items():
        if get_origin(info.annotation) is Literal:
            kind = "one of " + ", ".join(get_args(info.annotation))
        else:
            kind = str(info.annotation).replace("typing.", "").replace("harness.result.schema.", "")
            kind = kind.replace("<class '", "").replace("'>", "").replace(" | ", " or ")
        lines.append(f"| `{name}` | {kind} | {info.description or ''} |")
    return "\n".join(lines)


def test_running_md_lists_every_field_of_the_schema():
    table = fields_table()
    assert table in DOCS.read_text(), (
        "docs/running.md's result.json table is out of step with harness.result.schema;"
        f" paste this table in:\n{table}")
