"""`profiler=nsys`: run the job again as a child of `nsys profile` (the preset is
harness.profilers.nsys).

Nsight Systems has to start the program it profiles, so the job first started
by `harness` only builds the `nsys profile ... -- python -m harness.cli ...`
command, runs it and reads back the result the child wrote. The child gets
the job's own overrides plus `hydra.run.dir=<this job's directory>`, so it
writes into the same run directory, and the environment marker
HARNESS_NSYS_CHILD=1, so it trains instead of launching nsys again.

This module imports neither torch nor Lightning.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.checks import list_of, non_negative_int, one_of, positive_int
from harness.errors import HarnessError
from harness.launch.outside_tool import ON_MISSING, find_executable, tool_unavailable
from harness.result.schema import RunResult
from harness.result.store import RESULT_FILE, load_result, write_result

log = logging.getLogger(__name__)

CHILD_ENV = "HARNESS_NSYS_CHILD"
REPORT_STEM = "nsys"  # reports/nsys.nsys-rep (and nsys.sqlite with stats=true)
TRACES = (
    "cuda",
    "nvtx",
    "osrt",
    "cudnn",
    "cublas",
    "cusparse",
    "cublas-verbose",
    "cudnn-verbose",
    "opengl",
    "mpi",
    "ucx",
    "oshmem",
    "openacc",
    "vulkan",
    "nvvideo",
    "none",
)
SAMPLES = ("none", "process-tree", "system-wide", "cpu")
_PLAIN = re.compile(r"^[A-Za-z0-9_./:@+-]+$")


def in_child() -> bool:
    """Whether this process is the job that nsys started."""
    return os.environ.get(CHILD_ENV) == "1"


@dataclass(frozen=True)
class NsysOptions:
    """The validated `profiler.nsys` settings."""

    executable: str = "nsys"
    trace: tuple[str, ...] = ("cuda", "nvtx", "osrt", "cudnn", "cublas")
    warmup_steps: int = 10
    active_steps: int = 20
    sample: str = "none"
    stats: bool = False
    extra_args: tuple[str, ...] = ()
    on_missing: str = "warn"

    @classmethod
    def read(cls, node: Mapping[str, Any]) -> NsysOptions:
        trace = node.get("trace", cls.trace)
        trace = tuple(str(t) for t in list_of("profiler.nsys.trace", trace, TRACES,
                                                "[cuda,nvtx,osrt,cudnn,cublas]"))
        sample = one_of("profiler.nsys.sample", str(node.get("sample", cls.sample)), SAMPLES, "none")
        on_missing = one_of("profiler.nsys.on_missing", node.get("on_missing", cls.on_missing),
                            ON_MISSING)
        extra = node.get("extra_args", ()) or ()
        extra = (extra,) if isinstance(extra, str) else tuple(str(a) for a in extra)
        return cls(
            executable=str(node.get("executable", cls.executable)),
            trace=trace,
            warmup_steps=non_negative_int(
                "profiler.nsys.warmup_steps", node.get("warmup_steps", cls.warmup_steps), 10
            ),
            active_steps=positive_int(
                "profiler.nsys.active_steps", node.get("active_steps", cls.active_steps), 20
            ),
            sample=sample,
            stats=bool(node.get("stats", cls.stats)),
            extra_args=extra,
            on_missing=on_missing,
        )


def override_value(text: str) -> str:
    """`text` as a Hydra override value, quoted when it holds characters the grammar reads."""
    if _PLAIN.match(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def nsys_arguments(options: NsysOptions, output: Path) -> list[str]:
    """`nsys profile` and its options, up to (not including) the program to run."""
    return [
        options.executable,
        "profile",
        f"--trace={','.join(options.trace)}",
        f"--sample={options.sample}",
        # Collect only between torch.cuda.profiler.start() and .stop(), which the
        # child calls after the warm-up steps; then let the run finish normally.
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        f"--output={output}",
        "--force-overwrite=true",
        f"--stats={'true' if options.stats else 'false'}",
        *options.extra_args,
    ]


def child_command(
    options: NsysOptions, run_dir: Path, overrides: Sequence[str], python: str = sys.executable,
    config_args: Sequence[str] = (),
) -> list[str]:
    """The full command that re-runs this job under nsys, writing into `run_dir`."""
    program = [
        python,
        "-m",
        "harness.cli",
        *config_args,
        *overrides,
        f"hydra.run.dir={override_value(str(run_dir))}",
    ]
    return [*nsys_arguments(options, run_dir / "reports" / REPORT_STEM), "--", *program]


def manual_command(options: NsysOptions, overrides: Sequence[str]) -> str:
    """What a user types to get the same profile by hand (shell-quoted)."""
    arguments = nsys_arguments(options, Path("nsys_report"))
    return f"{CHILD_ENV}=1 " + shlex.join([*arguments, "--", "harness", *overrides])


def relaunch_under_nsys(cfg: Any, run_dir: Path, overrides: list[str]) -> RunResult | None:
    """Run this job under nsys when `profiler.nsys` is configured; None to run it here instead.

    Returns the child's RunResult (read back from its result.json) once it has ended.
    """
    presets = cfg.get("profiler")
    node = presets.get("nsys") if presets is not None and hasattr(presets, "get") else None
    if node is None or in_child():
        return None
    options = NsysOptions.read(node)
    executable = find_executable(options.executable)
    if executable is None:
        message = (
            f"Nsight Systems ({options.executable}) is not on PATH, so this run cannot be"
            " profiled with nsys. Fix: install Nsight Systems, or point"
            " profiler.nsys.executable at it"
        )
        tool_unavailable("nsys", "nsys", message, options.on_missing)
        return None

    from harness.launch.hydra_args import same_config_arguments

    command = child_command(
        NsysOptions(**{**options.__dict__, "executable": executable}), run_dir, overrides,
        config_args=same_config_arguments(),
    )
    log.info("profiler=nsys: running this job again under Nsight Systems:\n  %s",
             shlex.join(command))
    (run_dir / "reports").mkdir(parents=True, exist_ok=True)
    returncode = subprocess.run(command, env={**os.environ, CHILD_ENV: "1"}).returncode
    return _read_back(run_dir, command, returncode)


def _read_back(run_dir: Path, command: list[str], returncode: int) -> RunResult:
    if not (run_dir / RESULT_FILE).is_file():
        raise HarnessError(
            f"profiler=nsys: the job under nsys ended (exit status {returncode})"
            f" without writing {run_dir / RESULT_FILE}; see its output above"
        )
    result = load_result(run_dir)
    # nsys writes its report after the child has exited: list it now.
    reports = set(result.reports)
    reports.update(
        str(p.relative_to(run_dir)) for p in (run_dir / "reports").glob(f"{REPORT_STEM}.*")
    )
    result.reports = sorted(reports)
    result.nsys_command = shlex.join(command)
    write_result(run_dir, result)
    if result.status != "ok" or returncode != 0:
        raise HarnessError(
            f"profiler=nsys: the job under nsys ended with exit status {returncode}"
            f" ({result.status}: {result.reason})"
        )
    return result
