"""A Comparison (harness.sweep.table) as text: comparison.md, .csv, .json and the terminal's
tables, laid out once (`sections`); docs/sweeps.md and docs/reading-results.md say how they read."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from harness.judge import WITHIN_FLOOR
from harness.measured import CAUTIONS, MAIN_PHASES, MIB, PHASE_NAMES, RSS_INCREASE, USABLE, is_finite_number
from harness.reports.files import write_csv, write_json, write_text
from harness.sweep import table
from harness.sweep.table import Comparison
from harness.terminal import show

STEM = "comparison"
DOC = "docs/sweeps.md#comparisonjson"
MARKS_DOC = "docs/sweeps.md#the-table"  # where each mark of the table is explained
BEST = "best"  # after the examples/s of a row's fastest variant, when it is beyond noise
UNDECIDED = "?"  # after a speed-up whose verdict is inconclusive (no range shown)
SAME = "*"  # after a speed-up that is no difference beyond the noise and the tolerance
# A FLOP/s column's unit: the largest its figures reach, so a CPU's do not read 0.000 TFLOP/s.
FLOP_UNITS = ((1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s"))
CELL_FOR_STATUS = {"invalid": "invalid", "oom": "OOM", "failed": "failed", "interrupted": "interrupted",
                   "missing": "no result", "unreadable": "unreadable"}


# -- cells ------------------------------------------------------------------------------------
def _spread_suffix(point: Any, metric: str) -> str:
    if point["samples"] <= 1:
        return ""
    lo, hi, mid = point[f"{metric}_min"], point[f"{metric}_max"], point[metric]
    if not (is_finite_number(lo) and is_finite_number(hi) and is_finite_number(mid)) or mid == 0:
        return ""
    return f" ±{(hi - lo) / 2 / mid:.0%}"


def _phase(metric: str) -> str | None:
    phase = metric.split("_", 1)[0]
    return phase if phase in MAIN_PHASES else None


def missing_cell(point: Any, metric: str) -> str | None:
    """'-' (no job), the job's status, or 'failed' (a partial job's phase); None with a figure."""
    if point is None:
        return "-"
    if point["status"] not in USABLE:
        return CELL_FOR_STATUS.get(point["status"], str(point["status"]))
    phase = _phase(metric)
    return "failed" if phase and point.get(f"{phase}_error") else None


def _cautions(point: Any, metric: str) -> str:
    phase = _phase(metric)
    marks = [m for m in ("thin", *CAUTIONS, "nonfinite_loss") if phase and point.get(f"{phase}_{m}")]
    return "".join(f" {'NaN loss' if mark == 'nonfinite_loss' else mark}" for mark in marks)


def significant(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant digits, never in e-notation: 4.1 -> '4.10'."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def flop_unit(values: Iterable[Any]) -> tuple[str, float]:
    """(label, scale) of a FLOP/s column (TFLOP/s when it has no figure)."""
    top = max((v for v in values if is_finite_number(v) and v > 0), default=1e12)
    return next(((label, scale) for scale, label in FLOP_UNITS if top >= scale), ("MFLOP/s", 1e6))


def value_cell(point: Any, metric: str, scale: float = 1e12) -> str:
    """A figure's cell (a FLOP/s one divided by `scale`) with its spread and cautions."""
    if (missing := missing_cell(point, metric)) is not None:
        return missing
    value = point[metric]
    if isinstance(value, str):  # a column of words: a verdict, a reason
        return value
    if not is_finite_number(value):
        return "-"
    if metric.endswith("_flop_per_s"):
        return significant(value / scale)
    if metric.endswith("_mfu"):  # a few percent is common: 0.42%, not 0%
        return f"{value:.0%}" if value >= 0.1 else f"{significant(value * 100, 2)}%"
    if metric == "peak_memory_bytes":
        return f"{value / MIB:.0f}" + _spread_suffix(point, metric)
    if metric.endswith("_share"):
        return f"{value:.0%}"
    text = f"{value:.4f}" if metric.endswith("seconds_per_iteration") else f"{value:.1f}"
    return text + _spread_suffix(point, metric) + _cautions(point, metric)


