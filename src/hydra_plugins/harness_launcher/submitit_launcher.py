"""hydra-submitit-launcher, made to behave like a local sweep (docs/slurm.md): each job's
`hydra.launcher` settings resolved against its own config (jobs with equal settings share an
array), a request SLURM rejects failing that array's jobs only (each with a result.json), a job
that ends without a result said in one line, and each job's progress lines as in process."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import (
    BaseSubmititLauncher,
    LocalLauncher,
    SlurmLauncher,
)
from omegaconf import DictConfig, OmegaConf, open_dict

from harness.launch.output_dirs import register_resolver

if TYPE_CHECKING:
    from harness.sweep.progress import Progress

# A job process resolves its config's ${unique_dir:...} (from the cache the config carries).
register_resolver()
log = logging.getLogger(__name__)
_INIT_KEYS = {"submitit_folder", "max_num_timeout"}
# srun ends a job's tasks this long after the first of them ended (srun --wait, through its
# variable; one set where harness is started wins): a hung rank, whose peers gave up at the
# process group's timeout, does not hold the job, and the sweep, until its time limit. Rank 0's
# reports, written after the other ranks exit, take far less.
SRUN_WAIT = 'export SLURM_WAIT="${SLURM_WAIT:-300}"'

# sbatch's message -> the hydra.launcher key to change
_FIXES = (("partition", "hydra.launcher.partition=<a partition listed by `sinfo -s`>"),
          ("processors", "lower hydra.launcher.cpus_per_task or the tasks per node (= trainer.devices);"
                         " `sinfo -o '%P %c'` shows the CPUs of a node"),
          ("gres", "drop hydra.launcher.gpus_per_node / gres, or use a partition with GPUs"),
          ("memory", "lower hydra.launcher.mem_gb (`sinfo -o '%P %m'` shows a node's memory in MB)"),
          ("time limit", "lower hydra.launcher.timeout_min"),
          ("account", "set hydra.launcher.account to an account you belong to"),
          ("qos", "set hydra.launcher.qos to a QOS your account may use"),
          ("node count", "lower hydra.launcher.nodes (= trainer.num_nodes)"))


def one_line(text: str) -> str:
    """The line of a submitit/sbatch error that says what went wrong."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    for line in lines:
        if "error:" in line.lower():
            message = line.split("error:", 1)[-1].strip().rstrip(".")
            return message.removeprefix("Batch job submission failed: ")
    return lines[0][:300] if lines else "no message"


def fix_for(message: str) -> str:
    return next((fix for needle, fix in _FIXES if needle in message.lower()),
                "check the settings with `harness -m hydra/launcher=slurm --cfg hydra -p hydra.launcher`")


class _Job:
    def __init__(self, idx: int, overrides: Sequence[str], config: DictConfig, swept: list[str],
                 total: int) -> None:
        from harness.config.sweep_keys import job_label

        self.idx, self.number, self.overrides, self.config = idx, idx + 1, list(overrides), config
        self.output_dir = Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)
        self.label = job_label(filter_overrides(self.overrides), swept)
        self.name = f"job {self.number}/{total} {self.label}".strip()

    def record_failure(self, reason: str) -> None:
        from harness.result.schema import RunResult
        from harness.result.store import RESULT_FILE, write_result

        if (self.output_dir / RESULT_FILE).exists():
            return  # the job itself recorded how it ended
        write_result(self.output_dir, RunResult(
            status="failed", reason=reason, overrides=filter_overrides(self.overrides)))

    def stand_in(self, progress: Progress, seconds: float = 0.0) -> JobReturn:
        """What Hydra gets for a job that did not run, said ended: completed, so the sweep goes on."""
        progress.finished(self.number, self.label, self.output_dir, seconds)
        return JobReturn(overrides=self.overrides, cfg=self.config, hydra_cfg=self.config,
                         working_dir=str(self.output_dir), task_name="harness", status=JobStatus.COMPLETED)


