"""`harness-report A B`: what changed from result set A to B, metric by metric (ratios B / A),
on the terminal and in diff.md, .csv, .json. How points are matched and judged: docs/sweeps.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from harness.errors import HarnessError
from harness.judge import TOLERANCE, WITHIN_FLOOR, Verdict, judge, judge_sizes
from harness.measured import USABLE, is_finite_number
from harness.reports.files import write_csv, write_json, write_text
from harness.sweep.render import SAME, UNDECIDED, ByWidth, markdown, ratio_text, rich_table, value_cell
from harness.sweep.table import DEFAULT, METRICS, Comparison
from harness.terminal import show


@dataclass
class Change:
    point: str  # "batch_size=4, precision=bf16"
    metric: str
    unit: str
    higher_is_better: bool
    a: float | None
    b: float | None
    ratio: float | None  # b / a
    status_a: str
    status_b: str
    # harness.judge's verdict at Diff.tolerance: a phase's speed (its s/it too, by its examples/s)
    # on the two points' bands, peak memory on their samples; None: other metrics, a side failed
    verdict: Verdict | None = None

    @property
    def worse(self) -> bool:
        """B is worse than A (slower, or more memory), whatever the size."""
        return self.ratio is not None and (self.ratio < 1 if self.higher_is_better else self.ratio > 1)


@dataclass
class Diff:
    a: Comparison
    b: Comparison
    keys: list[str]
    changes: list[Change] = field(default_factory=list)
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    setup_changes: dict[str, tuple[str, str]] = field(default_factory=dict)
    tolerance: float = TOLERANCE  # the verdicts' threshold


def _label(comparison: Comparison, point: Any, keys: list[str]) -> str:
    """'batch_size=4, precision=bf16': the point's value of each of `keys`."""
    values = {k: str(point[k]) for k in comparison.axes if k in point}
    return ", ".join(f"{k}={values.get(k, comparison.fixed.get(k, DEFAULT))}" for k in keys) or "run"


def diff(a: Comparison, b: Comparison, tolerance: float = TOLERANCE) -> Diff:
    """Match the points of A and B and compare every metric, speed verdicts against `tolerance`."""
    keys = list(dict.fromkeys([*a.axes, *b.axes]))
    repeats = {*a.repeat_settings, *b.repeat_settings}  # the pooled keys among them
    fixed = {k: (a.fixed.get(k, DEFAULT), b.fixed.get(k, DEFAULT)) for k in [*a.fixed, *b.fixed]}
    setup = {k: ab for k, ab in fixed.items() if k not in keys and k not in repeats and ab[0] != ab[1]}
    points_a, points_b = ({_label(c, p, keys): p for _, p in c.points.iterrows()} for c in (a, b))
    result = Diff(a, b, keys, setup_changes=setup, tolerance=tolerance)
    pairs = [(label, points_a[label], points_b[label]) for label in points_a if label in points_b]
    if not pairs and len(points_a) == 1 and len(points_b) == 1:
        (la, pa), (lb, pb) = next(iter(points_a.items())), next(iter(points_b.items()))
        pairs = [(la if la == lb else f"{la} -> {lb}", pa, pb)]
    else:
        result.only_in_a = [label for label in points_a if label not in points_b]
        result.only_in_b = [label for label in points_b if label not in points_a]
    if not pairs:
        raise HarnessError(f"{a.root} and {b.root} have no point in common (A: {'; '.join(points_a)};"
                           f" B: {'; '.join(points_b)}). Fix: compare sweeps over the same values")
    for label, pa, pb in pairs:
        ok_a, ok_b = pa["status"] in USABLE, pb["status"] in USABLE
        for metric in [m for m in METRICS if m.compared]:
            va, vb = pa.get(metric.name), pb.get(metric.name)
            va = va if ok_a and is_finite_number(va) else None
            vb = vb if ok_b and is_finite_number(vb) else None
            if va is None and vb is None and ok_a and ok_b:
                continue  # not measured on either side (e.g. mode=train: no inference)
            ratio = vb / va if va is not None and vb is not None and va > 0 else None
            verdict = _verdict(pa, pb, metric.name, tolerance) if ok_a and ok_b else None
            result.changes.append(Change(label, metric.name, metric.unit, metric.higher_is_better, va, vb,
                                         ratio, str(pa["status"]), str(pb["status"]), verdict))
    return result


def _verdict(pa: Any, pb: Any, metric: str, tolerance: float) -> Verdict | None:
    phase = metric.split("_", 1)[0]
    if metric.endswith(SPEED_FIGURES):  # two sweeps: their rounds ran apart, so bands, not pairs
        return judge(pa[f"{phase}_evidence"].band, pb[f"{phase}_evidence"].band, tolerance)
    if metric == "peak_memory_bytes":
        return judge_sizes(pa["memory_samples"], pb["memory_samples"], tolerance)
    return None


