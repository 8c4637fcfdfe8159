"""What harness costs beyond the work it measures (issue #22): every row in one invocation.

Each round runs every command below once, in an order rotated round by round, so that machine
noise hits them alike; each harness row is read against the floor measured in the same round,
and the figures are medians over the rounds, with min-max beside them and every round printed:

    plain        plain_fit.py: the built-in workload's fit with a plain Lightning Trainer
                 (harness's own model and data classes, conf/trainer/default.yaml's settings)
    bare         harness <workload> profiler=none logger=none      goal: floor + 0.5 s
    default      harness <workload> (speed, diagnose, MLflow)      goal: floor + 2 s
    sweep_default, sweep_bare
                 harness -m batch_size=2,4,8,16 <small workload>, default and bare: seconds per
                 further job (jobs 2-4, from job 1's result.json to job 4's)
                                                                   goal: default - bare < 0.3 s
    help, cfg    harness --help (goal < 0.4 s), harness --cfg job (keep: 0.29-0.33 s)

<workload> is the fit alone (mode=train) on data.train_batches=10, progress bar off, as in the
plain script. Every command is timed on two clocks: wall time (what the goals are about) and the
CPU time (user + sys) of the command's own process, polled from /proc, which a busy machine moves
far less. A tracker process that harness runs beside a job is not in that CPU (it is off the
critical path, on another core); `tree cpu` is the CPU of the whole process tree, tracker
included. The default rows log into one MLflow store made by a warm-up run before the first
round (a user's usual case); --fresh-store gives each default run a new one.

    python benchmarks/fixed_cost.py [--rounds 5] [--threads N] [--rows plain,bare,...]
                                    [--against CHECKOUT ...] [--fresh-store] [--json FILE]

--against CHECKOUT also measures a source checkout's harness (its src/ first on PYTHONPATH,
with this environment's packages) in the same rounds: an A/B of two versions.
--threads N sets OMP_NUM_THREADS/MKL_NUM_THREADS for every command (plain included): on a
shared machine torch's spinning worker threads make the fit's time swing far more than
harness's own costs do.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLAIN_SCRIPT = HERE / "plain_fit.py"
TRAIN_BATCHES = 10
WORKLOAD = (f"data.train_batches={TRAIN_BATCHES}", "mode=train",
            "trainer.enable_progress_bar=false")
BARE = ("profiler=none", "logger=none")
SWEEP = ("-m", "batch_size=2,4,8,16", "data.train_batches=12", "data.val_batches=4",
         "data.predict_batches=8", "data.seq_len=16", "data.dim=32",
         "trainer.enable_progress_bar=false")
SWEEP_JOBS = 4
ROWS = ("plain", "bare", "default", "sweep_default", "sweep_bare", "help", "cfg")
# row: (what it is read against, the most it may cost beyond it, in seconds)
GOALS = {"bare": ("plain", 0.5), "default": ("plain", 2.0), "sweep_default": ("sweep_bare", 0.3),
         "help": (None, 0.4)}


def check_plain_settings() -> None:
    """plain_fit.py's Trainer is conf/trainer/default.yaml's, and its model and data take the
    defaults harness composes, or the floor is another workload: refuse to measure."""
    from omegaconf import OmegaConf

    from harness.config.locations import conf_dir
    from harness.workload.data import SyntheticDataModule
    from harness.workload.model import TransformerModule

    sys.path.insert(0, str(HERE))
    import plain_fit

    yaml = OmegaConf.to_container(OmegaConf.load(conf_dir() / "trainer" / "default.yaml"))
    for key in ("_target_", "default_root_dir", "enable_progress_bar"):  # set per run
        yaml.pop(key, None)
    ours = {k: v for k, v in plain_fit.TRAINER.items() if k != "enable_progress_bar"}
    if yaml != ours:
        differ = sorted(k for k in {*yaml, *ours} if yaml.get(k, "-") != ours.get(k, "-"))
        sys.exit(f"plain_fit.py's TRAINER differs from conf/trainer/default.yaml in {differ}:"
                 " update plain_fit.py before measuring against it")
    for group, cls in (("model/transformer", TransformerModule),
                       ("data/synthetic", SyntheticDataModule)):
        node = OmegaConf.to_container(OmegaConf.load(conf_dir() / f"{group}.yaml"))
        defaults = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()}
        differ = [k for k, v in node.items() if k != "_target_" and not str(v).startswith("${")
                  and defaults.get(k, "-") != v]
        if differ:
            sys.exit(f"conf/{group}.yaml sets {differ} unlike {cls.__name__}'s defaults, which"
                     " plain_fit.py uses: pass them in plain_fit.py before measuring")


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + sys) of process `pid` itself, without its children (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """CPU seconds of process `pid` and its running children (the tracker process)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return sum(filter(None, (process_cpu(p) for p in (pid, *map(int, children)))))