class _HarnessMixin(BaseSubmititLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        from harness.config.sweep_keys import swept_values_of
        from harness.sweep.progress import sweep_progress

        progress = sweep_progress()
        log.info("%s executor: %d job(s) to submit; each job's output is in %s/<job>/ and"
                 " %s/.submitit/", self._EXECUTOR, len(job_overrides), sweep_dir, sweep_dir)
        returns: dict[int, JobReturn] = {}
        groups: dict[str, tuple[dict[str, Any], list[_Job]]] = {}
        swept, total = list(swept_values_of(self.config)), progress.total or len(job_overrides)
        for idx, overrides in enumerate(job_overrides, initial_job_idx):
            config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(config.hydra.job):
                config.hydra.job.num = idx
            job = _Job(idx, overrides, config, swept, total)
            params = self._job_params(job)
            if params is None:
                returns[job.idx] = job.stand_in(progress)
            else:
                key = json.dumps(params, sort_keys=True, default=str)
                groups.setdefault(key, (params, []))[1].append(job)

        # One array per group of jobs with the same resources, one group after another: never
        # more jobs at once than `array_parallelism` (timings stay comparable).
        for params, jobs in groups.values():
            handles = self._submit(params, jobs, progress) or [None] * len(jobs)
            for job, handle in zip(jobs, handles, strict=True):
                returns[job.idx] = self._collect(job, handle, progress)
        return [returns[idx] for idx in sorted(returns)]

    def _job_params(self, job: _Job) -> dict[str, Any] | None:
        """This job's launcher settings, resolved against its own config; None if unusable."""
        from harness.launch.slurm import launcher_mismatch

        try:
            params = OmegaConf.to_container(job.config.hydra.launcher, resolve=True)
        except Exception as err:
            job.record_failure(f"hydra.launcher settings of {job.name}: {one_line(str(err))}")
            return None
        params.pop("_target_", None)
        if self._EXECUTOR == "slurm":
            params["setup"] = [SRUN_WAIT, *(params.get("setup") or [])]
            trainer = job.config.get("trainer") or {}
            if mismatch := launcher_mismatch(params.get("tasks_per_node"), params.get("nodes"),
                                             trainer.get("devices"), trainer.get("num_nodes", 1)):
                job.record_failure(f"not submitted: {mismatch}")
                return None
        return params

    def _submit(self, params: dict[str, Any], jobs: list[_Job], progress: Progress) -> list[Any] | None:
        """Submit `jobs` as one array with `params`; None if the cluster refuses."""
        import submitit

        init = {"folder": params["submitit_folder"]}
        if "max_num_timeout" in params:
            init[f"{self._EXECUTOR}_max_num_timeout"] = params["max_num_timeout"]
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init)
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{(k if k in base else f"{self._EXECUTOR}_{k}"): v
                                      for k, v in params.items() if k not in _INIT_KEYS})
        job_args = zip(*[(job.overrides, "hydra.sweep.dir", job.idx, f"job_id_for_{job.idx}",
                          Singleton.get_state()) for job in jobs], strict=True)
        captured = io.StringIO()  # submitit prints sbatch's stderr itself; we say it once
        try:
            with contextlib.redirect_stderr(captured):
                handles = executor.map_array(self, *job_args)
        except Exception as err:
            message = one_line(str(err) or captured.getvalue())
            reason = f"sbatch rejected the job: {message}. Fix: {fix_for(message)}"
            for job in jobs:
                job.record_failure(reason)
            return None
        for job, handle in zip(jobs, handles, strict=True):
            progress.starting(job.number, job.label, f"submitted as {self._EXECUTOR} job {handle.job_id}")
        return handles

    def _collect(self, job: _Job, handle: Any, progress: Progress) -> JobReturn:
        """The job's JobReturn once it ended (a stand-in when it was not submitted, `handle` None)."""
        from harness.errors import HarnessError
        from harness.result.store import load_result

        if handle is None:
            return job.stand_in(progress)
        try:  # rank 0's: it writes result.json (another rank lost, or hung, has no result)
            ret = handle.task(0).result()
        except Exception as err:
            state = getattr(handle, "state", "?")
            job.record_failure(f"{self._EXECUTOR} job {handle.job_id} ended without a result"
                               f" (state {state}): {one_line(str(err))}")
            ret = None
        seconds = 0.0
        with contextlib.suppress(HarnessError):
            seconds = load_result(job.output_dir).duration_s or 0.0
        if ret is None:
            return job.stand_in(progress, seconds)
        progress.finished(job.number, job.label, job.output_dir, seconds)
        return ret


class HarnessSlurmLauncher(_HarnessMixin, SlurmLauncher):
    """`hydra/launcher=slurm`: one sbatch array per distinct resource request."""


class HarnessLocalLauncher(_HarnessMixin, LocalLauncher):
    """`hydra/launcher=local`: submitit's local executor (processes on this machine)."""
