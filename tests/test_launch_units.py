"""The small pure pieces behind SLURM and DDP support (no cluster, no training)."""

from __future__ import annotations

import math
import os
import signal

import pytest

from harness.launch.ranks import rank_path
from harness.launch.signals import RunInterrupted, preemption_signal, stop_on_signals
from harness.launch.slurm import slurm_metadata
from harness.profilers.step_timer import StepRecord, rank_figures, total_examples_per_second
from hydra_plugins.harness_launcher.submitit_launcher import fix_for, one_line


def test_slurm_metadata_of_an_array_task():
    meta = slurm_metadata({
        "SLURM_JOB_ID": "42", "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "2",
        "SLURM_JOB_PARTITION": "gpu", "SLURM_JOB_NODELIST": "node[01-02]",
        "SLURM_NTASKS_PER_NODE": "4(x2)", "SLURM_JOB_NUM_NODES": "2",
    })
    assert meta == {"job_id": 42, "array_job_id": 40, "array_task_id": 2, "partition": "gpu",
                    "node_list": "node[01-02]", "ntasks_per_node": "4(x2)", "num_nodes": 2,
                    "submitit_job_id": "40_2"}
    assert slurm_metadata({"PATH": "/bin"}) is None
    assert slurm_metadata({"SLURM_JOB_ID": "7"})["submitit_job_id"] == "7"


def test_sbatch_errors_become_one_line_with_a_fix():
    stderr = ("sbatch: error: invalid partition specified: nosuch\n"
              "sbatch: error: Batch job submission failed: Invalid partition name specified")
    assert one_line(stderr) == "invalid partition specified: nosuch"
    cpus = one_line("sbatch: error: Batch job submission failed: More processors requested"
                    " than permitted")
    assert cpus == "More processors requested than permitted"
    assert "cpus_per_task" in fix_for(cpus)
    assert "gpus_per_node" in fix_for("Invalid generic resource (gres) specification")
    assert "partition" in fix_for("invalid partition specified: nosuch")


def test_total_throughput_is_every_ranks_examples_over_the_slowest_ranks_window():
    """Issue 35: not rank 0's rate x N, nor the sum of the ranks' rates (120 here): the run
    goes as fast as its slowest rank."""
    def steps(step_s: float, n: int) -> list[StepRecord]:
        return [StepRecord(i, step_s, 0.0, 8, warmup=i < 2) for i in range(n)]

    fast, slow = rank_figures(0, steps(0.1, 12)), rank_figures(1, steps(0.2, 12))
    assert fast["measured_steps"] == 10 and fast["examples"] == 80
    assert math.isclose(fast["examples_per_second"], 80.0)
    assert math.isclose(slow["examples_per_second"], 40.0)
    assert math.isclose(total_examples_per_second([fast, slow]), 160 / 2.0)
    assert total_examples_per_second([fast, rank_figures(1, steps(0.1, 2))]) is None


def test_rank_path_names_files_by_rank(tmp_path):
    assert rank_path(tmp_path / "trace.json", 3) == tmp_path / "trace_rank3.json"


def test_signals_interrupt_the_run_and_handlers_are_restored(monkeypatch):
    monkeypatch.delenv("SUBMITIT_PREEMPT_SIGNAL", raising=False)
    assert preemption_signal() == signal.SIGUSR2
    monkeypatch.setenv("SUBMITIT_PREEMPT_SIGNAL", "USR1")
    assert preemption_signal() == signal.SIGUSR1
    monkeypatch.delenv("SUBMITIT_PREEMPT_SIGNAL")

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunInterrupted), stop_on_signals() as state:
        os.kill(os.getpid(), signal.SIGUSR2)
        for _ in range(10**6):  # the handler runs between two bytecodes of this thread
            pass
    assert state.received == "SIGUSR2"
    assert state.reason.startswith("interrupted by SIGUSR2")
    assert signal.getsignal(signal.SIGTERM) is before


def test_new_dir_gives_each_caller_its_own_directory(tmp_path):
    from harness.launch.output_dirs import new_dir

    first, second = new_dir(tmp_path / "12-00-00"), new_dir(tmp_path / "12-00-00")
    assert first == tmp_path / "12-00-00" and second == tmp_path / "12-00-00_2"
    assert first.is_dir() and second.is_dir()
