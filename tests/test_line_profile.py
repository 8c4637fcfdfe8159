"""@harness.profile and profiler=line: marked functions get a line-by-line report."""

from __future__ import annotations

import re

import pytest

import harness

# The test workload: FAST has 12 training batches; each calls sum_of_squares(50) once.
TRAIN_BATCHES = 12
CALL_SIZE = 50
MODEL = "model._target_=instrumented_workload.CallingModule"


def _line_rows(text: str, function: str) -> dict[str, tuple[int, float]]:
    """{line contents: (hits, time)} of one function's table in line_profiler's text report."""
    block = text[text.index(f"Function: {function} at line") :]
    block = block.split("\nTotal time:")[0]
    rows = {}
    for line in block.splitlines():
        found = re.match(r"\s*\d+\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(.*)$", line)
        if found:
            rows[found[5].strip()] = (int(found[1]), float(found[2]))
    return rows


def test_profile_returns_the_function_itself():
    def f() -> int:
        return 1

    assert harness.profile(f) is f
    from line_target import sum_of_squares

    assert sum_of_squares.__name__ == "sum_of_squares"
    assert sum_of_squares(4) == 0 + 1 + 4 + 9


@pytest.mark.slow
def test_line_preset_reports_marked_and_listed_functions(harness):
    done = harness(
        MODEL,
        "profiler=[line]",
        "mode=train",
        "profiler.line.functions=[harness.workload.model.Attention.forward]",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = (done.run_dir() / "reports" / "line.txt").read_text()
    assert "Timer unit: 1e-06 s" in text

    # Marked with @harness.profile, called through a name imported before profiling began.
    rows = _line_rows(text, "sum_of_squares")
    assert rows["total = 0"][0] == TRAIN_BATCHES
    assert rows["total += i * i"][0] == TRAIN_BATCHES * CALL_SIZE
    assert rows["return total"][0] == TRAIN_BATCHES
    assert all(time >= 0 for _, time in rows.values())

    # Listed by dotted name: 2 blocks x (12 training + 4 validation batches).
    attention = _line_rows(text, "Attention.forward")
    assert attention["return self.proj(out)"][0] == 2 * (TRAIN_BATCHES + 4)

    report = done.report("line")
    assert report["listed"] == ["harness.workload.model.Attention.forward"]
    assert any(f.startswith("sum_of_squares ") for f in report["functions_called"])
    assert done.result()["metrics"]["line_functions_called"] == 2


def test_unknown_function_name_names_the_key():
    from harness.errors import ConfigError
    from harness.profilers.line import LinePreset

    with pytest.raises(ConfigError) as caught:
        LinePreset(functions=["harness.workload.model.Nope"])
    assert caught.value.key == "profiler.line.functions"
    assert "harness.workload.model.Nope" in str(caught.value)
    from omegaconf import OmegaConf

    from harness.config.arguments import check_node

    with pytest.raises(ConfigError, match="profiler.line.output_unit"):  # the job's one check
        check_node("profiler.line", LinePreset, OmegaConf.create({"output_unit": 0}))


def test_functions_marked_while_the_profiler_runs_are_added():
    from harness.instrument import line_profile
    from harness.profilers.line import LinePreset

    preset = LinePreset()
    line_profile.attach(preset.profiler)
    try:

        @harness.profile
        def late(n: int) -> int:
            return n + 1
    finally:
        line_profile.detach()
    preset.profiler.enable_by_count()
    late(1)
    preset.profiler.disable_by_count()
    hits = [row for row in preset.rows() if row["function"].endswith("late")]
    assert [row["hits"] for row in hits] == [1]