def watch(proc: subprocess.Popen, sweep_cwd: Path | None
          ) -> tuple[float | None, list[tuple[float, float]]]:
    """Wait for `proc`, polling its own CPU time: the last reading, and in a sweep, when each
    job's result.json appeared, (its own CPU, its tree's CPU)."""
    last, at_job, seen = None, [], set()
    while proc.poll() is None:
        now = process_cpu(proc.pid)
        last = now if now is not None else last
        if sweep_cwd is not None and last is not None:
            for path in sweep_cwd.glob("multirun/*/*/*/result.json"):
                if path not in seen:
                    seen.add(path)
                    at_job.append((last, tree_cpu(proc.pid)))
        time.sleep(0.02)
    return last, at_job


class Command:
    """One row's command, for the installed harness or a checkout's src/."""

    def __init__(self, row: str, harness: str, src: Path | None, env: dict[str, str]) -> None:
        self.row, self.src = row, src
        self.name = row if src is None else f"{row}@{src.name}"
        self.env = dict(env)
        if src is not None:
            self.env["PYTHONPATH"] = os.pathsep.join(
                [str(src / "src"), *filter(None, [env.get("PYTHONPATH")])])
        self.argv = {
            "plain": [sys.executable, str(PLAIN_SCRIPT), "plain_out", str(TRAIN_BATCHES)],
            "bare": [harness, *WORKLOAD, *BARE],
            "default": [harness, *WORKLOAD],
            "sweep_default": [harness, *SWEEP],
            "sweep_bare": [harness, *SWEEP, *BARE],
            "help": [harness, "--help"],
            "cfg": [harness, "--cfg", "job"],
        }[row]

    @property
    def floor(self) -> str | None:
        """The name of the command this one is read against in each round."""
        against = GOALS.get(self.row, (None, 0))[0]
        if against is None or against == "plain" or self.src is None:
            return against
        return f"{against}@{self.src.name}"

    def run(self, cwd: Path, store: str) -> dict[str, float]:
        cwd.mkdir(parents=True)
        env = {**self.env, "MLFLOW_TRACKING_URI": store}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        with open(cwd / "stderr.txt", "w") as stderr:
            proc = subprocess.Popen(self.argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                    stderr=stderr)
            cpu, at_job = watch(proc, cwd if self.row.startswith("sweep") else None)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            sys.exit(f"{self.name} failed ({proc.returncode}): {' '.join(self.argv)}\n"
                     f"{(cwd / 'stderr.txt').read_text()[-3000:]}")
        tree = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        figures = {"wall": wall, "cpu": tree if cpu is None else cpu, "tree_cpu": tree}
        if self.row.startswith("sweep"):
            results = sorted(cwd.glob("multirun/*/*/*/result.json"),
                             key=lambda p: int(p.parent.name))
            if len(results) != SWEEP_JOBS or len(at_job) != SWEEP_JOBS:
                sys.exit(f"expected {SWEEP_JOBS} jobs in {cwd}, found {len(results)}")
            # Jobs 2-4: from job 1's result.json to job 4's (each job writes it at the same
            # point of its run), over 3 jobs; CPU the same way.
            further = SWEEP_JOBS - 1
            figures["wall"] = (results[-1].stat().st_mtime - results[0].stat().st_mtime) / further
            figures["cpu"] = (at_job[-1][0] - at_job[0][0]) / further
            figures["tree_cpu"] = (at_job[-1][1] - at_job[0][1]) / further
        return figures


def spread(values: list[float]) -> str:
    values = [v for v in values if v == v]
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def beyond(command: Command, figures: dict[str, list[dict[str, float]]], clock: str
           ) -> list[float] | None:
    """This row's cost beyond its floor, round by round (None: no floor to read against)."""
    if command.floor is None:
        return None if command.row not in GOALS else [v[clock] for v in figures[command.name]]
    if command.floor not in figures:
        return None
    return [v[clock] - f[clock]
            for v, f in zip(figures[command.name], figures[command.floor], strict=True)]


