"""Who else used the machine while a phase was measured (docs/presets/speed.md#who-else-used-the-machine):
`CpuWindow` over /proc, `GpuWindow` over NVML. A counter this system lacks makes its share and the
verdict None (unknown), never a false "quiet"."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
COUNTERS = {"cpu": "/proc/stat", "run_delay": "/proc/self/task/*/schedstat"}


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode()
    except OSError:
        return None


def affinity() -> set[int] | None:
    """The CPUs this process may run on, None where the OS does not tell."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def cpu_ticks(cpus: set[int]) -> tuple[int, int] | None:
    """(busy, steal) ticks over `cpus` from /proc/stat (busy: user+nice+system+irq+softirq)."""
    text = _read("/proc/stat")
    if text is None:
        return None
    busy = steal = seen = 0
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *values = line.split()
        if int(name[3:]) not in cpus:
            continue
        v = [int(x) for x in values] + [0] * 8
        busy += v[0] + v[1] + v[2] + v[5] + v[6]
        steal += v[7]
        seen += 1
    return (busy, steal) if seen else None


def _process_cpu_s(pid: int) -> float:
    """utime + stime of a live process (its reaped children are in its parent's os.times())."""
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return 0.0
    fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _descendants() -> list[int] | None:
    """PIDs of this process's live descendants, None without CONFIG_PROC_CHILDREN."""
    found: list[int] = []
    pending: list[int | str] = ["self"]
    while pending:
        pid = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # the process is gone
        for tid in tasks:
            text = _read(f"/proc/{pid}/task/{tid}/children")
            if text is None:
                if os.path.exists(f"/proc/{pid}/task/{tid}"):
                    return None  # the thread is there, its children file is not
                continue
            children = [int(x) for x in text.split()]
            found += children
            pending += children
    return found


def run_delay() -> tuple[int, int] | None:
    """(ns run, ns waited while runnable) over this process's threads; None without schedstat."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    pairs = [text.split() for tid in tasks if (text := _read(f"/proc/self/task/{tid}/schedstat"))]
    return (sum(int(p[0]) for p in pairs), sum(int(p[1]) for p in pairs)) if pairs else None


def quota_cpus() -> float | None:
    """CPUs a CFS quota (cgroup v1 or v2) allows this process: the tightest of its cgroups' and
    their ancestors'; None without one."""
    quotas = []
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            root = Path("/sys/fs/cgroup")  # v2 (unified)
        elif "cpu" in controllers.split(","):
            root = Path("/sys/fs/cgroup") / controllers  # v1
            if not root.exists():
                root = Path("/sys/fs/cgroup/cpu")
        else:
            continue
        here = root / path.lstrip("/")
        for directory in [here, *here.parents[:len(here.parts) - len(root.parts)]]:
            v2 = _read(str(directory / "cpu.max"))
            if v2:
                quota, period = (v2.split() + ["100000"])[:2]
                if quota != "max":
                    quotas.append(int(quota) / int(period))
                continue
            quota_us = _read(str(directory / "cpu.cfs_quota_us"))
            period_us = _read(str(directory / "cpu.cfs_period_us"))
            if quota_us and period_us and int(quota_us) > 0:
                quotas.append(int(quota_us) / int(period_us))
    return min(quotas) if quotas else None


@dataclass(frozen=True)
class Snapshot:
    wall: float  # time.monotonic()
    ticks: tuple[int, int] | None  # (busy, steal) over our CPUs; None: no /proc/stat
    own_s: float  # CPU seconds of this process tree, reaped children included
    sched: tuple[int, int] | None  # (ns ran, ns waited) over our threads; None: no schedstat
    tree: frozenset[int] = frozenset()  # live descendants at this moment


def snapshot(cpus: set[int] | None) -> Snapshot:
    times = os.times()
    own = times.user + times.system + times.children_user + times.children_system
    tree = _descendants()
    if tree is None:  # psutil lists every process on the machine to find ours: slower
        import psutil

        tree = [child.pid for child in psutil.Process().children(recursive=True)]
    own += sum(_process_cpu_s(pid) for pid in tree)
    return Snapshot(time.monotonic(), cpu_ticks(cpus) if cpus else None, own, run_delay(), frozenset(tree))


def _grown(total: tuple[int, ...] | None, a: tuple[int, int] | None, b: tuple[int, int] | None
           ) -> tuple[int, ...] | None:
    """`total` plus b - a, counter by counter; None once a side lacked the counters."""
    if total is None or a is None or b is None:
        return None
    return tuple(t + y - x for t, x, y in zip(total, a, b, strict=True))


@dataclass
class Totals:
    """The counters' differences summed over a window's closed segments."""

    wall_s: float = 0.0
    own_s: float = 0.0
    ticks: tuple[int, ...] | None = (0, 0)  # (busy, steal) ticks; None once a segment lacked /proc/stat
    sched: tuple[int, ...] | None = (0, 0)  # (ns ran, ns waited); None once a segment lacked schedstat
    segments: int = 0
    tree: set[int] = field(default_factory=set)  # every descendant seen

    def add(self, a: Snapshot, b: Snapshot) -> None:
        self.wall_s += b.wall - a.wall
        self.own_s += b.own_s - a.own_s
        self.ticks, self.sched = _grown(self.ticks, a.ticks, b.ticks), _grown(self.sched, a.sched, b.sched)
        self.segments += 1
        self.tree |= a.tree | b.tree