def ratio_text(value: Any, verdict: str | None, low: Any = None, high: Any = None) -> str:
    """A ratio as the table and harness-report A B show it, with its range and verdict mark."""
    if not is_finite_number(value):
        return "-"
    text = f"{value:.2f}x"
    if verdict == "inconclusive":
        return f"{text} {UNDECIDED}"
    if is_finite_number(low) and is_finite_number(high) and f"{low:.2f}" != f"{high:.2f}":
        text += f" ({low:.2f}-{high:.2f})"
    return text + (SAME if verdict == "same" else "")


def ratio_cell(point: Any, ratio: str) -> str:
    """A speed-up's cell (`ratio_text`), `thin` when either side rests on few steps."""
    if (missing := missing_cell(point, ratio)) is not None:
        return missing
    text = ratio_text(point[ratio], point.get(f"{ratio}_verdict"), point.get(f"{ratio}_min"),
                      point.get(f"{ratio}_max"))
    thin = point.get(f"{ratio}_thin") and text != "-" and not text.endswith(UNDECIDED)
    return text + (" thin" if thin else "")


# -- sections: the tables, laid out once for markdown and the terminal -----------------------
@dataclass
class Figure:
    label: str  # the figure's name with its unit: "ex/s", "between steps %", "speed-up x"
    metric: str  # column of Comparison.points
    ratio: bool = False  # a ratio against the baseline (none for the baseline itself)
    best: str | None = None  # bool column of Comparison.points marking the row's best variant
    terminal: bool = True  # shown on the terminal too (markdown shows every figure)
    scale: float = 1e12  # a FLOP/s figure's unit (the label names it: flop_unit)


@dataclass
class Section:
    title: str  # the markdown heading
    terminal_title: str
    figures: list[Figure]
    # (row value, per variant: a text per figure (None: the baseline's ratios), per variant: not ok)
    rows: list[tuple[str, list[list[str | None]], list[bool]]] = field(default_factory=list)


def _unmeasured(comparison: Comparison, metric: str) -> bool:
    """Nobody measured this metric (mode=train: no inference); a failed phase still shows."""
    points = comparison.points
    measured = points[points["status"].isin(USABLE)]
    error = f"{metric.split('_', 1)[0]}_error"
    if error in measured and measured[error].notna().any():
        return False
    return bool(len(measured)) and bool(measured[metric].isna().all())


def _cell(point: Any, figure: Figure) -> str:
    if figure.ratio:
        return ratio_cell(point, figure.metric)
    best = figure.best and point is not None and point.get(figure.best) is True
    return value_cell(point, figure.metric, figure.scale) + (f" {BEST}" if best else "")


def _fill(section: Section, comparison: Comparison) -> Section:
    for row in comparison.rows:
        per_variant, failed = [], []
        for label in comparison.variants:
            point = comparison.point(row, label)
            per_variant.append([None if f.ratio and label == comparison.baseline
                                else _cell(point, f) for f in section.figures])
            failed.append(missing_cell(point, section.figures[0].metric) is not None)
        section.rows.append((row, per_variant, failed))
    return section


def _versus(comparison: Comparison, what: str) -> str:
    """', speed-up vs fp32' (nothing when there is one variant: nothing to compare)."""
    return "" if len(comparison.variants) < 2 else f", {what} {comparison.short_label(comparison.baseline)}"


def sections(comparison: Comparison) -> list[Section]:
    """The training, inference, diagnosis and memory sections that have something to show."""
    found = []
    points = comparison.points
    for phase in MAIN_PHASES:
        title = PHASE_NAMES[phase].capitalize()
        if _unmeasured(comparison, f"{phase}_examples_per_second"):
            continue
        figures = [Figure("s/it", f"{phase}_seconds_per_iteration", terminal=False),
                   Figure("ex/s", f"{phase}_examples_per_second", best=f"{phase}_best"),
                   Figure("between steps %", f"{phase}_between_steps_share"),
                   Figure("speed-up x", f"{phase}_speedup", ratio=True)]
        found.append(_fill(Section(title, f"{title}{_versus(comparison, 'speed-up vs')}", figures),
                           comparison))
    if points["bound_by"].notna().any():
        unit, scale = flop_unit(points["train_flop_per_s"])
        figures = [Figure("bound by", "bound_by"),
                   Figure(unit, "train_flop_per_s", scale=scale), Figure("MFU %", "train_mfu")]
        found.append(_fill(Section("Diagnosis (training)", "Diagnosis of training", figures), comparison))
    if not _unmeasured(comparison, "peak_memory_bytes"):
        title = f"Peak memory ({memory_sources(comparison)})"
        figures = [Figure("peak MiB", "peak_memory_bytes"), Figure("vs base x", "memory_ratio", ratio=True)]
        found.append(_fill(Section(title, f"{title}{_versus(comparison, 'vs')}", figures), comparison))
    return found


