"""The command that runs this job again (a DDP rank, the job under nsys) with the same config."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

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
