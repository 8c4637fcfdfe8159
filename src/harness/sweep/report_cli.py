"""`harness-report`: rebuild a sweep's comparison from its job directories, or diff two.

    harness-report DIR          comparison.{md,csv,json,png} in DIR, table on the terminal
    harness-report A B          what changed from A to B, metric by metric (ratios B/A)

`report_sweep` is what `harness-report DIR` does, and what a sweep does at its end
(harness.sweep.progress), so the two write the same files. Fast to start: argparse here,
pandas and matplotlib only once there is work, never torch.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from harness.errors import HarnessError, OutputError, output_error

if TYPE_CHECKING:
    from harness.sweep.table import Comparison

T = TypeVar("T")

PROG = "harness-report"
log = logging.getLogger(__name__)


def report_sweep(sweep_dir: Path, rows: str | None = None, baseline: str | None = None,
                 plot: bool = True, write: bool = True,
                 settings_prefix: str | None = None) -> Comparison:
    """The comparison of the jobs in `sweep_dir`: its tables on the terminal, and (unless
    write=False) comparison.md, .csv, .json and (with `plot`) .png in `sweep_dir`. An error
    in `rows` or `baseline` names them after `settings_prefix` (the sweep's own setting)."""
    from harness.sweep import render
    from harness.sweep.collect import collect
    from harness.sweep.table import SETTINGS_KEY, build
    from harness.terminal import show

    comparison = build(collect(sweep_dir), rows=rows, baseline=baseline,
                       settings_prefix=settings_prefix or f"{SETTINGS_KEY}.")
    render.show_tables(comparison)
    if write:
        written = render.write_tables(comparison, sweep_dir)
        if plot:
            from harness.sweep.plot import write_png

            png = write_png(comparison, sweep_dir / f"{render.STEM}.png")
            if png:
                written.append(png)
        show("[bold]comparison:[/bold] " + ", ".join(str(p) for p in written))
    _autotune_verdict(sweep_dir, write)
    return comparison


def _autotune_verdict(sweep_dir: Path, write: bool) -> None:
    """An autotune sweep: every point it tried and its verdict, rebuilt from the jobs, after
    the table (autotune.json rewritten unless write=False)."""
    from harness.autotune.report import rebuild

    rebuild(sweep_dir, write=write)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Rebuild the comparison table of a sweep from its jobs' result.json files,"
        " or compare two sweeps or runs (B against A).",
        epilog="Exit status: 0 done; 1 --fail-if-worse found a regression (or the disk is"
        " full); 2 bad input, or a directory it cannot write.",
    )
    p.add_argument("dirs", nargs="+", metavar="DIR",
                   help="a sweep directory (multirun/DATE/TIME) or a run directory; two to compare")
    p.add_argument("--rows", default=None,
                   help="swept key whose values make the rows (default: batch_size if swept,"
                   " else the first of two or more swept keys; a single swept key makes columns)")
    p.add_argument("--baseline", default=None,
                   help="variant the speed-ups are against, e.g. 'precision=fp32,compile=false'"
                   " (default: the first variant)")
    p.add_argument("--no-write", action="store_true",
                   help="print only; write no comparison files")
    p.add_argument("--no-plot", action="store_true", help="skip comparison.png")
    p.add_argument("--out", type=Path, default=None,
                   help="with two DIRs: write diff.{md,csv,json} into this directory")
    p.add_argument("--fail-if-worse", type=float, default=None, metavar="FRACTION",
                   help="with two DIRs: exit 1 if any metric of B is worse than A by more than"
                   " FRACTION (0.1 = 10%%) and beyond the runs' spread, or a job of B failed"
                   " where A's passed")
    return p


def _run(args: argparse.Namespace) -> int:
    from harness.sweep.collect import collect
    from harness.terminal import show

    if len(args.dirs) == 1:
        _written(lambda: report_sweep(Path(args.dirs[0]), rows=args.rows, baseline=args.baseline,
                                      plot=not args.no_plot, write=not args.no_write,
                                      settings_prefix="--"),
                 "print the table only: --no-write")
        return 0
    if len(args.dirs) != 2:
        raise HarnessError(f"expected one or two directories, got {len(args.dirs)}."
                           " Fix: harness-report DIR, or harness-report A B")
    from harness.sweep import diff
    from harness.sweep.table import build

    a, b = (build(collect(Path(d)), rows=args.rows, baseline=args.baseline,
                  settings_prefix="--") for d in args.dirs)
    for side, comp in (("A", a), ("B", b)):
        for problem in comp.problems:
            log.warning("(%s) %s", side, problem)
    result = diff.diff(a, b)
    if args.out:  # written first: a reader that stops early (`| head`) must not cost the files
        written = _written(lambda: diff.write(result, args.out),
                           "write elsewhere: --out DIR")
    diff.show_diff(result)
    if args.out:
        show("[bold]diff:[/bold] " + ", ".join(map(str, written)))
    if args.fail_if_worse is not None:
        worse = diff.regressions(result, args.fail_if_worse)
        for change in worse:
            show(f"[red]regression[/red] {change.point}: {change.metric}"
                 f" B/A={change.ratio if change.ratio is None else round(change.ratio, 3)}"
                 f" (status A={change.status_a}, B={change.status_b})")
        if worse:
            return 1
    return 0


def _written(write: Callable[[], T], instead: str) -> T:
    """`write()`, with a file it cannot write said in one line naming it (exit 2)."""
    try:
        return write()
    except OSError as err:
        unwritable = output_error(err, instead=instead)
        if unwritable is None:
            raise
        raise unwritable from None


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `harness-report` console script."""
    from harness.terminal import use_console

    use_console(prefix=PROG)
    args = parser().parse_args(argv)
    if args.fail_if_worse is not None and args.fail_if_worse < 0:
        log.error("--fail-if-worse=%s is not valid: expected a fraction >= 0."
                  " Fix: --fail-if-worse 0.1", args.fail_if_worse)
        sys.exit(2)
    try:
        code = _run(args)
    except OutputError as err:  # where to write: 2, or 1 for a full disk
        log.error("%s", err)
        sys.exit(err.exit_status)
    except HarnessError as err:  # bad input: the directories, the settings
        log.error("%s", err)
        sys.exit(2)
    sys.exit(code)


if __name__ == "__main__":
    main()
