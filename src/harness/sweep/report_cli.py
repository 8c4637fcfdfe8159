"""`harness-report DIR`: a sweep's comparison rebuilt from its job directories (`report_sweep`,
which a sweep's end runs too); `harness-report A B`: what changed from A to B. Exit statuses: the
parser's epilog. Fast to start: pandas and matplotlib only once there is work, never torch."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from harness.errors import HarnessError, OutputError, output_error
from harness.judge import TOLERANCE
from harness.sweep.gate import changes, decisions, exit_status
from harness.terminal import show, use_console

if TYPE_CHECKING:
    from harness.sweep.table import Comparison

T = TypeVar("T")

PROG = "harness-report"
BAD_INPUT = 2  # exit status (the gate's 1 and 3: harness.sweep.gate)
log = logging.getLogger(__name__)


def report_sweep(sweep_dir: Path, plot: bool = True, write: bool = True, **table: Any) -> Comparison:
    """The comparison of `sweep_dir` (`table`: harness.sweep.table.build's settings) on the
    terminal and (`write`) in comparison.* there."""
    from harness.result.jobs import collect
    from harness.sweep import render
    from harness.sweep.table import build

    comparison = build(collect(sweep_dir), **table)
    render.show_tables(comparison)
    if write:
        written = render.write_tables(comparison, sweep_dir)
        if plot:
            from harness.sweep.plot import write_png

            written += filter(None, [write_png(comparison, sweep_dir / f"{render.STEM}.png")])
        show("[bold]comparison:[/bold] " + ", ".join(str(p) for p in written))
    from harness.autotune.report import rebuild

    rebuild(sweep_dir, write=write, plot=plot)  # an autotune sweep: every point it tried, its verdict
    modes = {j.result.knobs.get("scaling") for j in comparison.jobs if j.result and j.result.knobs}
    if write and len(modes - {None}) == 1:  # a scaling study: its report beside the comparison
        from harness.sweep import scaling

        written = scaling.write(comparison, sweep_dir, str(*modes - {None}))
        show("[bold]scaling:[/bold] " + ", ".join(str(p) for p in written))
    return comparison


# A sweep's own setting (hydra.callbacks.sweep_report.<name>) -> the flag that overrides it.
RECORDED = {"rows": "--rows", "baseline": "--baseline", "repeat_keys": "--repeat-keys"}


def table_settings(sweep_dir: Path, rows: str | None, baseline: str | None,
                   repeat_keys: str | None) -> tuple[str | None, str | None, tuple[str, ...], float]:
    """(rows, baseline, repeat keys, the verdicts' threshold) for `harness-report DIR`: the
    command line's, else the sweep's."""
    from harness.result.jobs import sweep_setting
    from harness.sweep.table import REPEAT_KEYS, SETTINGS_KEY, check_repeat_keys, parse_variant_spec

    tolerance = sweep_setting(sweep_dir, "sweep.decide_within")
    node = sweep_setting(sweep_dir, SETTINGS_KEY)
    recorded = {k: node[k] for k in RECORDED if node.get(k) is not None} if isinstance(node, dict) else {}
    used: dict[str, Any] = {}
    if rows is None and "rows" in recorded:
        rows = used["rows"] = str(recorded["rows"])
    if repeat_keys is None and "repeat_keys" in recorded:
        chosen = check_repeat_keys(recorded["repeat_keys"])
        if chosen != REPEAT_KEYS:
            used["repeat_keys"] = list(chosen)
    else:
        chosen = check_repeat_keys(repeat_keys, "--")
    if baseline is None and "baseline" in recorded:
        spec = str(recorded["baseline"])
        if rows is not None and rows in parse_variant_spec(spec, f"{SETTINGS_KEY}."):
            log.info("the sweep's baseline '%s' names %s, now the row key (--rows): the speed-ups are"
                     " against the first variant; --baseline chooses another", spec, rows)
        else:
            baseline = used["baseline"] = spec
    if used:
        said = ", ".join(f"{name}={value!r}" for name, value in used.items())
        flags = ", ".join(RECORDED[name] for name in used)
        log.info("the table as the sweep set it (multirun.yaml): %s.%s; %s %s",
                 SETTINGS_KEY, said, flags, "change them" if len(used) > 1 else "changes it")
    return rows, baseline, chosen, tolerance if isinstance(tolerance, float) else TOLERANCE


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Rebuild the comparison table of a sweep from its jobs' result.json files, or"
        " compare two sweeps or runs (B against A).",
        epilog="Exit status: 0 done (with --fail-if-worse: every comparison decided, none worse); 1"
        " --fail-if-worse found a regression, or a side that failed where the baseline ran (or the disk"
        " is full); 2 bad input, or a directory it cannot write; 3 --fail-if-worse found no regression"
        " but could not decide a comparison (a side contended, noisy or run once, or noise wider than"
        " FRACTION): none ruled out. A regression (1) wins over 3. docs/ci.md.")
    p.add_argument("dirs", nargs="+", metavar="DIR",
                   help="a sweep directory (multirun/DATE/TIME) or a run directory; two to compare")
    p.add_argument("--rows", help="swept key whose values make the rows (default: a single DIR's own"
                   " setting, else batch_size if swept, else the first of two or more swept keys; a"
                   " single swept key makes columns)")
    p.add_argument("--baseline", help="variant the speed-ups are against, e.g. 'precision=fp32,compile=false'"
                   " (default: a single DIR's own setting, else the first variant)")
    p.add_argument("--repeat-keys", metavar="KEYS", help="comma-separated keys whose values are"
                   " repeats of a point, pooled into its samples like the rounds of repeat=N (default:"
                   " a single DIR's own setting, else seed,sweep_round; '' makes seed a variant again)")
    p.add_argument("--no-write", action="store_true", help="print only; write no comparison files"
                   " (the gate, --fail-if-worse with one DIR, never rewrites them)")
    p.add_argument("--no-plot", action="store_true", help="skip comparison.png (and an autotune"
                   " sweep's autotune_memory.png)")
    p.add_argument("--out", type=Path, help="with two DIRs: write diff.{md,csv,json} into this directory")
    p.add_argument("--fail-if-worse", type=float, metavar="FRACTION", help="gate: one line per comparison,"
                   " and the exit status by them. With one DIR: each variant against --baseline; with two:"
                   " each point of B against A's (and its peak memory). Worse means slower (or more memory)"
                   " by more than FRACTION (0.05 = 5%%), past the noise: the whole interval beyond it")
    return p


def _run(args: argparse.Namespace) -> int:
    from harness.result.jobs import collect
    from harness.sweep.table import check_repeat_keys

    if len(args.dirs) == 1:
        sweep_dir = Path(args.dirs[0])
        rows, baseline, pooled, tolerance = table_settings(sweep_dir, args.rows, args.baseline,
                                                           args.repeat_keys)
        # the gate decides at its own threshold and leaves the sweep's comparison.* as written
        comparison = _written(lambda: report_sweep(
            sweep_dir, plot=not args.no_plot, write=not args.no_write and args.fail_if_worse is None,
            rows=rows, baseline=baseline, settings_prefix="--", repeat_keys=pooled,
            tolerance=tolerance if args.fail_if_worse is None else args.fail_if_worse),
            "print the table only: --no-write")
        return 0 if args.fail_if_worse is None else gate(comparison)
    repeat_keys = check_repeat_keys(args.repeat_keys, "--")
    if len(args.dirs) != 2:
        raise HarnessError(f"expected one or two directories, got {len(args.dirs)}."
                           " Fix: harness-report DIR, or harness-report A B")
    from harness.sweep import diff
    from harness.sweep.table import build

    a, b = (build(collect(Path(d)), rows=args.rows, baseline=args.baseline,
                  settings_prefix="--", repeat_keys=repeat_keys) for d in args.dirs)
    for side, comp in (("A", a), ("B", b)):
        for problem in comp.problems:
            log.warning("(%s) %s", side, problem)
    tolerance = TOLERANCE if args.fail_if_worse is None else args.fail_if_worse
    result = diff.diff(a, b, tolerance)
    if args.out:  # written first: a reader that stops early (`| head`) must not cost the files
        written = _written(lambda: diff.write(result, args.out), "write elsewhere: --out DIR")
    diff.show_diff(result)
    if args.out:
        show("[bold]diff:[/bold] " + ", ".join(map(str, written)))
    found = list(changes(result))
    if args.fail_if_worse is not None:
        return _gate(found, f"gate: B against A, at {tolerance:.0%}")
    undecided = [d for d in found if not d.decided]
    if undecided:  # on stderr, as a warning: `| head` does not hide it
        log.warning("%d of %d comparisons undecided; the first: %s. Fix: a quiet machine, and"
                    " repeat=3 on both sides", len(undecided), len(found), undecided[0].line)
    return 0


def gate(comparison: Comparison) -> int:
    """Each variant of one sweep against the baseline of its row (harness.sweep.gate)."""
    found = list(decisions(comparison))
    if not found:
        raise HarnessError(f"--fail-if-worse: {comparison.root} has no variant to hold against a baseline"
                           f" (variants: {'; '.join(comparison.variants)}). Fix: sweep the change as a"
                           " key, e.g. harness -m code_dir=../base,. repeat=auto, then --baseline"
                           " code_dir=../base")
    return _gate(found, f"gate: each variant against the baseline {comparison.baseline}, at"
                 f" {comparison.tolerance:.0%} (--baseline chooses it)")


def _gate(found: list[Any], header: str) -> int:
    """The gate's lines, one per comparison, and its exit status (harness.sweep.gate)."""
    show(header)
    for decision in found:
        show(decision.line)
    return exit_status(found)


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
    use_console(prefix=PROG)
    args = parser().parse_args(argv)
    if args.fail_if_worse is not None and not 0 <= args.fail_if_worse < 1:
        log.error("--fail-if-worse=%s is not valid: expected a fraction from 0 to below 1 (at 1 no"
                  " slow-down could be beyond it). Fix: --fail-if-worse 0.1", args.fail_if_worse)
        sys.exit(BAD_INPUT)
    try:
        code = _run(args)
    except HarnessError as err:  # bad input: the directories, the settings; where to write: 2 (1: disk full)
        log.error("%s", err)
        sys.exit(err.exit_status if isinstance(err, OutputError) else BAD_INPUT)
    sys.exit(code)


if __name__ == "__main__":
    main()