def memory_sources(comparison: Comparison) -> str:
    """The peak memory figures' memory_source values ('device allocated / process RSS')."""
    return " / ".join(sorted(set(comparison.points["memory_source"].dropna()))) or "n/a"


def markdown_table(section: Section, comparison: Comparison,
                   terminal: bool = False) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one column per figure of each variant (`terminal`: its terminal figures)."""
    shown = [f.terminal or not terminal for f in section.figures]
    header = [comparison.row_key or "run"]
    for label in comparison.variants:
        header += [f"{comparison.short_label(label)} {f.label}".strip()
                   for f, keep in zip(section.figures, shown, strict=True)
                   if keep and not (f.ratio and label == comparison.baseline)]
    rows = [[row, *(text for cells in per_variant for text, keep in zip(cells, shown, strict=True)
                    if keep and text is not None)] for row, per_variant, _ in section.rows]
    return header, rows


def _terminal_texts(section: Section, per_variant: list[list[str | None]],
                    failed: list[bool]) -> Iterable[list[str]]:
    """Per variant, its terminal figures' texts ('': the baseline's ratio); a failed one's first alone."""
    for cells, not_ok in zip(per_variant, failed, strict=True):
        texts = ["" if text is None else text
                 for figure, text in zip(section.figures, cells, strict=True) if figure.terminal]
        yield [texts[0], *[""] * (len(texts) - 1)] if not_ok else texts


