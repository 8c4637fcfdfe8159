"""Multi-process runs (DDP): start rank > 0 processes into the same run directory.

Lightning starts ranks 1..N-1 of `strategy=ddp` by re-running the command that
started rank 0 (`_SubprocessScriptLauncher`). Under Hydra it appends
`hydra.run.dir=<hydra.run.dir>`, which is right for a single run but wrong in a
sweep: the re-run command still carries `-m` and every swept value, so each
rank > 0 would start a sweep of its own, in `hydra.run.dir` rather than the
job's directory (and under submitit the command is submitit's, not ours).

`child_command` builds the command from what this job really is instead: the
job's own overrides (swept values resolved), `hydra.run.dir` = this job's
output directory and no `.hydra/` copy, so every rank works in one directory
and Hydra creates no directory per rank. Only rank 0 writes reports and
result.json (see run/job.py); the children's Hydra log is `ddp_rank<N>.log`.

Under SLURM with one task per device (srun starts every rank, Lightning's
SLURMEnvironment) no process is re-launched and none of this is used.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_original_cwd

from harness import private_api
from harness.config.overrides import as_typed
from harness.errors import HarnessError
from harness.launch.hydra_args import same_config_arguments
from harness.launch.rank_processes import watch_ranks
from harness.launch.slurm import launcher_mismatch
from harness.result.schema import RunResult


def child_command(local_rank: int) -> tuple[Sequence[str], str]:
    """The command and working directory that start `local_rank` of the current Hydra job."""
    hydra_cfg = HydraConfig.get()
    output_dir = hydra_cfg.runtime.output_dir
    command = [sys.executable, "-m", "harness.cli", *same_config_arguments(),
               *as_typed(hydra_cfg.overrides.task)]
    command += [
        f'hydra.run.dir="{output_dir}"',
        "hydra.output_subdir=null",  # rank 0 already saved the config
        f"hydra.job.name=ddp_rank{local_rank}",
    ]
    return command, get_original_cwd()


def distributed_facts(trainer: Any) -> dict[str, Any]:
    """How the Trainer spreads the run: result.json's `distributed` block."""
    environment = getattr(trainer.strategy, "cluster_environment", None)
    return {
        "strategy": type(trainer.strategy).__name__,
        "num_nodes": trainer.num_nodes,
        "devices_per_node": trainer.num_devices,
        "cluster_environment": type(environment).__name__ if environment is not None else None,
    }


# Lightning's launcher for ddp_spawn, ddp_fork and ddp_notebook (and its subclasses).
MULTIPROCESSING_LAUNCHERS = "lightning.pytorch.strategies.launchers.multiprocessing"


def fits_in_other_processes(trainer: Any) -> bool:
    """Whether the Trainer's fit runs in processes Lightning starts with multiprocessing
    (ddp_spawn, ddp_fork, ddp_notebook: the strategy a notebook's `auto` picks for several
    devices), with copies of the callbacks: the ones in this process see no step."""
    launcher = getattr(trainer.strategy, "launcher", None)
    return launcher is not None and any(
        kind.__module__ == MULTIPROCESSING_LAUNCHERS for kind in type(launcher).__mro__)


def prepare_ranks(trainer: Any, result: RunResult) -> None:
    """Before fit: SLURM's tasks must match the trainer; DDP ranks start in this job's dir,
    and end with the job (harness.launch.rank_processes), not with this process."""
    if result.slurm:
        mismatch = launcher_mismatch(result.slurm.get("ntasks_per_node"),
                                     result.slurm.get("num_nodes"), trainer.num_devices,
                                     trainer.num_nodes)
        if mismatch:
            raise HarnessError(mismatch)
    if trainer.world_size > 1:
        private_api.replace_ddp_child_command(child_command)
        private_api.replace_ddp_process_observer(watch_ranks)
