"""Read a sweep (or a single run) back from disk: one JobResult per job directory.

Only the files each job wrote are used (result.json, and .hydra/overrides.yaml
when result.json is missing or unreadable), so the table can be rebuilt at any
time, whichever launcher ran the jobs and even while some are still running.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.autotune.job import SET_BY_AUTOTUNE
from harness.config.overrides import AUTOTUNE_STAGE, MEASUREMENT_KEYS, parse_overrides
from harness.errors import HarnessError
from harness.result.schema import RunResult
from harness.result.store import RESULT_FILE, load_result

MULTIRUN_FILE = "multirun.yaml"
OVERRIDES_FILE = Path(".hydra") / "overrides.yaml"
HYDRA_FILE = Path(".hydra") / "hydra.yaml"

OK = "ok"
MISSING = "missing"
UNREADABLE = "unreadable"


@dataclass
class JobResult:
    """What one job directory says about its job."""

    path: Path
    status: str  # ok | failed | oom | interrupted (from result.json), missing | unreadable
    reason: str | None
    settings: dict[str, str]  # key -> value as overridden on the command line / by the sweep
    figures: dict[str, Any] = field(default_factory=dict)  # RunResult.figures(): every number
    samples: list[dict[str, Any]] = field(default_factory=list)  # one figures dict per repeat
    result: RunResult | None = None  # the whole result.json, when it could be read

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def ok(self) -> bool:
        return self.status == OK


@dataclass
class Collection:
    """All jobs of one sweep directory, plus what could not be read and why."""

    root: Path
    jobs: list[JobResult]
    problems: list[str] = field(default_factory=list)


def settings_of(overrides: list[str]) -> dict[str, str]:
    """The point a job measured: its overrides without how it was measured (repeat, round;
    in an autotune sweep also the mode and steps it set, so that a point's probe, halving
    rounds and confirm rounds pool into one cell)."""
    settings = parse_overrides(overrides)
    how = (*MEASUREMENT_KEYS, *SET_BY_AUTOTUNE) if AUTOTUNE_STAGE in settings else MEASUREMENT_KEYS
    return {k: v for k, v in settings.items() if k not in how}


def _natural_key(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def _job_dirs(root: Path) -> list[Path]:
    found = {p.parent for p in root.rglob(RESULT_FILE)}
    found |= {p.parent.parent for p in root.rglob(str(OVERRIDES_FILE))}
    found.discard(root)
    # Directories nested inside another job (its own outputs) are not jobs of the sweep.
    jobs = [d for d in found if not any(other in d.parents for other in found)]
    return sorted(jobs, key=lambda p: _natural_key(p.relative_to(root)))


def _overrides_from_hydra(job_dir: Path) -> dict[str, str]:
    path = job_dir / OVERRIDES_FILE
    if not path.is_file():
        return {}
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text()) or []
    except yaml.YAMLError:
        return {}
    return settings_of([str(x) for x in loaded]) if isinstance(loaded, list) else {}


def _samples(result: RunResult, figures: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict of figures per repeat: each repeat's own metrics (the speed figures), with
    the job's figures only the whole job has (repeat=N diagnoses once, on the pool: FLOP/s,
    MFU, shares; compiled graphs) joining every repeat's. `figures` is result.figures(),
    which reads them where they live (a schema-2 result.json copied them into metrics)."""
    if result.repeats is not None and result.repeats.per_repeat:
        return [{**figures, **run} for run in result.repeats.per_repeat]
    return [figures]


def read_job(job_dir: Path) -> tuple[JobResult, str | None]:
    """The job in `job_dir`, and a problem message when its result.json cannot be used."""
    result_path = job_dir / RESULT_FILE
    if not result_path.is_file():
        reason = "no result.json (job still running, killed, or crashed before writing it)"
        return JobResult(job_dir, MISSING, reason, _overrides_from_hydra(job_dir)), None
    try:
        result = load_result(result_path)
    except HarnessError as err:
        # err names the file and what is wrong: "<path>: truncated: the JSON ends early"
        what = str(err).removeprefix(f"{result_path}: ")
        reason = f"result.json unreadable: {what}"
        problem = f"{result_path}: unreadable ({what}); the job is shown as 'unreadable'"
        return JobResult(job_dir, UNREADABLE, reason, _overrides_from_hydra(job_dir)), problem
    settings = settings_of(result.overrides) if result.overrides else _overrides_from_hydra(job_dir)
    figures = result.figures()
    job = JobResult(
        path=job_dir,
        status=result.status,
        reason=result.reason,
        settings=settings,
        figures=figures,
        samples=_samples(result, figures),
        result=result,
    )
    return job, None


def collect(root: Path) -> Collection:
    """Every job under `root` (a multirun directory, or one run's directory)."""
    root = Path(root)
    if not root.exists():
        raise HarnessError(
            f"{root} does not exist. Fix: pass a sweep directory (multirun/DATE/TIME)"
        )
    if not root.is_dir():
        raise HarnessError(f"{root} is not a directory. Fix: pass a sweep directory, not a file")
    if (root / RESULT_FILE).is_file():
        job, problem = read_job(root)
        return Collection(root, [job], [problem] if problem else [])
    job_dirs = _job_dirs(root)
    if not job_dirs:
        if (root / MULTIRUN_FILE).is_file():
            raise HarnessError(
                f"{root} is a sweep directory with no jobs in it yet (multirun.yaml but no job"
                " directories). Fix: wait for the first job to start, or check the launcher's log"
            )
        raise HarnessError(
            f"{root} is not a sweep or run directory: no result.json and no .hydra/ job"
            " directories inside it. Fix: pass the directory `harness -m` printed"
            " (multirun/DATE/TIME) or a run's output directory"
        )
    jobs: list[JobResult] = []
    problems: list[str] = []
    for job_dir in job_dirs:
        job, problem = read_job(job_dir)
        jobs.append(job)
        if problem:
            problems.append(problem)
    mixed = _mixed_sweeps(root, job_dirs)
    return Collection(root, jobs, ([mixed] if mixed else []) + problems)


def _sweep_of(job_dir: Path) -> str | None:
    """The directory of the sweep that ran the job: the parent of the output directory
    Hydra recorded in the job's .hydra/hydra.yaml (None for a single run or no record)."""
    import yaml

    try:
        hydra = yaml.safe_load((job_dir / HYDRA_FILE).read_text())["hydra"]
        if hydra["mode"] != "MULTIRUN":
            return None
        return str(Path(hydra["runtime"]["output_dir"]).parent)
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None


def _mixed_sweeps(root: Path, job_dirs: list[Path]) -> str | None:
    """A warning when the jobs under `root` come from more than one sweep (a date directory
    holding two sweeps, jobs copied together): their table would compare them as one."""
    origins: dict[str, list[str]] = {}
    for job_dir in job_dirs:
        origin = _sweep_of(job_dir)
        if origin is not None:
            origins.setdefault(origin, []).append(str(job_dir.relative_to(root)))
    if len(origins) < 2:
        return None
    listed = "; ".join(f"{origin}: {', '.join(jobs)}" for origin, jobs in origins.items())
    return (f"{root} mixes the jobs of {len(origins)} sweeps ({listed}); the table compares"
            " them as one. Fix: harness-report one sweep directory at a time")