def terminal_table(section: Section, comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """(header, rows): a column per variant, its figures stacked (one variant: one per figure)."""
    if len(comparison.variants) == 1:
        return markdown_table(section, comparison, terminal=True)
    header = [comparison.row_key or "run", "", *map(comparison.short_label, comparison.variants)]
    names = "\n".join(f.label for f in section.figures if f.terminal)
    return header, [[row, names, *("\n".join(filter(None, texts))
                                   for texts in _terminal_texts(section, per_variant, failed))]
                    for row, per_variant, failed in section.rows]


def terminal_rows_table(section: Section, comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one line per row value and variant, one column per figure."""
    header = [comparison.row_key or "run", "variant", *(f.label for f in section.figures if f.terminal)]
    rows = []
    for row, per_variant, failed in section.rows:
        texts = _terminal_texts(section, per_variant, failed)
        rows += [[row if n == 0 else "", comparison.short_label(label), *cells]
                 for n, (label, cells) in enumerate(zip(comparison.variants, texts, strict=True))]
    return header, rows


# -- the words around the tables ---------------------------------------------------------------
def _preamble(comparison: Comparison) -> list[str]:
    lines = []
    ctx = comparison.context
    if ctx:
        lines.append(f"Device: {ctx.get('accelerator')} ({ctx.get('device_name')}), world size"
                     f" {ctx.get('world_size')}; torch {ctx.get('torch')}, lightning {ctx.get('lightning')}")
    counts = ", ".join(f"{n} {s}" for s, n in sorted(comparison.status_counts.items()))
    lines.append(f"Jobs: {len(comparison.jobs)} ({counts})")
    if comparison.fixed:
        lines.append("Fixed (not swept): " + ", ".join(f"{k}={v}" for k, v in comparison.fixed.items()))
    if comparison.variant_keys:
        lines.append(f"Rows: {comparison.row_key or 'one (no row key)'}. Column groups:"
                     f" {', '.join(comparison.variant_keys)}. Baseline: {comparison.baseline}.")
    elif comparison.row_key:
        lines.append(f"Rows: {comparison.row_key}.")
    if comparison.repeat_keys:
        lines.append("Pooled as repeats of each point: "
                     + "; ".join(f"{k}={','.join(v)}" for k, v in comparison.repeat_keys.items()))
    fewest = int(comparison.points["rounds"].min()) if comparison.rounds else 0
    if comparison.rounds > 1:
        lines.append(f"Rounds: {comparison.rounds} (each ran every point, order alternating)"
                     if fewest == comparison.rounds else
                     f"Rounds: {max(fewest, 1)} to {comparison.rounds} (not every point ran in each)")
    return lines


def headroom_lines(comparison: Comparison) -> list[str]:
    """One legend line per variant with a memory headroom (Comparison.headroom)."""
    lines = []
    memory = "GPU memory" if comparison.context.get("accelerator") == "cuda" else "RAM"
    for label, fit in comparison.headroom.items():
        name = f" ({label})" if len(comparison.variants) > 1 else ""
        size = (f"at least {fit['largest_batch_size']:,} (as far as the line is trusted:"
                f" {table.MAX_EXTRAPOLATION}x the largest size measured)" if fit["at_least"]
                else f"~{fit['largest_batch_size']:,}")
        resident = (f" ({fit['start_bytes'] / 2**30:.2f} GiB of it resident before training started)"
                    if fit["start_bytes"] else "")
        lines.append(f"Memory headroom{name}: about {fit['bytes_per_example'] / MIB:.1f} MiB per example"
                     f" over {fit['fixed_bytes'] / 2**30:.2f} GiB fixed{resident}, so batch_size up to"
                     f" {size} should fit in the {memory}'s {fit['capacity_bytes'] / 2**30:.0f} GiB"
                     f" ({table.KEEP_FREE:.0%} kept free; a straight line through batch sizes"
                     f" {fit['measured_batch_sizes']}: run that size to check)")
    return lines


def legend(comparison: Comparison, found: list[Section] | None = None) -> list[str]:
    """One line per mark the tables (`found`, else built here) use, then where they are
    explained, then the headroom."""
    points = comparison.points
    tolerance = f"{comparison.tolerance:.0%}"
    used = {text for section in (found or sections(comparison)) for _, cells, _ in section.rows
            for variant in cells for text in variant if text}
    marks = {
        "±": "±: half the width of the point's band (its counted jobs, widened to the noise between runs),"
             " as a share of its ex/s",
        "(": "(a-b): the judge's interval of the speed-up (95 % over the rounds' pairs, or the two points'"
             " bands)",
        f"{SAME}": f"{SAME}: the same within {tolerance} (peak memory: or {WITHIN_FLOOR})",
        f" {UNDECIDED}": f"{UNDECIDED}: undecided: the noise is wider than {tolerance}, or a side ran once"
                         " or counted no job (comparison.csv: <phase>_speedup_verdict_reason)",
        f" {BEST}": f"{BEST}: the row's fastest, beyond the others' noise and {tolerance}",
        " thin": "thin: fewer measured steps than profiler.speed.min_measured_steps",
        " contended": "contended: other processes took the CPUs or GPU; such jobs decide only in pairs"
                      " with loaded jobs of the same round",
        " noisy": "noisy: the job's step times vary too much to count",
        " NaN loss": "NaN loss: a training loss was NaN or infinite (result.json flag nonfinite_loss)",
        "invalid": "invalid: what ran contradicts a knob the job set (see its result.json)",
    }
    lines = [text for mark, text in marks.items() if any(mark in cell for cell in used)]
    if (points["memory_source"] == RSS_INCREASE).any():
        lines.append("peak RSS increase: the training phase's peak resident set over its start")
    if points["bound_by"].notna().any():
        lines.append("bound by / FLOP/s / MFU: the diagnose preset's reading of a training step")
    lines.append(f"How to read this table: {MARKS_DOC}")
    return lines + headroom_lines(comparison)


def failures(comparison: Comparison) -> list[str]:
    lines = []
    for job in comparison.jobs:
        where = ", ".join(f"{k}={job.settings.get(k, table.DEFAULT)}" for k in comparison.axes)
        if job.status == "partial" and job.result is not None:
            lines += [f"job {job.name} ({where or 'run'}): {phase} failed: {why}"
                      for phase, why in job.result.phase_errors.items()]
        elif not job.ok:
            lines.append(f"job {job.name} ({where or 'run'}): {job.status}: {job.reason}")
    return lines


def fastest_lines(comparison: Comparison) -> list[str]:
    """Per phase, the fastest point of the whole sweep (Comparison.fastest), decided or not."""
    found = getattr(comparison, "fastest", None) or {}
    lines = []
    for phase, best in sorted(found.items(), key=lambda item: item[0] != "train"):
        text = (f"fastest ({PHASE_NAMES[phase]}): {best['point']}:"
                f" {best['examples_per_second']:,.0f} ex/s")
        if is_finite_number(best.get("low")) and is_finite_number(best.get("high")):
            text += f" ({best['low']:,.0f}-{best['high']:,.0f})"
        text += ", beyond the others' noise" if best.get("decided") else f", unproven: {best['why']}"
        if best.get("ties"):
            text += f", tied with: {'; '.join(best['ties'])}"
        lines.append(text)
    return lines


# -- comparison.md, .csv, .json -------------------------------------------------------------------
def markdown(header: Sequence[str], rows: Iterable[Sequence[str]], left: int = 1) -> str:
    """A markdown table, its first `left` columns aligned left, the others right."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    aligns = ["---"] * left + ["---:"] * (len(header) - left)
    return "\n".join([line(header), line(aligns), *map(line, rows)])


def to_markdown(comparison: Comparison) -> str:
    out = [f"# Sweep comparison: {comparison.root.name}", ""]
    out += [f"{line}  " for line in _preamble(comparison)] + [""]
    found = sections(comparison)
    for section in found:
        out += [f"## {section.title}", "", markdown(*markdown_table(section, comparison)), ""]
    out += [f"{line}  " for line in fastest_lines(comparison) + legend(comparison, found)] + [""]
    for heading, lines in (("Failed jobs", failures(comparison)),
                           ("Problems reading the sweep", comparison.problems)):
        if lines:
            out += [f"## {heading}", "", *(f"- {line}" for line in lines), ""]
    return "\n".join(out)


def csv_columns(comparison: Comparison) -> list[str]:
    return [*comparison.axes, "variant", "baseline", "status", "reason", "samples", "rounds", "pooled",
            *(f"{name}{end}" for name in table.METRIC_NAMES for end in ("", "_min", "_max")),
            "memory_source", "memory_start_bytes", "bound_by",
            *(f"{phase}_{what}" for phase in MAIN_PHASES
              for what in ("thin", "contended", "noisy", "counted", "error", "best")),
            "train_nonfinite_loss", *(f"{r}{end}" for r in table.RATIOS for end in table.RATIO_SUFFIXES),
            "jobs"]


def to_json(comparison: Comparison) -> dict[str, Any]:
    """comparison.json; what each field means is in docs/sweeps.md (`doc`)."""
    frame = comparison.points[csv_columns(comparison)]
    return {
        "doc": DOC, "sweep_dir": str(comparison.root), "row_key": comparison.row_key,
        "variant_keys": comparison.variant_keys, "variants": comparison.variants,
        "baseline": comparison.baseline, "fixed": comparison.fixed, "repeat_keys": comparison.repeat_keys,
        "verdict_tolerance": comparison.tolerance, "context": comparison.context,
        "jobs": {"total": len(comparison.jobs), **comparison.status_counts},
        "metrics": {m.name: {"unit": m.unit, "what": m.what} for m in table.METRICS},
        "ratios": {r: f"{m} of the variant / {m} of the baseline, same row" for r, m in table.RATIOS.items()},
        "headroom": comparison.headroom, "fastest": comparison.fastest, "job_noise": comparison.noise,
        "points": frame.astype(object).where(frame.notna(), None).to_dict(orient="records"),
        "failures": failures(comparison), "problems": comparison.problems,
    }


def write_tables(comparison: Comparison, directory: Path) -> list[Path]:
    """comparison.md, .csv and .json in `directory` (comparison.png: harness.sweep.plot)."""
    return [write_text(directory / f"{STEM}.md", to_markdown(comparison)),
            write_csv(directory / f"{STEM}.csv", comparison.points[csv_columns(comparison)]),
            write_json(directory / f"{STEM}.json", to_json(comparison))]


# -- the terminal -----------------------------------------------------------------------------------
@dataclass
class ByWidth:
    """Tables for the width they print at: `wide` when all fit unwrapped, else `narrow(width)`."""

    wide: list[Any]
    narrow: Callable[[int], list[Any]]

    def __rich_console__(self, console: Any, options: Any) -> Iterable[Any]:
        roomy = console.options.update(max_width=10_000)  # each table's width unwrapped
        fits = all(Measurement.get(console, roomy, t).maximum <= options.max_width for t in self.wide)
        yield from self.wide if fits else self.narrow(options.max_width)


def rich_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]],
               left: Sequence[int] = (0,), ends: Sequence[bool] = (),
               widths: Sequence[int | None] = (), **options: Any) -> Any:
    """A rich table of these cells (rich markup); a cell too wide folds."""
    found = Table(title=title, **options)
    for n, column in enumerate(header):
        found.add_column(column, justify="left" if n in left else "right", overflow="fold",
                         width=widths[n] if n < len(widths) else None)
    for n, cells in enumerate(rows):
        found.add_row(*cells, end_section=n < len(ends) and ends[n])
    return found


