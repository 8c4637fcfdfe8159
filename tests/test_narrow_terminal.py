"""The sweep's tables and `harness-report A B` on a narrow terminal (issue #24, item 6): at 80
columns nothing is cut (`…`), no line is wider than the terminal, and every figure stands on
the line of its label, under its own heading. Hand-made job directories, no training."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from sweep_files import metrics, physicsnemo_sweep, write_job

from harness.result.jobs import collect
from harness.sweep.diff import diff, show_diff
from harness.sweep.render import (
    fitted_widths,
    flop_unit,
    sections,
    significant,
    terminal_rows_table,
    terminal_table,
    terminal_tables,
    value_cell,
)
from harness.sweep.table import build

CUT = "…"


def rendered(renderable: object, width: int) -> list[str]:
    """What a terminal `width` columns wide shows of `renderable`."""
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=width, color_system=None, force_terminal=False).print(renderable)
    return out.getvalue().splitlines()


def cells(line: str) -> list[str]:
    """The cells of a table's body line, stripped."""
    return [cell.strip() for cell in line.split("│")[1:-1]]


def tables(lines: list[str], titles: list[str]) -> dict[str, list[list[str]]]:
    """title -> the cells of each body line of the table under that title."""
    found: dict[str, list[list[str]]] = {}
    current = None
    for line in lines:
        if line.strip() in titles:
            current = found.setdefault(line.strip(), [])
        elif current is not None and line.startswith("│"):
            current.append(cells(line))
    return found


def squeezed(text: str) -> str:
    """The text without its spaces: a cell folded inside a word joins back the same."""
    return "".join(text.split())


def table_rows(body: list[list[str]],
               expected: list[list[str]]) -> list[tuple[list[str], list[str]]]:
    """Body lines grouped into the rows of `expected`: a row takes lines until its variant
    cell (the second) is whole, then those after it with no variant (its other cells'
    wrapped parts). (row's first line, its lines joined column by column)."""
    rows: list[tuple[list[str], list[str]]] = []
    n = 0
    for want in expected:
        first = joined = body[n]
        n += 1
        while n < len(body) and (squeezed(joined[1]) != squeezed(want[1]) or not body[n][1]):
            joined = [f"{a} {b}".strip() for a, b in zip(joined, body[n], strict=True)]
            n += 1
        rows.append((first, joined))
    assert n == len(body), "lines left over"
    return rows


def words(text: str) -> str:
    return " ".join(text.split())


def sweep_tables(comparison, width: int) -> tuple[list[str], dict[str, list[list[str]]]]:
    lines = rendered(terminal_tables(comparison), width)
    titles = [s.terminal_title for s in sections(comparison)]
    return lines, tables(lines, titles)


@pytest.mark.parametrize("width", [80, 60])
def test_a_four_variant_sweep_reads_at_80_columns_one_line_per_variant(tmp_path, width):
    comparison = build(collect(physicsnemo_sweep(tmp_path / "sweep", rounds=2)))
    lines, found = sweep_tables(comparison, width)
    assert not any(CUT in line for line in lines)
    assert max(len(line) for line in lines) <= width
    assert list(found) == [s.terminal_title for s in sections(comparison)]  # all four, alike
    for section in sections(comparison):
        header, expected = terminal_rows_table(section, comparison)
        # the headings: one per figure, whole (a heading may wrap between its words)
        top = next(n for n, line in enumerate(lines) if line.strip() == section.terminal_title)
        heading = [cells(line.replace("┃", "│")) for line in lines[top + 2:top + 6]
                   if line.startswith("┃")]
        assert [words(" ".join(parts)) for parts in zip(*heading, strict=True)] == header
        assert len(expected) == len(comparison.rows) * 4
        rows = table_rows(found[section.terminal_title], expected)
        for (first, joined), want in zip(rows, expected, strict=True):
            assert [squeezed(cell) for cell in joined] == [squeezed(cell) for cell in want]
            # each figure starts on its variant's line: none sits beside another's label
            assert all(bool(part) == bool(cell) for part, cell in zip(first, want, strict=True))
        if section.title == "Training":  # the planted speed-ups, on their variants' lines
            batch_1 = {squeezed(joined[1]): joined[4].split(" ")[0] for _, joined in rows[:4]}
            assert batch_1 == {"fp32compile=false": "", "fp32compile=true": "1.30x",
                               "bf16compile=false": "1.90x", "bf16compile=true": "2.47x"}