def report(commands: list[Command], figures: dict[str, list[dict[str, float]]]) -> None:
    print("\nMedian over rounds (min-max), seconds; sweeps: per further job. cost = the row minus"
          " its floor in the same round\n(plain for bare and default, sweep_bare for"
          " sweep_default; help: its own time). Goal met when the median cost is within it.")
    head = (f"{'command':20s} {'wall':>18s} {'cpu':>18s} {'tree cpu':>18s}"
            f" {'cost, wall':>20s} {'cost, cpu':>20s}  goal: wall / cpu")
    print(head)
    for command in commands:
        values = figures[command.name]
        line = (f"{command.name:20s} {spread([v['wall'] for v in values]):>18s}"
                f" {spread([v['cpu'] for v in values]):>18s}"
                f" {spread([v['tree_cpu'] for v in values]):>18s}")
        verdicts = []
        for clock in ("wall", "cpu"):
            cost = beyond(command, figures, clock)
            line += f" {spread(cost) if cost else '':>20s}"
            if cost and command.row in GOALS:
                limit = GOALS[command.row][1]
                verdicts.append("met" if statistics.median(cost) <= limit else "NOT met")
        goal = GOALS.get(command.row)
        print(line + (f"  < {goal[1]} s: {' / '.join(verdicts)}" if goal and verdicts else ""))


def print_rounds(commands: list[Command], figures: dict[str, list[dict[str, float]]],
                 loads: list[float]) -> None:
    print("\nEvery round, wall / cpu seconds (sweeps: per further job), and the 1-minute load"
          " average at the round's end:")
    names = [c.name for c in commands]
    print(f"{'round':>5s} {'load':>5s} " + " ".join(f"{n:>17s}" for n in names))
    for index, load in enumerate(loads):
        cells = [f"{figures[n][index]['wall']:.2f} / {figures[n][index]['cpu']:.2f}"
                 for n in names]
        print(f"{index + 1:5d} {load:5.1f} " + " ".join(f"{c:>17s}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--against", type=Path, action="append", default=[],
                        help="a source checkout whose harness is measured too, in the same"
                             " rounds (repeatable)")
    parser.add_argument("--fresh-store", action="store_true",
                        help="a new MLflow store for each default run (its creation included)")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure here")
    args = parser.parse_args()

    rows = [r for r in args.rows.split(",") if r]
    if unknown := set(rows) - set(ROWS):
        sys.exit(f"unknown rows {sorted(unknown)}; choose from {','.join(ROWS)}")
    if "plain" in rows:
        check_plain_settings()
    harness = str(Path(sys.executable).parent / "harness")
    env = {**os.environ}
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    commands = [Command(r, harness, None, env) for r in rows]
    for checkout in args.against:
        commands += [Command(r, harness, checkout.resolve(), env) for r in rows if r != "plain"]

    figures: dict[str, list[dict[str, float]]] = {c.name: [] for c in commands}
    loads: list[float] = []
    started = datetime.now()
    with tempfile.TemporaryDirectory(prefix="fixed_cost_") as tmp:
        root = Path(tmp)
        shared_store = f"sqlite:///{root / 'mlflow.db'}"
        if not args.fresh_store:  # the store exists, as it does for a user after a first run
            for command in commands:
                if command.row == "default":
                    command.run(root / f"warm-up-{command.name.replace('@', '-')}", shared_store)
        for round_index in range(args.rounds):
            shift = round_index % len(commands)
            for command in commands[shift:] + commands[:shift]:
                cwd = root / f"r{round_index}" / command.name.replace("@", "-")
                store = f"sqlite:///{cwd / 'mlflow.db'}" if args.fresh_store else shared_store
                figures[command.name].append(command.run(cwd, store))
            loads.append(os.getloadavg()[0])
            print(f"round {round_index + 1} (load {loads[-1]:.1f}): " + "  ".join(
                f"{name} {f[-1]['wall']:.2f}/{f[-1]['cpu']:.2f}" for name, f in figures.items()),
                flush=True)

    minutes = (datetime.now() - started).total_seconds() / 60
    print(f"\n{started:%Y-%m-%d %H:%M}, {args.rounds} rounds in {minutes:.0f} min, load average"
          f" {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs, threads"
          f" {args.threads or 'default'}")
    print_rounds(commands, figures, loads)
    report(commands, figures)
    if args.json:
        args.json.write_text(json.dumps({"loads": loads, "figures": figures}, indent=2))


if __name__ == "__main__":
    main()