class CpuWindow:
    """A measured window's contention: `open()` when measured steps start, `close()` after."""

    def __init__(self, cpus: set[int] | None = None) -> None:
        self.cpus = cpus if cpus is not None else affinity()
        self.totals = Totals()
        self._open: Snapshot | None = None

    def open(self) -> None:
        if self._open is None:
            self._open = snapshot(self.cpus)

    def close(self) -> None:
        if self._open is not None:
            self.totals.add(self._open, snapshot(self.cpus))
            self._open = None

    def own(self) -> dict[str, Any]:
        """What another rank needs to count this process as ours (gathered under DDP)."""
        return {"host": os.uname().nodename if hasattr(os, "uname") else None,
                "pid": os.getpid(), "own_s": self.totals.own_s, "tree": sorted(self.totals.tree)}

    def figures(self, above: float, ranks: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
        """The window's shares and verdict, None when no segment closed; `ranks`' `own()` are ours."""
        t = self.totals
        if t.segments == 0 or t.wall_s <= 0:
            return None
        visible = len(self.cpus) if self.cpus else None
        quota = quota_cpus()
        cpus = min(visible, quota) if visible and quota else (visible or quota)
        own_s = ours_on_this_host(self.own(), ranks) if ranks else t.own_s
        other = steal = None
        if t.ticks is not None and visible:
            busy_s, steal_s = (ticks / CLK_TCK for ticks in t.ticks)
            other = min((max(busy_s - own_s, 0.0) + steal_s) / (t.wall_s * visible), 1.0)
            steal = steal_s / (t.wall_s * visible)
        runnable = sum(t.sched or ())
        found: dict[str, Any] = {
            "window_s": t.wall_s, "segments": t.segments, "cpus": cpus, "cpus_visible": visible,
            "quota_cpus": quota, "own_cpu_s": own_s,
            "own_cpu_share": own_s / (t.wall_s * cpus) if cpus else None, "other_cpu_share": other,
            "steal_share": steal,
            "run_delay_share": t.sched[1] / runnable if t.sched is not None and runnable > 0 else None,
            "basis": "run_delay" if quota and visible and quota < visible else "cpu",
            "contended_above": above}
        found["contended"] = contended(found, above)
        found["unknown"] = [COUNTERS[name] for name, total in (("cpu", t.ticks), ("run_delay", t.sched))
                            if total is None]
        return found


def ours_on_this_host(mine: dict[str, Any], ranks: list[dict[str, Any]]) -> float:
    """CPU seconds of every rank's process tree on this host, a child rank's counted once."""
    here = [r for r in ranks if r.get("host") == mine.get("host")]
    inside = {pid for r in here for pid in r.get("tree", ())}
    roots = [r for r in here if r.get("pid") not in inside]
    return float(sum(r.get("own_s", 0.0) for r in roots))


def contended(found: dict[str, Any], above: float) -> bool | None:
    """Both shares above `above` (waiting while nobody else ran is our own oversubscription);
    on the run_delay basis (a CFS quota) the wait alone. None: a counter is missing."""
    delay, other = found.get("run_delay_share"), found.get("other_cpu_share")
    waited = None if delay is None else delay > above
    if found.get("basis") == "run_delay":
        return waited
    used = None if other is None else other > above
    if waited is False or used is False:
        return False
    return True if waited and used else None


@dataclass
class GpuWindow:
    """Other processes on one GPU over a window, from NVML: `open()`/`close()` at a segment's ends, `read()`
    between (few samples kept); in a container, processes beyond our one (one rank per GPU) are others."""

    nvml: Any
    handle: Any
    own_pids: set[int] = field(default_factory=lambda: {os.getpid()})
    clock_us: Any = field(default=lambda: int(time.time() * 1e6))
    most_processes: int = 0
    pids_seen: set[int] = field(default_factory=set)
    samples: dict[tuple[int, int], int] = field(default_factory=dict)  # (pid, t_us) -> SM %
    util_supported: bool | None = None
    _last_us: int = 0

    def open(self) -> None:
        self.read(keep=False)  # samples from before the segment are dropped

    def close(self) -> None:
        self.read()

    def read(self, keep: bool = True) -> None:
        """The processes on the device now, and (`keep`) the SM samples since the last read."""
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except Exception:  # NVMLError: NotSupported, ...: unknown
            procs = None
        if procs is not None:
            pids = {int(p.pid) for p in procs}
            self.most_processes = max(self.most_processes, len(pids))
            self.pids_seen |= pids
        if not self._last_us:
            self._last_us = self.clock_us()
        now = self.clock_us()
        try:
            util = self.nvml.nvmlDeviceGetProcessUtilization(self.handle, self._last_us)
        except Exception as err:  # NotFound: supported, only no sample since the timestamp
            if self.util_supported is None:
                self.util_supported = "not found" in str(err).lower()
        else:
            self.util_supported = True
            for s in util if keep else ():
                if int(s.timeStamp) > self._last_us:
                    self.samples[(int(s.pid), int(s.timeStamp))] = int(s.smUtil)
        self._last_us = now

    def figures(self, above: float) -> dict[str, Any]:
        # Our namespace's PIDs: NVML names processes as we see them, and the others by PID.
        named = bool(self.pids_seen & self.own_pids) or any(pid in self.own_pids for pid, _ in self.samples)
        ticks = {t for _, t in self.samples}
        share = None
        if named and ticks:
            other = sum(sm for (pid, _), sm in self.samples.items() if pid not in self.own_pids)
            share = other / 100 / len(ticks)
        others = len(self.pids_seen - self.own_pids) if named else max(self.most_processes - 1, 0)
        return {"gpu_other_processes": others, "gpu_other_sm_share": share,
                "gpu_util_per_process": self.util_supported,
                "gpu_contended": None if share is None else share > above, "gpu_shared": others > 0}
