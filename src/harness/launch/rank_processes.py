"""The rank > 0 processes of a DDP job (docs/ddp.md, "When a rank fails"): `watch_ranks` replaces
Lightning's observer (which kills the whole process, a sweep's), `end_ranks` waits for them as
their job ends and kills those left, and rank 0 folds how each ended into the point's status.
A rank lost mid-run (SIGKILLed: an OOM killer, a preempted node) is named with its node."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.launch.ranks import rank_path
from harness.reports.files import write_json
from harness.result.schema import RunResult

log = logging.getLogger(__name__)
# How a rank > 0 ended its job, written by that rank for rank 0: rank_end_rank<N>.json; `running`
# (with its node) from its start, so that one still running at its job's end was lost mid-run.
RANK_END_FILE = "rank_end.json"
# How long rank 0 waits for its ranks when their job ended, before it kills them: after a
# failed job a rank failed too (it writes how) or is blocked in a collective for good.
WAIT_AFTER_OK_S, WAIT_AFTER_FAILURE_S = 120.0, 10.0
# Statuses of a job that measured its point (the others failed it).
MEASURED = ("running", "ok", "partial")
# How a rank's error reads when it is the consequence of another rank's end (gloo's last two:
# the process group's timeout ran out waiting for a hung rank).
_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "DistStoreError",
              "DistNetworkError", "DistBackendError", "Timed out waiting", "Application timeout")
# Joins the process group in place of a rank that exited before it formed, then exits: rank 0
# gets out of init_process_group, and its first collective fails at once, not after 30 min.
_STAND_IN = ("import datetime, os, torch.distributed as d;"
             " d.init_process_group('gloo', rank=int(os.environ['RANK']),"
             " world_size=int(os.environ['WORLD_SIZE']), timeout=datetime.timedelta(seconds=60));"
             " os._exit(1)")


@dataclass
class RankEnding:
    """How one rank > 0 ended its job: from its rank_end file, else from its exit status."""

    rank: int
    status: str
    reason: str | None
    error_log: str | None = None
    lost: bool = False  # ended without a word (killed, its node gone): `reason` names rank and node


class _RendezvousWatch(threading.Thread):
    """Until this process's group forms: a rank that exits non-zero gets a stand-in. Once
    the group is up, a collective whose peer exited fails by itself, and the watch ends."""

    def __init__(self, procs: list[subprocess.Popen]) -> None:
        super().__init__(daemon=True, name="harness-rendezvous-watch")
        self.procs, self.stopped = procs, threading.Event()
        self.stand_ins: list[subprocess.Popen] = []
        # Lightning put the group's address in this process's environment as it started them.
        self.environment = {name: os.environ.get(name, "") for name in
                            ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK")}

    def run(self) -> None:
        import torch.distributed as dist

        helped: set[int] = set()
        while not self.stopped.wait(0.5):
            if dist.is_available() and dist.is_initialized():
                return
            for local_rank, proc in enumerate(self.procs, 1):
                if proc.poll() in (None, 0) or local_rank in helped:
                    continue
                helped.add(local_rank)
                rank = int(self.environment["NODE_RANK"] or 0) * (len(self.procs) + 1) + local_rank
                log.info("rank %d exited with status %s before the process group formed: a stand-in"
                         " joins in its place so that rank 0 stops waiting", rank, proc.returncode)
                self.stand_ins.append(subprocess.Popen(
                    [sys.executable, "-c", _STAND_IN], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    env={**os.environ, **self.environment, "RANK": str(rank)}))

    def end(self) -> None:
        self.stopped.set()
        self.join(timeout=5)
        for stand_in in self.stand_ins:
            stand_in.kill()
            stand_in.wait()


_watches: list[_RendezvousWatch] = []  # this job's: each holds the ranks it watches
# This job's world size (start_ranks): ranks beyond the watched ones were started elsewhere (by
# srun, on another node), and rank 0 hears of them through their files only.
_world_size = 1


def watch_ranks(child_processes: list[subprocess.Popen]) -> None:
    """In place of Lightning's observer: keep the ranks for end_ranks, watch their rendezvous."""
    watch = _RendezvousWatch(list(child_processes))
    _watches.append(watch)
    watch.start()


def start_ranks(output_dir: Path, rank: int, world_size: int) -> None:
    """As a DDP job's fit starts: rank 0 learns how many ranks to hear from; a rank > 0 says
    where it runs (its ending replaces that)."""
    global _world_size
    _world_size = world_size
    if rank > 0:
        write_rank_ending(output_dir, rank, RunResult(status="running"))


