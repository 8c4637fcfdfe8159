"""The rank > 0 processes of a DDP job (docs/ddp.md, "When a rank fails"): `watch_ranks` replaces
Lightning's observer (which kills the whole process, a sweep's), `end_ranks` waits for them as
their job ends and kills those left, and rank 0 folds how each ended into the point's status."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness.launch.ranks import rank_path
from harness.reports.files import write_json
from harness.result.schema import RunResult

log = logging.getLogger(__name__)
# How a rank > 0 ended its job, written by that rank for rank 0: rank_end_rank<N>.json.
RANK_END_FILE = "rank_end.json"
# How long rank 0 waits for its ranks when their job ended, before it kills them: after a
# failed job a rank failed too (it writes how) or is blocked in a collective for good.
WAIT_AFTER_OK_S, WAIT_AFTER_FAILURE_S = 120.0, 10.0
# Statuses of a job that measured its point (the others failed it).
MEASURED = ("running", "ok", "partial")
# How a rank's error reads when it is the consequence of another rank's end.
_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "DistStoreError",
              "DistNetworkError", "DistBackendError")
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
                if proc.poll() not in (None, 0) and local_rank not in helped:
                    helped.add(local_rank)
                    self._stand_in(local_rank, proc.returncode)

    def _stand_in(self, local_rank: int, returncode: int) -> None:
        node = int(self.environment["NODE_RANK"] or 0)
        rank = node * (len(self.procs) + 1) + local_rank
        log.info("rank %d exited with status %s before the process group formed: a stand-in"
                 " joins in its place so that rank 0 stops waiting", rank, returncode)
        self.stand_ins.append(subprocess.Popen(
            [sys.executable, "-c", _STAND_IN],
            env={**os.environ, **self.environment, "RANK": str(rank)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def end(self) -> None:
        self.stopped.set()
        self.join(timeout=5)
        for stand_in in self.stand_ins:
            stand_in.kill()
            stand_in.wait()


_started: list[subprocess.Popen] = []
_watches: list[_RendezvousWatch] = []


def watch_ranks(child_processes: list[subprocess.Popen]) -> None:
    """In place of Lightning's observer: keep the ranks for end_ranks, watch their rendezvous."""
    _started.extend(child_processes)
    watch = _RendezvousWatch(list(child_processes))
    _watches.append(watch)
    watch.start()


def end_ranks(output_dir: Path, job_failed: bool) -> list[RankEnding]:
    """End the rank > 0 processes of this job and say how each ended: wait (bounded) for each
    to exit (after a failed job: or to write how it ended), kill those left, reap all."""
    for watch in _watches:
        watch.end()
    _watches.clear()
    procs = list(_started)
    _started.clear()
    started = time.monotonic()
    deadline = started + (WAIT_AFTER_FAILURE_S if job_failed else WAIT_AFTER_OK_S)
    killed: set[int] = set()
    # One node: Lightning's launcher starts local ranks 1..N-1, in this order.
    for rank, proc in enumerate(procs, 1):
        ending = rank_path(Path(output_dir) / RANK_END_FILE, rank)
        while proc.poll() is None and time.monotonic() < deadline:
            if job_failed and ending.exists():
                break
            time.sleep(0.1)
        if proc.poll() is None:
            proc.kill()
            killed.add(rank)
        proc.wait()
    if procs:
        log.debug("ranks ended %.1f s after their job (%d killed)", time.monotonic() - started,
                  len(killed))
    return [_ending(Path(output_dir), rank, proc.returncode, rank in killed)
            for rank, proc in enumerate(procs, 1)]


def _ending(output_dir: Path, rank: int, returncode: int, killed: bool) -> RankEnding:
    try:
        written = json.loads(rank_path(output_dir / RANK_END_FILE, rank).read_text())
        return RankEnding(rank, str(written["status"]), written.get("reason"),
                          written.get("error_log"))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if killed:
        return RankEnding(rank, "failed", "did not end with its job; killed")
    if returncode == 0:
        return RankEnding(rank, "ok", None)
    return RankEnding(rank, "failed", f"exited with status {returncode}")


def write_rank_ending(output_dir: Path, rank: int, result: RunResult) -> None:
    """A rank > 0 says how its job ended, for rank 0 (end_ranks)."""
    write_json(rank_path(Path(output_dir) / RANK_END_FILE, rank),
               {"rank": rank, "status": result.status, "reason": result.reason,
                "error_log": result.error_log})


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
    elif own and (result.status in MEASURED or (result.status == "failed"
                                                and _peer_lost(result.reason))):
        taken = own[0]
    if taken is not None:
        result.status, result.reason = taken.status, f"on rank {taken.rank}: {taken.reason}"
        result.error_log = taken.error_log or result.error_log
    for ending in failed:
        log.info("rank %d ended %s: %s", ending.rank, ending.status, ending.reason)


def _peer_lost(reason: str | None) -> bool:
    return reason is not None and any(mark in reason for mark in _PEER_LOST)