def fitted_widths(header: list[str], rows: list[list[str]], width: int) -> list[int] | None:
    """Column widths fitting the cells in `width` at word breaks; None when the borders take it all."""
    columns = [[line for cell in column for line in cell.split("\n")]
               for column in zip(header, *rows, strict=True)]
    widths = [max(map(len, lines)) for lines in columns]
    body = [max(map(len, lines[1:]), default=0) for lines in columns]
    words = [max((len(word) for line in lines for word in line.split()), default=0) for lines in columns]
    room = width - (3 * len(header) + 1)  # the borders and each cell's padding
    if room < len(widths):
        return None
    for n in sorted(range(len(widths)), key=lambda n: (body[n] >= widths[n], words[n] - widths[n])):
        excess = sum(widths) - room
        if excess > 0:  # a column wide only for its heading goes to its body's width
            widths[n] = max(words[n], body[n] if body[n] < widths[n] else widths[n] - excess)
    while sum(widths) > room:
        widths[widths.index(max(widths))] -= 1
    return widths


def terminal_tables(comparison: Comparison, found: list[Section] | None = None) -> ByWidth:
    """The sections' tables (`found`, else built here) for the terminal: variants as columns
    where they fit, else rows."""
    found, single = found or sections(comparison), len(comparison.variants) < 2
    stacked = []
    for section in found:
        header, rows = terminal_table(section, comparison)
        # the column naming a cell's stacked figures reads left to right
        stacked.append(rich_table(section.terminal_title, header, _styled(rows), show_lines=True,
                                  left=() if single else (1,)))

    def as_rows(section: Section, width: int) -> Any:
        header, rows = terminal_rows_table(section, comparison)
        # a rule between row values, none between the variants of one
        ends = [n + 1 == len(rows) or bool(rows[n + 1][0]) for n in range(len(rows))]
        return rich_table(section.terminal_title, header, _styled(rows), left=(1,), ends=ends,
                          widths=fitted_widths(header, rows, width) or ())

    # one variant: one column per figure already
    return ByWidth(stacked, lambda width: stacked if single else [as_rows(s, width) for s in found])