# The metrics that get a verdict: both say the phase's rate (s/it is its inverse).
SPEED_FIGURES = ("_examples_per_second", "_seconds_per_iteration")

UNITS = {"bytes": "MiB", "s": "s"}  # in a cell of diff's table; ex/s is the default
LEGEND = ("B/A above 1.00x: B is higher (faster for examples/s; slower for s/it; more memory"
          " for peak memory).")


def _marks(result: Diff) -> str:
    """What `*` and `?` mean, at the tolerance the verdicts were judged against."""
    text = (f"{SAME}: no difference: on the counted samples, within their noise and the"
            f" {result.tolerance:.0%} tolerance (peak memory: or {WITHIN_FLOOR}).")
    if any(c.verdict is not None and c.verdict.kind == "inconclusive" for c in result.changes):
        text += (f" {UNDECIDED}: inconclusive: a side contended or noisy, or its noise wider"
                 f" than the {result.tolerance:.0%} asked about (diff.csv verdict_reason).")
    return text


def _figures(change: Change, markup: bool = False) -> list[str]:
    """A and B as the sweep table's cells show them, with their unit (the column mixes them); B/A."""
    found = []
    for value, status in ((change.a, change.status_a), (change.b, change.status_b)):
        text = value_cell({"status": status, "samples": 1, change.metric: value}, change.metric)
        found.append(f"{text} {UNITS[change.unit]}" if change.unit in UNITS and value is not None else text)
    verdict = change.verdict
    ratio = ratio_text(change.ratio, verdict.kind if verdict else None)
    if markup and verdict is not None and verdict.real:
        ratio = f"[{'red' if change.worse else 'green'}]{ratio}[/]"
    return [*found, ratio]


def to_markdown(result: Diff) -> str:
    lines = [f"# {result.b.root} (B) against {result.a.root} (A)", ""]
    for key, (va, vb) in result.setup_changes.items():
        lines.append(f"Setup differs: {key}: A={va}, B={vb}  ")
    table = [[c.point, c.metric, *_figures(c)] for c in result.changes]
    lines += ["", markdown(["point", "metric", "A", "B", "B/A"], table, left=2), ""]
    lines += [f"{LEGEND} {_marks(result)}", ""]
    lines += [f"- only in A: {label}" for label in result.only_in_a]
    lines += [f"- only in B: {label}" for label in result.only_in_b]
    return "\n".join(lines) + "\n"


def show_diff(result: Diff) -> None:
    """The diff on the terminal: one line per change where that fits, else a block per point."""
    title, changes = f"B: {result.b.root}\nagainst A: {result.a.root}", result.changes
    wide = rich_table(title, ["point", "metric", "A", "B", "B/A"],
                      [[escape(c.point), c.metric, *_figures(c, markup=True)] for c in changes],
                      left=(0, 1))
    lines, ends = [], []
    for n, c in enumerate(changes):
        if n == 0 or changes[n - 1].point != c.point:
            lines.append([f"[bold]{escape(c.point)}[/bold]", "", "", ""])
            ends.append(False)
        lines.append([f"  {c.metric}", *_figures(c, markup=True)])
        ends.append(n + 1 == len(changes) or changes[n + 1].point != c.point)
    narrow = rich_table(title, ["point / metric", "A", "B", "B/A"], lines, ends=ends)
    for key, (va, vb) in result.setup_changes.items():
        show(f"setup differs: {key}: A={va}, B={vb}")
    show(ByWidth([wide], lambda width: [narrow]))
    show(f"[dim]{LEGEND} {_marks(result)}[/dim]")
    for label in result.only_in_a:
        show(f"only in A: {label}")
    for label in result.only_in_b:
        show(f"only in B: {label}")


def write(result: Diff, directory: Path) -> list[Path]:
    changes = [{"point": c.point, "metric": c.metric, "unit": c.unit, "a": c.a, "b": c.b,
                "ratio_b_over_a": c.ratio, "status_a": c.status_a, "status_b": c.status_b,
                "verdict": c.verdict.kind if c.verdict else None,
                "verdict_reason": c.verdict.reason if c.verdict else None} for c in result.changes]
    return [write_text(directory / "diff.md", to_markdown(result)),
            write_csv(directory / "diff.csv", changes),
            write_json(directory / "diff.json", {
                "a": str(result.a.root), "b": str(result.b.root), "matched_on": result.keys,
                "setup_changes": {k: {"a": va, "b": vb} for k, (va, vb) in result.setup_changes.items()},
                "changes": changes, "only_in_a": result.only_in_a, "only_in_b": result.only_in_b})]
