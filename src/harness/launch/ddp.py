"""Multi-process runs (DDP, docs/ddp.md): rank > 0 processes start as this job, in its directory
(not as Lightning's re-run of the whole command, a sweep's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.utils import get_original_cwd

from harness import private_api
from harness.config.overrides import as_typed
from harness.errors import HarnessError
from harness.launch.hydra_args import rerun_command, same_config_arguments
from harness.launch.rank_processes import start_ranks, watch_ranks
from harness.launch.slurm import launcher_mismatch
from harness.result.schema import RunResult


def child_command(local_rank: int) -> tuple[Sequence[str], str]:
    """The command and working directory that start `local_rank` of the current Hydra job."""
    hydra_cfg = HydraConfig.get()
    command = rerun_command(as_typed(hydra_cfg.overrides.task), hydra_cfg.runtime.output_dir,
                            config_args=same_config_arguments())
    command += ["hydra.output_subdir=null",  # rank 0 already saved the config
                f"hydra.job.name=ddp_rank{local_rank}"]
    return command, get_original_cwd()


def distributed_facts(trainer: Any) -> dict[str, Any]:
    """How the Trainer spreads the run: result.json's `distributed` block."""
    environment = getattr(trainer.strategy, "cluster_environment", None)
    return {"strategy": type(trainer.strategy).__name__, "num_nodes": trainer.num_nodes,
            "devices_per_node": trainer.num_devices,
            "cluster_environment": type(environment).__name__ if environment is not None else None}


def fits_in_other_processes(trainer: Any) -> bool:
    """Whether the fit runs in processes multiprocessing starts (ddp_spawn, ddp_fork, ddp_notebook)."""
    launcher = getattr(trainer.strategy, "launcher", None)
    return any(kind.__module__ == "lightning.pytorch.strategies.launchers.multiprocessing"
               for kind in type(launcher).__mro__)  # None's: builtins


def prepare_ranks(trainer: Any, result: RunResult) -> None:
    """Before fit: SLURM's tasks must match the trainer; DDP ranks start as this job, and
    each says where it runs (rank_processes.start_ranks)."""
    if result.slurm and (mismatch := launcher_mismatch(
            result.slurm.get("ntasks_per_node"), result.slurm.get("num_nodes"), trainer.num_devices,
            trainer.num_nodes)):
        raise HarnessError(mismatch)
    if trainer.world_size > 1:
        start_ranks(HydraConfig.get().runtime.output_dir, trainer.global_rank, trainer.world_size)
        private_api.replace_ddp_child_command(child_command)
        private_api.replace_ddp_process_observer(watch_ranks)