def show_tables(comparison: Comparison) -> None:
    """The comparison on the terminal (and in the log); problems as warnings."""
    show(f"[bold]Sweep comparison:[/bold] {comparison.root}")
    for line in _preamble(comparison):
        show(escape(line))  # a fixed `profiler=[speed]` is not markup
    found = sections(comparison)
    tables = terminal_tables(comparison, found)
    if tables.wide:  # else no section has anything to show
        show(tables)
    for line in fastest_lines(comparison):
        show(f"[bold]{escape(line)}[/bold]")
    for line in legend(comparison, found):
        show(f"[dim]{line}[/dim]")
    for line in failures(comparison):
        show(f"[red]not ok[/red] {line}")
    for line in comparison.problems:  # on stderr: `| head` does not hide them
        logging.getLogger(__name__).warning("%s", line)


def _styled(rows: list[list[str]]) -> list[list[str]]:
    """The cells as rich markup: a status in red, a row's best in green."""
    def style(cell: str) -> str:
        if cell in CELL_FOR_STATUS.values():
            return f"[bold red]{cell}[/bold red]"
        return "\n".join(f"[bold green]{escape(line)}[/bold green]" if line.endswith(f" {BEST}")
                         else escape(line) for line in cell.split("\n"))

    return [[style(cell) for cell in row] for row in rows]
