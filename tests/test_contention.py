"""A busy machine, detected and said: a CPU-bound neighbour the test starts makes the phase
`contended`; the rule on fake counters (quiet, busy, oversubscribed by our own threads, a CPU
quota); counters a system lacks read as unknown, never as quiet; DDP ranks count as ours;
other processes on the GPU where NVML tells.

No test asserts that a real run was *not* contended: the machine running the tests may be
busy. Only fake counters are quiet."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FAST, TESTS_DIR, harness_command
from fake_nvml import FakeNvmlProcesses

import harness.contention as contention
from harness.contention import CLK_TCK, CpuWindow, GpuWindow, Snapshot, ours_on_this_host

LINUX = pytest.mark.skipif(not (hasattr(os, "sched_setaffinity") and Path("/proc/stat").exists()),
                           reason="Linux only: affinity and /proc")


def start_neighbour(cpu: int, seconds: float = 300) -> int:
    """A CPU-bound process pinned to `cpu` that is *not* our descendant: the shell starts it in
    the background and exits, so init adopts it (a child of ours would count as our own CPU
    time, as a DataLoader worker does). Returns its PID."""
    burn = (f"import os, time; os.sched_setaffinity(0, {{{cpu}}}); end = time.time() + {seconds}\n"
            "while time.time() < end: pass")
    out = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{burn}" >/dev/null 2>&1 & echo $!'],
                         capture_output=True, text=True, check=True, timeout=30)
    return int(out.stdout.strip())


def stop(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@LINUX
@pytest.mark.slow
def test_a_cpu_bound_neighbour_makes_the_phase_contended(tmp_path):
    cpu = min(os.sched_getaffinity(0))
    neighbour = start_neighbour(cpu)
    try:
        assert str(os.getpid()) not in Path(f"/proc/{neighbour}/stat").read_text().split()[3:4]
        time.sleep(0.5)
        # the run may use one CPU, the one the neighbour burns
        done = subprocess.run(
            [*harness_command(), *FAST, "mode=train", "profiler=[speed]",
             "data.train_batches=40", "profiler.speed.warmup_steps=2"],
            cwd=tmp_path, capture_output=True, text=True, timeout=600,
            env={**os.environ, "PYTHONPATH": str(TESTS_DIR)},
            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    finally:
        stop(neighbour)
    assert done.returncode == 0, done.stderr[-3000:]
    (result_file,) = tmp_path.rglob("result.json")
    result = json.loads(result_file.read_text())
    metrics = result["metrics"]
    assert "contended:train" in result["flags"], metrics
    assert metrics["train_run_delay_share"] > 0.10 and metrics["train_other_cpu_share"] > 0.10
    speed = json.loads((result_file.parent / "reports" / "speed.json").read_text())
    found = speed["phases"]["train"]["contention"]
    assert found["cpus"] == 1 and found["contended"] is True and found["basis"] == "cpu"
    # one line beside the speed table: what was measured, and the fix
    (line,) = [x for x in done.stderr.splitlines() if "train was contended" in x]
    assert "of the 1 CPU(s) this run may use" in line and "Fix: rerun" in line
    assert "contended:train" in line


@LINUX
def test_a_neighbour_on_our_cpu_is_seen_in_process(tmp_path):
    """The same, in-process, on the window itself: a second of busy work beside the neighbour."""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    neighbour = start_neighbour(cpu, seconds=60)
    try:
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.3)
        window = CpuWindow()
        window.open()
        end = time.perf_counter() + 1.5
        while time.perf_counter() < end:
            pass
        window.close()
        found = window.figures(0.10)
    finally:
        os.sched_setaffinity(0, before)
        stop(neighbour)
    assert found["cpus"] == 1 and found["segments"] == 1
    assert found["contended"] is True
    assert found["run_delay_share"] > 0.10 and found["other_cpu_share"] > 0.10


def _figures(busy_s: float, own_s: float, ran_s: float | None, waited_s: float | None,
             wall: float = 10.0, cpus: int = 2, ticks: bool = True, above: float = 0.10) -> dict:
    """A window's figures from counters planted at its two ends."""
    sched = None if ran_s is None else (int(ran_s * 1e9), int(waited_s * 1e9))
    window = CpuWindow(cpus=set(range(cpus)))
    window.totals.add(Snapshot(0.0, (0, 0) if ticks else None, 0.0, (0, 0) if sched else None),
                      Snapshot(wall, (int(busy_s * CLK_TCK), 0) if ticks else None, own_s, sched))
    return window.figures(above)


def test_the_rule_quiet_busy_oversubscribed_and_a_quota(monkeypatch):
    monkeypatch.setattr(contention, "quota_cpus", lambda: None)
    quiet = _figures(busy_s=19.6, own_s=19.4, ran_s=19.4, waited_s=0.2)  # 1% waited
    assert quiet["other_cpu_share"] < 0.02 and quiet["contended"] is False
    busy = _figures(busy_s=20.0, own_s=10.0, ran_s=10.0, waited_s=10.0)  # a neighbour: half
    assert busy["other_cpu_share"] == 0.5 and busy["run_delay_share"] == 0.5
    assert busy["contended"] is True
    # our own threads oversubscribe the CPUs: we wait, but nobody else used them
    own = _figures(busy_s=20.0, own_s=19.9, ran_s=19.9, waited_s=8.0)
    assert own["run_delay_share"] > 0.2 and own["contended"] is False
    # the threshold is the option's
    assert _figures(busy_s=20.0, own_s=10.0, ran_s=10.0, waited_s=10.0, above=0.6)[
        "contended"] is False
    # a CFS quota below the visible CPUs: /proc/stat's idle time is not ours, our waiting is
    monkeypatch.setattr(contention, "quota_cpus", lambda: 1.0)
    capped = _figures(busy_s=20.0, own_s=9.0, ran_s=9.0, waited_s=3.0)
    assert capped["basis"] == "run_delay" and capped["cpus"] == 1 and capped["contended"] is True


