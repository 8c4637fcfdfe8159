"""How often is the CI gate wrong? Its false-positive rate, detection rate and time to a decision.

Each trial runs the whole gate as a user would, two commands as subprocesses, and reads the
second one's exit status:

    harness -m <the change swept> repeat=auto ... hydra.sweep.dir=<trial>/sweep
    harness-report <trial>/sweep --baseline <A> --fail-if-worse 0.05

on a user's module whose training step is CPU-bound: a LightningModule (harness's own
TransformerModule, tiny) whose training_step first multiplies a 256 x 256 matrix `iters`
times (100 by default). The products are most of the step but not all of it: the tiny
transformer's own step and Lightning's loop stay. So a planted slowdown is calibrated, once
per condition before its trials: a sweep `+model.iters=0,100 repeat=3` reads the step's time
(1 / the window's examples/s) with and without the products, which gives the rest of the step
in products (`overhead_iters`). B then does `iters + extra x (iters + overhead_iters)`
products, so its whole step takes `extra` longer. Trial kinds:

- `aa`: A/A, the same code on both sides; exit 1 (a regression) is a false positive;
- `ab5`, `ab10`, `ab20`: B's step takes 5 % / 10 % / 20 % longer; exit 1 is a detection (exit 0
  with the line `improvement:` is a miss in the wrong direction, counted apart: `impr.`).

Exit 0 is a pass (decided: no regression beyond 5 %), exit 3 undecided at the cap
(sweep.max_rounds, sweep.max_minutes), anything else an error. Conditions:

- `quiet`: nothing else started (what else runs on the machine is up to you);
- `busy`: beside two CPU-bound processes (`python -c "while True: pass"`), started before
  the condition's first trial and killed after its last.

Forms, how the change reaches the sweep:

- `key`: swept as a key in one process: `+model.iters=100,111` (B's count as calibrated; A/A:
  `+model.tag=a,b`);
- `code_dir`: two copies of the module's file in two temporary trees, `code_dir=base,change`,
  each job in a fresh process (slower: each job pays a Python + torch start; fewer trials by
  default, --code-dir-trials).

Within a condition and form the kinds are interleaved trial by trial (their order rotated), so
drift hits every kind alike. Per condition, form and kind it reports: trials, the exit
statuses, the false-positive rate (aa) or the detection rate (ab*), the median rounds (the
distinct `sweep_round` of the jobs' result.json) and minutes (the two commands' wall time) of
the trials that ended decided (exit 0 or 1), the longest trial, and the median B/A estimate
of training examples/s (comparison.json). The goal (issue 28) on the 2-core VM beside two
CPU hogs: an A/A trial read as a regression in at most 1 of 20, a 10 % slower step caught in
at least 19 of 20, a decision within 10 minutes.

One quiet key-form trial takes well under a minute on 2 idle cores, a busy one about one
(single-threaded jobs, 6 to 14 rounds). The goal's part, `--kinds aa,ab10 --conditions busy
--forms key`, took 38 minutes on 2 cores; the full default run (20 trials x 4 kinds x 2
conditions key form, 5 x 4 x 2 code_dir form) some 2.5 to 3 hours:

    python benchmarks/gate_power.py [--trials 20] [--kinds aa,ab5,ab10] [--conditions quiet,busy]
        [--forms key,code_dir] [--max-rounds 30] [--json out.json] [--dir KEEP]
    python benchmarks/gate_power.py --trials 1 --conditions quiet --forms key   # a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MODULE = '''"""A user's module whose training step is CPU-bound (benchmarks/gate_power.py)."""

import torch

from harness.workload.model import TransformerModule

ITERS = {iters}