def test_at_130_columns_the_variants_stay_columns_with_their_figures_stacked(tmp_path):
    comparison = build(collect(physicsnemo_sweep(tmp_path / "sweep", rounds=2)))
    lines, found = sweep_tables(comparison, 130)
    assert not any(CUT in line for line in lines)
    for section in sections(comparison):
        header, _ = terminal_table(section, comparison)
        assert header[2:] == ["fp32 compile=false", "fp32 compile=true", "bf16 compile=false",
                              "bf16 compile=true"]
        heading = next(line for line in lines
                       if line.startswith("┃") and "fp32 compile=false" in line)
        assert cells(heading.replace("┃", "│")) == header
    training = found[sections(comparison)[0].terminal_title]
    assert [line[1] for line in training[:3]] == ["ex/s", "between steps %", "speed-up x"]


def test_a_two_variant_sweep_keeps_its_stacked_layout_at_80_columns(tmp_path):
    # sweeps.md's example: batch_size 8,32 x precision fp32,bf16, repeat=2
    root = tmp_path / "sweep"
    n = 0
    for round_ in (0, 1):
        for bs in (8, 32):
            for precision, speed in (("fp32", 55.0), ("bf16", 130.0 + 10 * round_)):
                write_job(root / str(n), [f"batch_size={bs}", f"precision={precision}",
                                          f"+sweep_round={round_}"],
                          values=metrics(speed, 4 * speed, batch_size=bs), sweep_round=round_)
                n += 1
    comparison = build(collect(root))
    lines, found = sweep_tables(comparison, 80)
    training = found["Training, speed-up vs fp32"]
    assert [line[1] for line in training[:3]] == ["ex/s", "between steps %", "speed-up x"]
    assert any(line.split() == ["┃", "batch_size", "┃", "┃", "fp32", "┃", "bf16", "┃"]
               for line in lines)


def test_the_narrowed_columns_wrap_headings_first_then_cells_with_spaces():
    header = ["batch_size", "variant", "ex/s", "between steps %", "speed-up x"]
    rows = [["1", "bf16 compile=false", "127.8 ±11% best", "25%", "3.02x (2.50-3.66)"]]
    assert fitted_widths(header, rows, 200) == [10, 18, 15, 15, 17]  # as wide as they are
    widths = fitted_widths(header, rows, 80)
    assert sum(widths) <= 80 - 16 and widths[3] == len("between")
    assert fitted_widths(header, rows, 10) is None  # the borders alone take more