def test_missing_counters_are_unknown_never_quiet(monkeypatch):
    monkeypatch.setattr(contention, "quota_cpus", lambda: None)
    no_schedstat = _figures(busy_s=20.0, own_s=10.0, ran_s=None, waited_s=None)
    assert no_schedstat["run_delay_share"] is None and no_schedstat["contended"] is None
    assert no_schedstat["unknown"] == ["/proc/self/task/*/schedstat"]
    # what the counters it has do show still counts: nobody else used the CPUs
    assert _figures(busy_s=19.6, own_s=19.5, ran_s=None, waited_s=None)["contended"] is False
    no_stat = _figures(busy_s=0, own_s=5.0, ran_s=5.0, waited_s=5.0, ticks=False)
    assert no_stat["other_cpu_share"] is None and no_stat["contended"] is None
    assert no_stat["unknown"] == ["/proc/stat"]


def test_a_system_without_schedstat_is_said_once_and_flags_nothing(monkeypatch, capsys):
    from harness.profilers.speed_flags import Cautions

    monkeypatch.setattr(contention, "quota_cpus", lambda: None)
    unknown = _figures(busy_s=20.0, own_s=10.0, ran_s=None, waited_s=None)
    phase = {"measured_steps": 20, "warmup_steps": 5, "thin": False, "noisy": False,
             "contention": unknown}
    flags = Cautions(5, 10, 0.10, 0.25, 1.5).flags({"train": phase, "inference": dict(phase)})
    assert flags == []
    lines = [x for x in capsys.readouterr().err.splitlines() if "not fully measured" in x]
    assert len(lines) == 1 and "/proc/self/task/*/schedstat" in lines[0], lines


def test_the_snapshot_reads_real_counters_here():
    """Where the counters exist (Linux), a window over our own busy loop has both shares."""
    if not Path("/proc/self/task").is_dir():
        pytest.skip("no /proc")
    window = CpuWindow()
    window.open()
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:
        pass
    window.close()
    found = window.figures(0.10)
    assert found["own_cpu_s"] > 0 and found["window_s"] >= 0.3
    assert 0 <= found["other_cpu_share"] <= 1 and 0 <= found["run_delay_share"] <= 1


def test_ddp_ranks_on_this_host_are_ours_each_counted_once():
    rank0 = {"host": "a", "pid": 100, "own_s": 30.0, "tree": [101, 102]}  # 101: rank 1 (child)
    rank1 = {"host": "a", "pid": 101, "own_s": 14.0, "tree": []}
    # Lightning's launcher: rank 1 is rank 0's child, already in rank 0's tree
    assert ours_on_this_host(rank0, [rank0, rank1]) == 30.0
    # torchrun: siblings, each its own tree; a rank on another host is not on our CPUs
    rank1_sibling = {**rank1, "pid": 200}
    elsewhere = {"host": "b", "pid": 100, "own_s": 50.0, "tree": []}
    assert ours_on_this_host(rank0, [rank0, rank1_sibling, elsewhere]) == 44.0


def test_nvml_names_other_processes_and_their_sm_share():
    me, other = os.getpid(), 4242
    clock = [1_000]
    nv = FakeNvmlProcesses([me, other], {me: 60, other: 35}, clock)
    window = GpuWindow(nv, nv.nvmlDeviceGetHandleByIndex(0), clock_us=lambda: clock[0])
    window.open()
    for _ in range(5):
        clock[0] += 100_000
        window.read()
    window.close()
    found = window.figures(0.10)
    assert found["gpu_other_processes"] == 1
    assert found["gpu_other_sm_share"] == pytest.approx(0.35)
    assert found["gpu_contended"] is True and found["gpu_shared"] is True


def test_in_a_container_nvml_pids_are_the_hosts_so_others_are_counted_not_measured():
    clock = [1_000]
    nv = FakeNvmlProcesses([91_001, 91_002], None, clock)  # host PIDs, no per-process util
    window = GpuWindow(nv, nv.nvmlDeviceGetHandleByIndex(0), clock_us=lambda: clock[0])
    window.open()
    window.close()
    found = window.figures(0.10)
    assert found["gpu_other_processes"] == 1 and found["gpu_shared"] is True
    assert found["gpu_other_sm_share"] is None and found["gpu_contended"] is None
    assert found["gpu_util_per_process"] is False


def test_alone_on_the_gpu_is_not_contended():
    clock = [1_000]
    nv = FakeNvmlProcesses([os.getpid()], {os.getpid(): 95}, clock)
    window = GpuWindow(nv, nv.nvmlDeviceGetHandleByIndex(0), clock_us=lambda: clock[0])
    window.open()
    clock[0] += 100_000
    window.close()
    found = window.figures(0.10)
    assert found["gpu_other_processes"] == 0 and found["gpu_other_sm_share"] == 0.0
    assert found["gpu_contended"] is False and found["gpu_shared"] is False
