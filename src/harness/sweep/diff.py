"""`harness-report A B`: what changed from result set A to result set B, metric by metric,
and its renderings (the terminal's table; diff.md, diff.csv, diff.json).

Points are matched on the keys swept in either set (repeat keys, `seed` by default,
pool into the points on both sides and never count as a setup difference); when both
sets hold one point each (two single runs, say fp32 against bf16), those two are
compared. Every ratio is B / A. A change is flagged as within noise when the samples of
A and B (repeats, rounds or seeds) overlap: B/A over their min..max ranges holds 1.0.

The speed figures (examples/s, s/it) also get a verdict on the counted samples
(harness.sweep.verdict): real, same, or inconclusive when a side is contended or
noisy or the noise is wider than the tolerance; a regression is a real slow-down past
the tolerance. Memory, and results too old to carry a step spread that ran once, keep
the rule above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.measured import USABLE, is_finite_number
from harness.sweep.render import CELL_FOR_STATUS, SAME, UNDECIDED, ByWidth
from harness.sweep.table import DEFAULT, METRICS, Comparison, ratio_range
from harness.sweep.verdict import TABLE_TOLERANCE, Band, Verdict, judge


@dataclass
class Change:
    point: str  # "batch_size=4, precision=bf16"
    metric: str
    unit: str
    higher_is_better: bool
    a: float | None
    b: float | None
    ratio: float | None  # b / a
    within_spread: bool | None  # None: no spread known
    status_a: str
    status_b: str
    band_a: Band | None = None  # speed figures: each side's band over its counted samples
    band_b: Band | None = None
    tolerance: float = TABLE_TOLERANCE  # what `verdict` was judged against

    @property
    def worse(self) -> bool:
        """B is worse than A (slower, or more memory), whatever the size."""
        if self.ratio is None:
            return False
        return self.ratio < 1 if self.higher_is_better else self.ratio > 1

    def judged(self, tolerance: float) -> Verdict | None:
        """The verdict on the phase's rates against `tolerance` (harness.sweep.verdict);
        None for memory, a side not measured, or a spread not known."""
        if self.status_a not in USABLE or self.status_b not in USABLE:
            return None
        return judge(self.band_a, self.band_b, tolerance)

    @property
    def verdict(self) -> Verdict | None:
        return self.judged(self.tolerance)

    def is_regression(self, tolerance: float) -> bool:
        """B is worse than A by more than `tolerance` and beyond noise, or B failed where A
        measured. Worse by 0.1 means 10% less throughput (examples/s, or the same loss seen
        as a longer s/iteration), or 10% more peak memory."""
        if self.status_a in USABLE and self.status_b not in USABLE:
            return True
        verdict = self.judged(tolerance)
        if verdict is not None:
            return verdict.regression
        if self.ratio is None or self.within_spread or not self.worse:
            return False
        if self.higher_is_better:
            size = 1 - self.ratio  # share of throughput lost
        elif self.unit == "s":
            size = 1 - 1 / self.ratio  # the same, seen from time per iteration
        else:
            size = self.ratio - 1  # share of memory added
        return size > tolerance


@dataclass
class Diff:
    a: Comparison
    b: Comparison
    keys: list[str]
    changes: list[Change] = field(default_factory=list)
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    setup_changes: dict[str, tuple[str, str]] = field(default_factory=dict)


def _settings(comparison: Comparison, point: Any, keys: list[str]) -> dict[str, str]:
    axes = ([comparison.row_key] if comparison.row_key else []) + comparison.variant_keys
    values = {k: str(point[k]) for k in axes if k in point}
    return {k: values.get(k, comparison.fixed.get(k, DEFAULT)) for k in keys}


def _label(settings: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "run"


def diff(a: Comparison, b: Comparison, tolerance: float = TABLE_TOLERANCE) -> Diff:
    """Match the points of A and B and compare every metric (the speed figures' verdicts
    against `tolerance`: --fail-if-worse, else the table's)."""
    keys: list[str] = []
    for comp in (a, b):
        for key in ([comp.row_key] if comp.row_key else []) + comp.variant_keys:
            if key not in keys:
                keys.append(key)
    repeats = {*a.repeat_settings, *a.repeat_keys, *b.repeat_settings, *b.repeat_keys}
    setup = {
        k: (a.fixed.get(k, DEFAULT), b.fixed.get(k, DEFAULT))
        for k in dict.fromkeys([*a.fixed, *b.fixed])
        if k not in keys and k not in repeats and a.fixed.get(k, DEFAULT) != b.fixed.get(k, DEFAULT)
    }
    points_a = {_label(_settings(a, p, keys)): p for _, p in a.points.iterrows()}
    points_b = {_label(_settings(b, p, keys)): p for _, p in b.points.iterrows()}
    result = Diff(a, b, keys, setup_changes=setup)
    pairs = [(label, points_a[label], points_b[label]) for label in points_a if label in points_b]
    if not pairs and len(points_a) == 1 and len(points_b) == 1:
        (la, pa), (lb, pb) = next(iter(points_a.items())), next(iter(points_b.items()))
        pairs = [(la if la == lb else f"{la} -> {lb}", pa, pb)]
    else:
        result.only_in_a = [label for label in points_a if label not in points_b]
        result.only_in_b = [label for label in points_b if label not in points_a]
    if not pairs:
        raise HarnessError(
            f"{a.root} and {b.root} have no point in common (A: {'; '.join(points_a)};"
            f" B: {'; '.join(points_b)}). Fix: compare sweeps over the same values"
        )
    for label, pa, pb in pairs:
        for metric in METRICS:
            if not metric.compared:
                continue
            va, vb = pa.get(metric.name), pb.get(metric.name)
            ok_a, ok_b = pa["status"] in USABLE, pb["status"] in USABLE
            va = va if ok_a and is_finite_number(va) else None
            vb = vb if ok_b and is_finite_number(vb) else None
            if va is None and vb is None and ok_a and ok_b:
                continue  # not measured on either side (e.g. mode=train: no inference)
            ratio = vb / va if va is not None and vb is not None and va > 0 else None
            within = None
            if ratio is not None and (pa["samples"] > 1 or pb["samples"] > 1):
                _, _, within = ratio_range(pb, pa, metric.name)
            phase = metric.name.split("_", 1)[0]
            speed = metric.name.endswith(SPEED_FIGURES)
            result.changes.append(Change(
                label, metric.name, metric.unit, metric.higher_is_better, va, vb, ratio, within,
                str(pa["status"]), str(pb["status"]),
                band_a=pa.get(f"{phase}_band") if speed else None,
                band_b=pb.get(f"{phase}_band") if speed else None, tolerance=tolerance,
            ))
    return result


# The metrics that get a verdict: both say the phase's rate (s/it is its inverse).
SPEED_FIGURES = ("_examples_per_second", "_seconds_per_iteration")


def regressions(result: Diff, tolerance: float) -> list[Change]:
    """Changes where B is worse than A by more than `tolerance` (a fraction) and beyond noise
    (Change.is_regression); a job of B that failed where A's passed counts too."""
    return [change for change in result.changes if change.is_regression(tolerance)]


def inconclusive(result: Diff, tolerance: float) -> list[Change]:
    """Changes whose verdict against `tolerance` could not be reached: a side contended or
    noisy, or B/A's range holds both no change and one past the tolerance."""
    return [change for change in result.changes
            if (verdict := change.judged(tolerance)) is not None
            and verdict.kind == "inconclusive"]


def inconclusive_line(result: Diff, tolerance: float) -> str | None:
    """The one line that says the comparison could not be decided, naming the first."""
    undecided = inconclusive(result, tolerance)
    if not undecided:
        return None
    # named by a throughput where one is undecided: its s/it says the same
    first = next((c for c in undecided if c.higher_is_better), undecided[0])
    why = first.judged(tolerance).reason  # type: ignore[union-attr]
    return (f"inconclusive: {len(undecided)} of {len(result.changes)} comparisons could not be"
            f" decided ({first.point}: {first.metric}: {why}): no regression found, none ruled"
            " out. Fix: rerun the contended or noisy side on a quiet machine, with repeat=3 for"
            " a spread (each comparison's reason: --out DIR, diff.csv verdict_reason)")


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bytes":
        return f"{value / 2**20:.0f} MiB"
    if unit == "s":
        return f"{value:.4f} s"
    return f"{value:.1f}"


def rows(result: Diff) -> list[dict[str, Any]]:
    out = []
    for c in result.changes:
        out.append({
            "point": c.point,
            "metric": c.metric,
            "unit": c.unit,
            "a": c.a,
            "b": c.b,
            "ratio_b_over_a": c.ratio,
            "within_spread": c.within_spread,
            "status_a": c.status_a,
            "status_b": c.status_b,
            "verdict": c.verdict.kind if c.verdict else None,
            "verdict_reason": c.verdict.reason if c.verdict else None,
        })
    return out


def _ratio_text(change: Change) -> str:
    """B/A as the table shows a speed-up: `?` when inconclusive, `*` when no difference."""
    if change.ratio is None:
        return "-"
    text = f"{change.ratio:.2f}x"
    verdict = change.verdict
    if verdict is not None:
        return text + {"inconclusive": f" {UNDECIDED}", "same": SAME}.get(verdict.kind, "")
    return text + (SAME if change.within_spread else "")


LEGEND = ("B/A above 1.00x: B is higher (faster for examples/s; slower for s/it; more memory"
          " for peak memory).")


def _marks(result: Diff) -> str:
    """What `*` and `?` mean, at the tolerance the verdicts were judged against."""
    tolerance = result.changes[0].tolerance if result.changes else TABLE_TOLERANCE
    text = (f"{SAME}: no difference (speed: on the counted samples, within their noise and the"
            f" {tolerance:.0%} tolerance; memory: within the spread of the repeated runs).")
    if inconclusive(result, tolerance):
        text += (f" {UNDECIDED}: inconclusive: a side contended or noisy, or its noise wider"
                 f" than the {tolerance:.0%} asked about (diff.csv verdict_reason).")
    return text


def _cell(change: Change, side: str) -> str:
    status = change.status_a if side == "a" else change.status_b
    if status not in USABLE:
        return CELL_FOR_STATUS.get(status, status)
    return _fmt(change.a if side == "a" else change.b, change.unit)


def to_markdown(result: Diff) -> str:
    lines = [f"# {result.b.root} (B) against {result.a.root} (A)", ""]
    for key, (va, vb) in result.setup_changes.items():
        lines.append(f"Setup differs: {key}: A={va}, B={vb}  ")
    lines += ["", "| point | metric | A | B | B/A |", "| --- | --- | ---: | ---: | ---: |"]
    for c in result.changes:
        lines.append(f"| {c.point} | {c.metric} | {_cell(c, 'a')} | {_cell(c, 'b')}"
                     f" | {_ratio_text(c)} |")
    lines += ["", f"{LEGEND} {_marks(result)}", ""]
    for label in result.only_in_a:
        lines.append(f"- only in A: {label}")
    for label in result.only_in_b:
        lines.append(f"- only in B: {label}")
    return "\n".join(lines) + "\n"


def _ratio_markup(change: Change) -> str:
    """B/A, in red or green where the change is real (worse or better)."""
    ratio = _ratio_text(change)
    verdict = change.verdict
    real = (verdict.kind == "real" if verdict is not None else
            change.ratio is not None and not change.within_spread and abs(change.ratio - 1) > 0.05)
    return f"[{'red' if change.worse else 'green'}]{ratio}[/]" if real else ratio


def _table_title(result: Diff) -> str:
    return f"B: {result.b.root}\nagainst A: {result.a.root}"


def _one_line_per_change(result: Diff) -> Any:
    """The table as wide as it takes: point, metric, A, B, B/A on every line."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=_table_title(result))
    for column in ("point", "metric", "A", "B", "B/A"):
        table.add_column(column, justify="left" if column in ("point", "metric") else "right",
                         overflow="fold")
    for c in result.changes:
        table.add_row(escape(c.point), c.metric, _cell(c, "a"), _cell(c, "b"), _ratio_markup(c))
    return table


def _grouped_by_point(result: Diff) -> Any:
    """For a narrow terminal: each point once, on a line of its own (it may wrap there),
    its metrics under it, each with its A, B and B/A on its own line."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=_table_title(result))
    table.add_column("point / metric", overflow="fold")
    for column in ("A", "B", "B/A"):
        table.add_column(column, justify="right", overflow="fold")
    changes = result.changes
    for n, c in enumerate(changes):
        if n == 0 or changes[n - 1].point != c.point:
            table.add_row(f"[bold]{escape(c.point)}[/bold]", "", "", "")
        last = n + 1 == len(changes) or changes[n + 1].point != c.point
        table.add_row(f"  {c.metric}", _cell(c, "a"), _cell(c, "b"), _ratio_markup(c),
                      end_section=last)
    return table


def show_diff(result: Diff) -> None:
    """The diff on the terminal: one line per change where that fits the width, else the
    changes grouped under their point (harness.sweep.render.ByWidth)."""
    from harness.terminal import show

    for key, (va, vb) in result.setup_changes.items():
        show(f"setup differs: {key}: A={va}, B={vb}")
    show(ByWidth([_one_line_per_change(result)], lambda width: [_grouped_by_point(result)]))
    show(f"[dim]{LEGEND} {_marks(result)}[/dim]")
    for label in result.only_in_a:
        show(f"only in A: {label}")
    for label in result.only_in_b:
        show(f"only in B: {label}")


def write(result: Diff, directory: Path) -> list[Path]:
    from harness.reports.files import write_csv, write_json, write_text

    md = write_text(directory / "diff.md", to_markdown(result))
    csv = write_csv(directory / "diff.csv", rows(result))
    js = write_json(directory / "diff.json", {
        "a": str(result.a.root),
        "b": str(result.b.root),
        "matched_on": result.keys,
        "setup_changes": {k: {"a": va, "b": vb} for k, (va, vb) in result.setup_changes.items()},
        "changes": rows(result),
        "only_in_a": result.only_in_a,
        "only_in_b": result.only_in_b,
    })
    return [md, csv, js]