def test_harness_report_at_80_columns_end_to_end(tmp_path):
    root = physicsnemo_sweep(tmp_path / "sweep", rounds=2)
    env = {**os.environ, "COLUMNS": "80"}
    code = "from harness.sweep.report_cli import main; main()"
    done = subprocess.run([sys.executable, "-c", code, str(root), "--no-write"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    table_lines = [line for line in done.stdout.splitlines() if line[:1] in "┏┃┡│├└"]
    assert table_lines and max(len(line) for line in table_lines) <= 80
    assert CUT not in done.stdout
    assert "│            │ fp32 compile=true  │  61.1 ±11% │" in done.stdout


def test_harness_report_a_b_reads_at_80_columns(tmp_path, capsys):
    a = build(collect(physicsnemo_sweep(tmp_path / "a", rounds=2)))
    b = build(collect(physicsnemo_sweep(tmp_path / "b", rounds=2, flops=1e9)))
    result = diff(a, b)
    lines = rendered(_diff_renderable(result), 80)
    assert not any(CUT in line for line in lines)
    assert max(len(line) for line in lines) <= 80
    # a point's line, then its metrics' lines, indented (a point's label may wrap)
    groups: list[tuple[str, list[list[str]]]] = []
    for line in lines:
        if not line.startswith("│"):
            continue
        if line.split("│")[1].startswith("   "):
            groups[-1][1].append(cells(line))
        elif groups and not groups[-1][1]:
            groups[-1] = (f"{groups[-1][0]} {cells(line)[0]}", [])
        else:
            groups.append((cells(line)[0], []))
    by_point = {point: changes for point, changes in groups}
    # every point whole, every metric of it on a line of its own with its A, B and B/A
    assert list(by_point) == list(dict.fromkeys(c.point for c in result.changes))
    for change in result.changes:
        metric_line = next(row for row in by_point[change.point] if row[0] == change.metric)
        assert all(metric_line[1:]), metric_line
        assert metric_line[3].startswith(f"{change.ratio:.2f}x")
    # and wide enough, the one line per change of before
    wide = rendered(_diff_renderable(result), 130)
    assert any(line.startswith("│ batch_size=1, precision=fp32, compile=false │"
                               " train_seconds_per_iteration") for line in wide)


def _diff_renderable(result):
    """What show_diff shows as its table (the renderable it logs)."""
    import logging

    shown = []

    class Keep(logging.Handler):
        def emit(self, record):
            renderable = getattr(record, "renderable", None)
            if renderable is not None and not isinstance(renderable, str):
                shown.append(renderable)

    output = logging.getLogger("harness.output")
    keep = Keep()
    output.addHandler(keep)
    try:
        show_diff(result)
    finally:
        output.removeHandler(keep)
    (table,) = shown
    return table


def test_flop_per_second_gets_a_unit_its_figures_read_in():
    assert flop_unit([2e9, 4e9, None]) == ("GFLOP/s", 1e9)
    assert flop_unit([3.2e11, 1.5e12]) == ("TFLOP/s", 1e12)
    assert flop_unit([4e5]) == ("MFLOP/s", 1e6)
    assert flop_unit([None]) == ("TFLOP/s", 1e12)
    assert [significant(v) for v in (412.34, 41.234, 4.1, 0.00412, 1234.5, 0)] == [
        "412", "41.2", "4.10", "0.00412", "1234", "0"]
    # MFU: a few percent says something too
    assert [value_cell({"status": "ok", "train_mfu": v}, "train_mfu")
            for v in (0.4, 0.05, 0.0042)] == ["40%", "5.0%", "0.42%"]


def test_a_cpus_diagnosis_reads_in_gflop_per_second_on_the_terminal_and_in_markdown(tmp_path):
    from harness.sweep.render import to_markdown

    comparison = build(collect(physicsnemo_sweep(tmp_path / "sweep", rounds=1, flops=3.1e8)))
    (diagnosis,) = [s for s in sections(comparison) if s.title == "Diagnosis (training)"]
    lines = rendered(terminal_tables(comparison), 80)
    heading = next(line for line in lines if "bound by" in line)
    assert cells(heading.replace("┃", "│")) == ["batch_size", "variant", "bound by", "GFLOP/s",
                                                "MFU %"]
    found = tables(lines, [diagnosis.terminal_title])[diagnosis.terminal_title]
    # 3.1e8 x 0.88 (the first job's wobble): 0.273 GFLOP/s, where TFLOP/s read 0.000
    assert found[0] == ["1", "fp32 compile=false", "compute", "0.273", "-"]
    assert "0.000" not in "\n".join(lines)
    markdown = to_markdown(comparison)
    assert "| batch_size | fp32 compile=false bound by | fp32 compile=false GFLOP/s |" in markdown
    assert "| 8 | compute | 2.78 | - |" in markdown  # 3.1e8 x 8 x 1.12