class Model(TransformerModule):
    """Before the transformer's own step, `iters` products of a {size} x {size} rotation."""

    def __init__(self, *args, iters: int = ITERS, size: int = {size}, tag: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.iters = iters
        generator = torch.Generator().manual_seed(0)
        turn = torch.linalg.qr(torch.randn(size, size, generator=generator))[0]
        self.register_buffer("turn", turn, persistent=False)

    def training_step(self, batch, batch_idx):
        x = self.turn
        with torch.no_grad():
            for _ in range(self.iters):
                x = x @ self.turn
        return super().training_step(batch, batch_idx) + 0 * x[0, 0]
'''

MODULE_NAME = "gate_user"
ITERS = 100
SIZE = 256
KINDS = {"aa": 0.0, "ab5": 0.05, "ab10": 0.10, "ab20": 0.20}  # B's extra work
CONDITIONS = ("quiet", "busy")
FORMS = ("key", "code_dir")
# Each job small: training only, the speed preset alone, no tracker, a tiny transformer beside
# the matrix products, 40 steps (5 warm-up).
WORKLOAD = ("mode=train", "profiler=[speed]", "logger=none", "data.train_batches=40",
            "data.seq_len=16", "data.dim=32", "model.depth=1", "batch_size=4",
            "trainer.limit_val_batches=0", "trainer.enable_progress_bar=false",
            "hydra.callbacks.sweep_report.plot=false")
THRESHOLD = "0.05"
HOG = "while True: pass"
GOALS = {"false_positives": 1 / 20, "detected_ab10": 19 / 20, "minutes": 10.0}


@dataclass
class Trial:
    condition: str
    form: str
    kind: str
    trial: int
    exit: int | None = None  # harness-report's; None: the sweep itself failed
    outcome: str = ""  # regression | pass | undecided | error
    rounds: int = 0
    minutes: float = 0.0
    threads: list[int] = field(default_factory=list)
    ratio: float | None = None  # B/A of training examples/s, the table's estimate
    ratio_low: float | None = None
    ratio_high: float | None = None
    pairs: int | None = None
    fresh_process_s: float | None = None  # code_dir: median over the jobs
    lines: list[str] = field(default_factory=list)  # the gate's lines
    load: float = 0.0  # the 1-minute load average as the trial started
    error: str = ""


def _tool(name: str) -> list[str]:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    module = {"harness": "harness.cli", "harness-report": "harness.sweep.report_cli"}[name]
    return [found] if found else [sys.executable, "-m", module]


def _write_module(directory: Path, iters: int, size: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{MODULE_NAME}.py").write_text(MODULE.format(iters=iters, size=size))
    return directory


def _commands(form: str, kind: str, where: Path, args: argparse.Namespace
              ) -> tuple[list[str], str, dict[str, str]]:
    """(the harness overrides, the gate's --baseline, the environment) of one trial."""
    extra = KINDS[kind]
    changed = _changed(args, extra)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "COLUMNS": "200"}
    common = [f"model._target_={MODULE_NAME}.Model", "repeat=auto",
              f"sweep.max_rounds={args.max_rounds}", f"sweep.max_minutes={args.max_minutes:g}",
              f"sweep.decide_within={THRESHOLD}", *_workload(args.workload),
              f"hydra.sweep.dir={where / 'sweep'}"]
    if form == "key":
        module_dir = _write_module(where / "module", args.iters, args.size)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(module_dir),
                                                          os.environ.get("PYTHONPATH")]))
        if extra:
            swept, baseline = f"+model.iters={args.iters},{changed}", f"model.iters={args.iters}"
        else:
            swept, baseline = "+model.tag=a,b", "model.tag=a"
        return [swept, *common], baseline, env
    _write_module(where / "base", args.iters, args.size)
    _write_module(where / "change", changed, args.size)
    return ["code_dir=base,change", *common], "code_dir=base", env


def _changed(args: argparse.Namespace, extra: float) -> int:
    """B's products: its whole step `extra` longer than A's."""
    return round(args.iters + extra * (args.iters + args.overhead_iters))


def calibrate(root: Path, condition: str, args: argparse.Namespace) -> float:
    """The step's time other than the products, in products: from a sweep of iters 0 and A's."""
    where = root / f"{condition}-calibration"
    module_dir = _write_module(where / "module", args.iters, args.size)
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(module_dir),
                                                       os.environ.get("PYTHONPATH")]))}
    subprocess.run([*_tool("harness"), "-m", f"model._target_={MODULE_NAME}.Model",
                    f"+model.iters=0,{args.iters}", "repeat=3", *_workload(args.workload),
                    f"hydra.sweep.dir={where / 'sweep'}"],
                   cwd=where, env=env, capture_output=True, text=True, check=True, timeout=900)
    rates: dict[int, list[float]] = {}
    for job in _jobs(where / "sweep"):
        iters = int(dict(o.partition("=")[::2] for o in job["overrides"])["+model.iters"])
        rates.setdefault(iters, []).append(job["metrics"]["train_examples_per_second"])
    without, with_products = (1 / statistics.median(rates[n]) for n in (0, args.iters))
    per_product = (with_products - without) / args.iters
    return without / per_product


def _workload(more: list[str]) -> list[str]:
    """WORKLOAD with `more` over it, key by key (Hydra refuses a key given twice)."""
    keys = {o.partition("=")[0].lstrip("+~") for o in more}
    return [o for o in WORKLOAD if o.partition("=")[0] not in keys] + more


def _jobs(sweep_dir: Path) -> list[dict[str, Any]]:
    found = []
    for path in sweep_dir.glob("*/result.json"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return found


def _read_back(trial: Trial, sweep_dir: Path) -> None:
    """Rounds, threads and the fresh processes' start from result.json; B/A from comparison.json."""
    jobs = _jobs(sweep_dir)
    trial.rounds = len({j.get("sweep_round") for j in jobs if j.get("sweep_round") is not None})
    trial.threads = sorted({j["threads"] for j in jobs if j.get("threads") is not None})
    fresh = [j["fresh_process_s"] for j in jobs if j.get("fresh_process_s") is not None]
    trial.fresh_process_s = statistics.median(fresh) if fresh else None
    try:
        comparison = json.loads((sweep_dir / "comparison.json").read_text())
    except (OSError, ValueError):
        return
    for point in comparison.get("points", []):
        if not point.get("baseline") and point.get("train_speedup") is not None:
            trial.ratio = point["train_speedup"]
            trial.ratio_low, trial.ratio_high = point["train_speedup_min"], point["train_speedup_max"]
            trial.pairs = point.get("train_speedup_pairs")
            return


OUTCOMES = {0: "pass", 1: "regression", 3: "undecided"}
GATE_LINE = re.compile(r"^(regression|improvement|no change|undecided|failed): ")


def run_trial(condition: str, form: str, kind: str, number: int, root: Path,
              args: argparse.Namespace) -> Trial:
    trial = Trial(condition, form, kind, number, load=os.getloadavg()[0])
    where = root / f"{condition}-{form}-{kind}-{number}"
    where.mkdir(parents=True)
    overrides, baseline, env = _commands(form, kind, where, args)
    timeout = (args.max_minutes + 10) * 60
    started = time.perf_counter()
    try:
        swept = subprocess.run([*_tool("harness"), "-m", *overrides], cwd=where, env=env,
                               capture_output=True, text=True, timeout=timeout)
        (where / "harness.out").write_text(swept.stdout + swept.stderr)  # kept with --dir
        if swept.returncode != 0:
            trial.outcome, trial.error = "error", f"harness exit {swept.returncode}: " + (
                swept.stderr.strip().splitlines() or [""])[-1][:300]
        else:
            gated = subprocess.run([*_tool("harness-report"), str(where / "sweep"), "--baseline",
                                    baseline, "--fail-if-worse", THRESHOLD, "--no-plot"],
                                   cwd=where, env=env, capture_output=True, text=True, timeout=600)
            trial.exit = gated.returncode
            (where / "harness-report.out").write_text(gated.stdout + gated.stderr)
            trial.outcome = OUTCOMES.get(gated.returncode, "error")
            trial.lines = [ln for ln in gated.stdout.splitlines() if GATE_LINE.match(ln)]
            if trial.outcome == "error":
                trial.error = (gated.stderr.strip().splitlines() or [""])[-1][:300]
    except subprocess.TimeoutExpired:
        trial.outcome, trial.error = "error", f"ran past {timeout} s"
    trial.minutes = (time.perf_counter() - started) / 60
    _read_back(trial, where / "sweep")
    return trial


class Hogs:
    """Two CPU-bound processes beside the trials of the `busy` condition, ended after them."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Hogs:
        self.procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(self.count)]
        if self.procs:
            time.sleep(2)  # at full speed before the first job reads the CPUs' load
        return self

    def __exit__(self, *_: object) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(trials: list[Trial]) -> list[dict[str, Any]]:
    """One row per condition, form and kind."""
    groups: dict[tuple[str, str, str], list[Trial]] = {}
    for trial in trials:
        groups.setdefault((trial.condition, trial.form, trial.kind), []).append(trial)
    rows = []
    for (condition, form, kind), group in groups.items():
        counts = {o: sum(t.outcome == o for t in group) for o in
                  ("regression", "pass", "undecided", "error")}
        decided = [t for t in group if t.outcome in ("regression", "pass")]
        said = {word: sum(any(ln.startswith(f"{word}:") for ln in t.lines) for t in group)
                for word in ("improvement", "no change")}
        ratios = [t.ratio for t in group if t.ratio is not None]
        rows.append({
            "condition": condition, "form": form, "kind": kind, "trials": len(group), **counts,
            "rate_name": "false positives" if kind == "aa" else "detected",
            "rate": counts["regression"] / len(group),
            "improvement": said["improvement"], "no_change": said["no change"],
            "median_rounds_decided": _median([t.rounds for t in decided]),
            "median_minutes_decided": _median([t.minutes for t in decided]),
            "median_rounds": _median([t.rounds for t in group]),
            "max_minutes": max(t.minutes for t in group),
            "median_ratio": _median(ratios),
            "threads": sorted({n for t in group for n in t.threads}),
            "fresh_process_s": _median([t.fresh_process_s for t in group
                                        if t.fresh_process_s is not None]),
            "median_load": _median([t.load for t in group]),
        })
    return rows


def _cell(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def show(rows: list[dict[str, Any]]) -> None:
    head = ("condition", "form", "kind", "trials", "exit 1", "exit 0", "impr.", "exit 3",
            "error", "rate", "rounds", "minutes", "max min", "B/A", "threads", "load")
    print("Per condition, form and kind: exit 1 (regression), 0 (pass; impr.: of them, read as"
          " an improvement), 3 (undecided); rate: false positives (aa) or detected (ab*);"
          " rounds and minutes: medians of the trials that ended decided; max min: the longest"
          " trial; B/A: median estimate; threads: torch threads the jobs ran at; load: median"
          " 1-minute load average as a trial started")
    table = [head] + [(r["condition"], r["form"], r["kind"], str(r["trials"]),
                       str(r["regression"]), str(r["pass"]), str(r["improvement"]),
                       str(r["undecided"]), str(r["error"]),
                       f"{r['regression']}/{r['trials']} {'FP' if r['kind'] == 'aa' else 'det'}",
                       _cell(r["median_rounds_decided"]), _cell(r["median_minutes_decided"]),
                       _cell(r["max_minutes"]), _cell(r["median_ratio"], 3),
                       ",".join(map(str, r["threads"])) or "-", _cell(r["median_load"]))
                      for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    for line in table:
        print("  ".join(cell.rjust(w) if i >= 3 else cell.ljust(w)
                        for i, (cell, w) in enumerate(zip(line, widths, strict=True))))


def goals(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's goals, where the busy condition measured them."""
    said = []
    for row in rows:
        if row["condition"] != "busy":
            continue
        where = f"busy {row['form']} {row['kind']}"
        # a rate from fewer trials than the goal counts can miss it, never prove it
        met = "met" if row["trials"] >= 20 else f"not refuted ({row['trials']} trials of 20)"
        if row["kind"] == "aa":
            ok = row["rate"] <= GOALS["false_positives"]
            said.append(f"{where}: {row['regression']}/{row['trials']} false positives"
                        f" (goal at most 1 in 20): {met if ok else 'not met'}")
        if row["kind"] == "ab10":
            ok = row["rate"] >= GOALS["detected_ab10"]
            said.append(f"{where}: {row['regression']}/{row['trials']} detected (goal at least"
                        f" 19 in 20): {met if ok else 'not met'}")
        ok = row["pass"] + row["regression"] == row["trials"] and (
            row["max_minutes"] <= GOALS["minutes"])
        said.append(f"{where}: {row['pass'] + row['regression']}/{row['trials']} decided, the"
                    f" longest trial in {row['max_minutes']:.1f} min (goal: every one decided"
                    f" within 10): {'met' if ok else 'not met'}")
    return said


def _list(value: str, allowed: Any) -> list[str]:
    chosen = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in allowed]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a comma-separated list of"
                                         f" {', '.join(allowed)}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20,
                        help="trials of each kind per condition, key form (default 20)")
    parser.add_argument("--code-dir-trials", type=int, default=None,
                        help="the same for the code_dir form (default: a quarter of --trials,"
                        " at least 1)")
    parser.add_argument("--kinds", type=lambda v: _list(v, KINDS), default=list(KINDS),
                        help="comma-separated, of aa, ab5, ab10, ab20 (default all)")
    parser.add_argument("--conditions", type=lambda v: _list(v, CONDITIONS),
                        default=list(CONDITIONS), help="comma-separated, of quiet, busy")
    parser.add_argument("--forms", type=lambda v: _list(v, FORMS), default=list(FORMS),
                        help="comma-separated, of key, code_dir")
    parser.add_argument("--max-rounds", type=int, default=30, help="sweep.max_rounds (30)")
    parser.add_argument("--max-minutes", type=float, default=15, help="sweep.max_minutes (15)")
    parser.add_argument("--hogs", type=int, default=2,
                        help="CPU-bound processes beside the busy trials (default 2)")
    parser.add_argument("--iters", type=int, default=ITERS, help="A's matrix products per step")
    parser.add_argument("--size", type=int, default=SIZE, help="the matrices' side")
    parser.add_argument("--workload", nargs="*", default=[],
                        help="more overrides for every sweep (they win over the defaults)")
    parser.add_argument("--json", type=Path, default=None, help="also write every trial here")
    parser.add_argument("--dir", type=Path, default=None,
                        help="run the trials in DIR and keep them (default: a temporary"
                        " directory, removed)")
    args = parser.parse_args()
    code_dir_trials = (args.code_dir_trials if args.code_dir_trials is not None
                       else max(1, args.trials // 4))
    trials: list[Trial] = []
    overhead_iters: dict[str, float] = {}
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="gate_power_") as tmp:
        root = args.dir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for condition in args.conditions:
            with Hogs(args.hogs if condition == "busy" else 0):
                args.overhead_iters = overhead_iters[condition] = calibrate(root, condition, args)
                planted = ", ".join(f"{_changed(args, e)} ({k})" for k, e in KINDS.items() if e)
                print(f"{condition}: the step other than the products takes as long as"
                      f" {args.overhead_iters:.0f} of them; A does {args.iters}, B {planted}",
                      flush=True)
                for form in args.forms:
                    count = args.trials if form == "key" else code_dir_trials
                    for number in range(count):
                        shift = number % len(args.kinds)
                        for kind in args.kinds[shift:] + args.kinds[:shift]:
                            trial = run_trial(condition, form, kind, number, root, args)
                            trials.append(trial)
                            ratio = (f" B/A {trial.ratio:.3f} ({trial.ratio_low:.3f}-"
                                     f"{trial.ratio_high:.3f}, {trial.pairs or 'no'} pairs)"
                                     if trial.ratio is not None else "")
                            print(f"{condition} {form} {kind} #{number}: {trial.outcome}"
                                  f" (exit {trial.exit}) after {trial.rounds} rounds,"
                                  f" {trial.minutes:.1f} min{ratio}"
                                  f"{'; ' + trial.error if trial.error else ''}", flush=True)
                            for line in trial.lines:
                                print(f"    {line}", flush=True)
    rows = summarise(trials)
    print()
    show(rows)
    for line in goals(rows):
        print(line)
    print(f"total {(time.time() - started) / 60:.1f} min; load average at the end"
          f" {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps({
            "settings": {"trials": args.trials, "code_dir_trials": code_dir_trials,
                         "kinds": args.kinds, "conditions": args.conditions, "forms": args.forms,
                         "max_rounds": args.max_rounds, "max_minutes": args.max_minutes,
                         "hogs": args.hogs, "iters": args.iters, "size": args.size,
                         "overhead_iters": overhead_iters,
                         "workload": _workload(args.workload), "threshold": float(THRESHOLD)},
            "summary": rows, "trials": [asdict(t) for t in trials],
            "cpus": os.cpu_count(), "load_average": os.getloadavg(),
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
