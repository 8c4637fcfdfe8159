"""Tools that harness's extras install are found beside the running Python, not only on PATH."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.launch.outside_tool import find_executable
from harness.tracking.run_logging import command_as_typed, where_to_look

BIN = Path(sys.executable).parent


def test_tools_beside_the_interpreter_are_found_without_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there: a venv that is not activated
    assert find_executable("py-spy") == str(BIN / "py-spy")
    assert find_executable("no-such-tool") is None
    own = tmp_path / "my-py-spy"
    own.write_text("#!/bin/sh\n")
    own.chmod(0o755)
    assert find_executable(str(own)) == str(own)  # a configured path wins
    assert find_executable(str(tmp_path / "missing")) is None


def test_hints_name_a_command_that_works_as_printed(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert command_as_typed("mlflow") == str(BIN / "mlflow")
    hint = where_to_look("sqlite:///mlflow.db", "1", "abc")
    assert f"{BIN / 'mlflow'} ui" in hint
    monkeypatch.setenv("PATH", str(BIN))
    assert command_as_typed("mlflow") == "mlflow"  # on PATH: the bare name works
