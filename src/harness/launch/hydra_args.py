"""The command that runs this job again (a DDP rank, the job under nsys or in code_dir's fresh
process) with the same config, and the result.json such a re-run wrote, read back."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.errors import HarnessError
from harness.result.schema import RunResult
from harness.result.store import RESULT_FILE, load_result

_PLAIN = re.compile(r"^[A-Za-z0-9_./:@+-]+$")


def same_config_arguments() -> list[str]:
    """`--config-dir`, `--config-name` and `hydra.searchpath` of the current Hydra job: without
    them a re-run finds only harness's own conf/, not a user's `-cd my_conf`."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    args = [f"--config-dir={source.path}" for source in hydra_cfg.runtime.config_sources
            if source.provider == "command-line"]
    if hydra_cfg.job.config_name not in (None, "config"):
        args.append(f"--config-name={hydra_cfg.job.config_name}")
    args += [o for o in hydra_cfg.overrides.hydra if o.startswith("hydra.searchpath")]
    return args


def rerun_command(overrides: Sequence[str], run_dir: str | Path, python: str = sys.executable,
                  config_args: Sequence[str] = ()) -> list[str]:
    """`python -m harness.cli` with `config_args` and `overrides`, writing into `run_dir` (quoted
    when it holds characters Hydra's override grammar reads)."""
    text = str(run_dir)
    if not _PLAIN.match(text):
        text = "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return [python, "-m", "harness.cli", *config_args, *overrides, f"hydra.run.dir={text}"]


def run_again(command: Sequence[str], env: Mapping[str, str], run_dir: Path, what: str,
              log_file: Path | None = None, see: str = " above") -> tuple[RunResult, int]:
    """Run `command` (this job again, into `run_dir`; its output into `log_file`, else the
    terminal) and read back the result.json it wrote, with its exit status; a HarnessError
    naming `what` when it wrote none (`see`: where its output is)."""
    with (open(log_file, "w") if log_file else contextlib.nullcontext()) as output:
        returncode = subprocess.run(command, env=env, stdout=output,
                                    stderr=subprocess.STDOUT if output else None).returncode
    if not (run_dir / RESULT_FILE).is_file():
        raise HarnessError(f"{what} ended (exit status {returncode}) without writing"
                           f" {run_dir / RESULT_FILE}; see its output{see}")
    return load_result(run_dir), returncode
