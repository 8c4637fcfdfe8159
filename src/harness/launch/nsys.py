"""`profiler=nsys`: Nsight Systems must start the program it profiles, so the job runs itself
again under `nsys profile`, into the same run directory (HARNESS_NSYS_CHILD=1 marks the child,
which measures), and reads back the child's result.json. Imports neither torch nor Lightning."""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from annotated_types import MinLen
from omegaconf import OmegaConf

from harness.config.checks import NonNegativeInt, PositiveInt, read_fields
from harness.errors import HarnessError
from harness.launch.hydra_args import rerun_command, run_again, same_config_arguments
from harness.launch.outside_tool import ON_MISSING, find_executable, tool_unavailable
from harness.result.schema import RunResult
from harness.result.store import write_result

log = logging.getLogger(__name__)

CHILD_ENV = "HARNESS_NSYS_CHILD"
REPORT_STEM = "nsys"  # reports/nsys.nsys-rep (and nsys.sqlite with stats=true)
TRACES = ("cuda", "nvtx", "osrt", "cudnn", "cublas", "cusparse", "cublas-verbose", "cudnn-verbose",
          "opengl", "mpi", "ucx", "oshmem", "openacc", "vulkan", "nvvideo", "none")
SAMPLES = ("none", "process-tree", "system-wide", "cpu")


def in_child() -> bool:
    return os.environ.get(CHILD_ENV) == "1"


@dataclass(frozen=True)
class NsysOptions:
    """The `profiler.nsys` settings (conf/profiler/nsys.yaml), each checked against its hint."""

    executable: str = "nsys"
    trace: Annotated[Sequence[Literal[TRACES]], MinLen(1)] = ("cuda", "nvtx", "osrt", "cudnn", "cublas")
    warmup_steps: NonNegativeInt = 10
    active_steps: PositiveInt = 20
    sample: Literal[SAMPLES] = "none"
    stats: bool = False
    extra_args: Sequence[str] = ()
    on_missing: Literal[ON_MISSING] = "warn"

    @classmethod
    def read(cls, node: Mapping[str, Any]) -> NsysOptions:
        raw = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
               for k, v in node.items() if k != "_target_"}
        for key in ("trace", "extra_args"):  # one value stands for a list of one
            if isinstance(raw.get(key), str):
                raw[key] = [raw[key]]
        return read_fields(cls, raw, "profiler.nsys.", "conf/profiler/nsys.yaml")


def nsys_arguments(options: NsysOptions, output: Path) -> list[str]:
    """`nsys profile` and its options, up to (not including) the program to run."""
    # Collect only between torch.cuda.profiler.start() and .stop(), which the child calls after
    # the warm-up steps; then let the run finish normally.
    return [options.executable, "profile", f"--trace={','.join(options.trace)}",
            f"--sample={options.sample}", "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
            f"--output={output}", "--force-overwrite=true",
            f"--stats={'true' if options.stats else 'false'}", *options.extra_args]


def child_command(options: NsysOptions, run_dir: Path, overrides: Sequence[str],
                  python: str = sys.executable, config_args: Sequence[str] = ()) -> list[str]:
    """The full command that re-runs this job under nsys, writing into `run_dir`."""
    return [*nsys_arguments(options, run_dir / "reports" / REPORT_STEM), "--",
            *rerun_command(overrides, run_dir, python, config_args)]


def manual_command(options: NsysOptions, overrides: Sequence[str]) -> str:
    """What a user types to get the same profile by hand (shell-quoted)."""
    arguments = nsys_arguments(options, Path("nsys_report"))
    return f"{CHILD_ENV}=1 " + shlex.join([*arguments, "--", "harness", *overrides])


def relaunch_under_nsys(cfg: Any, run_dir: Path, overrides: list[str]) -> RunResult | None:
    """The child's RunResult once the job ran under nsys; None to run it here instead."""
    presets = cfg.get("profiler")
    node = presets.get("nsys") if presets is not None and hasattr(presets, "get") else None
    if node is None or in_child():
        return None
    options = NsysOptions.read(node)
    executable = find_executable(options.executable)
    if executable is None:
        tool_unavailable("nsys", "nsys", f"Nsight Systems ({options.executable}) is not on PATH, so"
                         " this run cannot be profiled with nsys. Fix: install Nsight Systems, or"
                         " point profiler.nsys.executable at it", options.on_missing)
        return None
    command = child_command(replace(options, executable=executable), run_dir, overrides,
                            config_args=same_config_arguments())
    log.info("profiler=nsys: running this job again under Nsight Systems:\n  %s", shlex.join(command))
    (run_dir / "reports").mkdir(parents=True, exist_ok=True)
    result, returncode = run_again(command, {**os.environ, CHILD_ENV: "1"}, run_dir,
                                   "profiler=nsys: the job under nsys")
    # nsys writes its report after the child has exited: list it now.
    written = (run_dir / "reports").glob(f"{REPORT_STEM}.*")
    result.reports = sorted({*result.reports, *(str(p.relative_to(run_dir)) for p in written)})
    result.nsys_command = shlex.join(command)
    write_result(run_dir, result)
    if result.status != "ok" or returncode != 0:
        raise HarnessError(f"profiler=nsys: the job under nsys ended with exit status {returncode}"
                           f" ({result.status}: {result.reason})")
    return result
