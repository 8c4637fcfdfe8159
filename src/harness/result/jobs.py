"""The one reader of job directories: a sweep (or a single run) back from disk, one JobResult
per job directory, from its result.json, else .hydra/overrides.yaml, whichever launcher ran it,
even while some still run. The table, autotune, MLflow upload and the sweepers all read here."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.overrides import AUTOTUNE_STAGE, MEASUREMENT_KEYS, SET_BY_AUTOTUNE, parse_overrides
from harness.errors import HarnessError
from harness.result.schema import RunResult
from harness.result.store import RESULT_FILE, hydra_overrides, job_dirs, load_result, read_yaml

MULTIRUN_FILE = "multirun.yaml"
HYDRA_FILE = Path(".hydra") / "hydra.yaml"


@dataclass
class JobResult:
    """What one job directory says about its job."""

    path: Path
    status: str  # ok | failed | oom | interrupted (from result.json), missing | unreadable
    reason: str | None
    settings: dict[str, str]  # key -> value as overridden on the command line / by the sweep
    overrides: list[str] = field(default_factory=list)  # as the job ran: result.json's, else Hydra's
    figures: dict[str, Any] = field(default_factory=dict)  # RunResult.figures(): every number
    samples: list[dict[str, Any]] = field(default_factory=list)  # one figures dict per repeat
    result: RunResult | None = None  # the whole result.json, when it could be read

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Collection:
    """All jobs of one sweep directory, plus what could not be read and why."""

    root: Path
    jobs: list[JobResult]
    problems: list[str] = field(default_factory=list)


def settings_of(overrides: list[str]) -> dict[str, str]:
    """The point a job measured: its overrides without how it was measured (repeat, round...)."""
    settings = parse_overrides(overrides)
    how = (*MEASUREMENT_KEYS, *SET_BY_AUTOTUNE) if AUTOTUNE_STAGE in settings else MEASUREMENT_KEYS
    return {k: v for k, v in settings.items() if k not in how}


def read_job(job_dir: Path) -> tuple[JobResult, str | None]:
    """The job in `job_dir`, and a problem message when its result.json cannot be used."""
    result_path = job_dir / RESULT_FILE
    overrides = hydra_overrides(job_dir) or []
    if not result_path.is_file():
        reason = "no result.json (job still running, killed, or crashed before writing it)"
        return JobResult(job_dir, "missing", reason, settings_of(overrides), overrides), None
    try:
        result = load_result(result_path)
    except HarnessError as err:
        # err names the file and what is wrong: "<path>: truncated: the JSON ends early"
        what = str(err).removeprefix(f"{result_path}: ")
        problem = f"{result_path}: unreadable ({what}); the job is shown as 'unreadable'"
        reason = f"result.json unreadable: {what}"
        return JobResult(job_dir, "unreadable", reason, settings_of(overrides), overrides), problem
    overrides = list(result.overrides) or overrides
    figures = result.figures()
    # Per repeat, its own speed figures over the whole job's (repeat=N diagnoses once, on the pool).
    per_repeat = result.repeats.per_repeat if result.repeats is not None else None
    samples = [{**figures, **run} for run in per_repeat] if per_repeat else [figures]
    return JobResult(job_dir, result.status, result.reason, settings_of(overrides), overrides, figures,
                     samples, result), None


def collect(root: Path) -> Collection:
    """Every job under `root` (a multirun directory, or one run's directory)."""
    root = Path(root)
    if not root.exists():
        raise HarnessError(f"{root} does not exist. Fix: pass a sweep directory (multirun/DATE/TIME)")
    if not root.is_dir():
        raise HarnessError(f"{root} is not a directory. Fix: pass a sweep directory, not a file")
    found = [root] if (root / RESULT_FILE).is_file() else job_dirs(root)
    if not found:
        if (root / MULTIRUN_FILE).is_file():
            raise HarnessError(f"{root} is a sweep directory with no jobs in it yet (multirun.yaml but no"
                               " job directories). Fix: wait for the first job to start, or check the"
                               " launcher's log")
        raise HarnessError(f"{root} is not a sweep or run directory: no result.json and no .hydra/ job"
                           " directories inside it. Fix: pass the directory `harness -m` printed"
                           " (multirun/DATE/TIME) or a run's output directory")
    read = [read_job(job_dir) for job_dir in found]
    problems = [_mixed_sweeps(root, found), *(problem for _, problem in read)]
    return Collection(root, [job for job, _ in read], [p for p in problems if p])


def sweep_setting(sweep_dir: Path, key: str) -> Any:
    """The sweep's own setting `key` (dotted: `hydra.callbacks.sweep_report.plot`) in its
    multirun.yaml; None where unset, and for a run's directory, another app's sweep or a file
    that cannot be read."""
    node = read_yaml(Path(sweep_dir) / MULTIRUN_FILE)
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _mixed_sweeps(root: Path, job_dirs: list[Path]) -> str | None:
    origins: dict[str, list[str]] = {}
    for job_dir in job_dirs:
        with contextlib.suppress(KeyError, TypeError):  # no .hydra/hydra.yaml, or one of another layout
            hydra = read_yaml(job_dir / HYDRA_FILE)["hydra"]
            if hydra["mode"] == "MULTIRUN":
                origin = str(Path(hydra["runtime"]["output_dir"]).parent)
                origins.setdefault(origin, []).append(str(job_dir.relative_to(root)))
    if len(origins) < 2:
        return None
    listed = "; ".join(f"{origin}: {', '.join(jobs)}" for origin, jobs in origins.items())
    return (f"{root} mixes the jobs of {len(origins)} sweeps ({listed}); the table compares"
            " them as one. Fix: harness-report one sweep directory at a time")