def end_ranks(output_dir: Path, job_failed: bool) -> list[RankEnding]:
    """End the rank > 0 processes of this job and say how each ended: wait (bounded) for each
    to exit (after a failed job: or to write how it ended), kill those left, reap all. A rank
    this process did not start (srun's, another node's) is waited for its ending only."""
    global _world_size
    for watch in _watches:
        watch.end()
    procs = [proc for watch in _watches for proc in watch.procs]
    elsewhere = range(len(procs) + 1, _world_size)
    _watches.clear()
    _world_size = 1
    started = time.monotonic()
    deadline = started + (WAIT_AFTER_FAILURE_S if job_failed else WAIT_AFTER_OK_S)
    endings = []
    # One node: Lightning's launcher starts local ranks 1..N-1, in this order.
    for rank, proc in enumerate(procs, 1):
        while proc.poll() is None and time.monotonic() < deadline:
            if job_failed and _written(output_dir, rank):
                break
            time.sleep(0.1)
        killed = proc.poll() is None
        if killed:
            proc.kill()
        proc.wait()
        endings.append(_ending(output_dir, rank, proc.returncode, killed))
    for rank in elsewhere:
        while not _written(output_dir, rank) and time.monotonic() < deadline:
            time.sleep(0.1)
        endings.append(_ending(output_dir, rank, None, False))
    if procs or elsewhere:
        log.debug("ranks ended %.1f s after their job (%d killed)", time.monotonic() - started,
                  sum(e.reason == _KILLED for e in endings))
    return endings


_KILLED = "did not end with its job; killed"


def _read(output_dir: Path, rank: int) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        written = json.loads(rank_path(output_dir / RANK_END_FILE, rank).read_text())
        if isinstance(written, dict):
            return written
    return {}


def _written(output_dir: Path, rank: int) -> bool:
    """Whether rank `rank` wrote how its job ended (not only that it runs)."""
    return _read(output_dir, rank).get("status", "running") != "running"


def _ending(output_dir: Path, rank: int, returncode: int | None, killed: bool) -> RankEnding:
    """`returncode` None: a rank another process started, known by its file alone."""
    written = _read(output_dir, rank)
    if written.get("status", "running") != "running":
        return RankEnding(rank, str(written["status"]), written.get("reason"), written.get("error_log"))
    if killed:
        return RankEnding(rank, "failed", _KILLED)
    if returncode == 0:
        return RankEnding(rank, "ok", None)
    if returncode is not None and returncode > 0:
        return RankEnding(rank, "failed", f"exited with status {returncode}")
    # Killed by a signal, or gone without a word: its node from what it wrote as it started.
    node = written.get("node") or (socket.gethostname() if returncode is not None else "unknown")
    if returncode is None:
        how = "was lost mid-run without a word (killed by an OOM killer or a preempted node, or hung?)"
    else:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:  # a signal the enum does not list (a real-time one)
            name = f"signal {-returncode}"
        how = f"was killed by {name} mid-run" + (
            " (an OOM killer or a preempted node?)" if returncode == -signal.SIGKILL else "")
    return RankEnding(rank, "failed", f"rank {rank} (node {node}) {how}", lost=True)


def write_rank_ending(output_dir: Path, rank: int, result: RunResult) -> None:
    """A rank > 0 says how its job ended, for rank 0 (end_ranks)."""
    write_json(rank_path(Path(output_dir) / RANK_END_FILE, rank),
               {"rank": rank, "status": result.status, "reason": result.reason,
                "error_log": result.error_log, "node": socket.gethostname()})


def merge_rank_endings(result: RunResult, endings: list[RankEnding]) -> None:
    """The point's status from every rank: an OOM on any rank is the point's; a rank's own
    failure fails a point rank 0 measured, or replaces rank 0's echo of it."""
    failed = [e for e in endings if e.status not in ("ok", "running")]
    if not failed:
        return
    oom = next((e for e in failed if e.status == "oom"), None)
    own = [e for e in failed if not _peer_lost(e.reason)]
    taken = None
    if oom is not None and result.status != "oom":
        taken = oom
    elif own and (result.status in MEASURED or (result.status == "failed" and _peer_lost(result.reason))):
        taken = own[0]
    if taken is not None:
        result.status = taken.status
        result.reason = taken.reason if taken.lost else f"on rank {taken.rank}: {taken.reason}"
        result.error_log = taken.error_log or result.error_log
    for ending in failed:
        log.info("rank %d ended %s: %s", ending.rank, ending.status, ending.reason)


def _peer_lost(reason: str | None) -> bool:
    return reason is not None and any(mark in reason for mark in _PEER_LOST)
