"""Where each rank's optimizer steps go, and who waits for whom, from durations alone: the
method is docs/presets/scaling.md, "How it times a rank". One per run, registered once for the
presets that need it (RunShared.rank_timer)."""

# No `from __future__ import annotations`: DDP checks a hook's annotations as objects.
import socket
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from typing_extensions import override

from harness import private_api
from harness.profilers import step_timer
from harness.profilers.all_ranks import gather

PARTS = ("data", "forward", "backward", "optimizer")  # where a late rank's time went


@dataclass
class StepRecord:
    """One optimizer step on one rank, seconds (its micro-batches summed)."""

    wall: float = 0.0  # from the previous optimizer step's end to this one's
    data: float = 0.0  # waiting for batches: the loader and the transfer
    forward: float = 0.0
    backward: float = 0.0  # backward's own work, up to its last gradient bucket
    optimizer: float = 0.0
    blocked: float = 0.0  # in the allreduce not hidden by backward (the hook's own work included)
    broadcast: float = 0.0  # in Lightning's per-batch broadcasts
    comm_busy: float = 0.0  # the allreduce's buckets in flight (their calls to completions)
    bytes: int = 0  # gradient bytes the buckets carried into the allreduce


@dataclass
class BucketCall:
    called: float
    returned: float  # the hook's own work in the backward thread ends (a user's may take long)
    completed: float | None  # its future completed (None: not yet)
    bytes: int


class CommTimer:
    """A DDP communication hook around another (DDP's allreduce, or the user's): the time of each
    bucket's call, return and completion, and its bytes. Completions come on the backend's
    threads."""

    def __init__(self) -> None:
        self.inner: tuple[Callable[..., Any], Any] | None = None  # (hook, state)
        self.calls: list[BucketCall] = []
        self.lock = threading.Lock()

    def hook(self, _: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """DDP's hook: `inner`'s (DDP's allreduce where the run registered none), timed."""
        hook, state = self.inner or (default_hooks.allreduce_hook, None)
        buffer = bucket.buffer()
        call = BucketCall(time.perf_counter(), 0.0, None, buffer.numel() * buffer.element_size())
        future = hook(state, bucket)
        call.returned = time.perf_counter()
        with self.lock:
            self.calls.append(call)

        def done(finished: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            call.completed = time.perf_counter()
            return finished.value()

        return future.then(done)

    def take(self) -> list[BucketCall]:
        with self.lock:
            calls, self.calls = self.calls, []
        return calls


def in_flight(calls: list[BucketCall], until: float) -> float:
    """Seconds some bucket was in flight (the union of their call-to-completion intervals)."""
    total, reached = 0.0, float("-inf")
    for start, end in sorted((c.called, c.completed or until) for c in calls):
        total += max(0.0, end - max(start, reached))
        reached = max(reached, end)
    return total


class RankTimer(Callback):
    """Records this rank's StepRecords over the fit; `ranks` holds every rank's after it."""

    def __init__(self, single_process: bool = False) -> None:
        self.single_process = single_process  # also time a run of one process (the scaling study)
        self.on = False  # timing this fit: several ranks, or single_process
        self.accumulation = 1  # batches an optimizer step takes
        self.steps: list[StepRecord] = []
        self.ranks: list[dict[str, Any]] = []  # per rank: its node and steps (after the fit)
        self.comm = CommTimer()
        self.hook_names: list[str] = []  # the hooks the run registered, in order
        self._unpatch: Callable[[], None] | None = None
        self._ensure: Callable[[Any], None] | None = None
        self._current: StepRecord | None = None
        self._mark = self._backward_at = self._optimizer_at = 0.0
        self._broadcasts: list[tuple[float, float]] = []

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self.on = trainer.world_size > 1 or self.single_process
        if trainer.world_size > 1:  # before Lightning wraps the model in DDP
            self._ensure, self._unpatch = private_api.route_comm_hooks(self.comm, self.hook_names.append)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._unpatch is not None:
            self._unpatch()
            self._unpatch = None

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._ensure is not None:
            private_api.time_batch_broadcast(trainer, self._broadcasts.append)
            self._ensure(trainer.strategy.model)
        self.accumulation = trainer.accumulate_grad_batches
        self.on_train_epoch_start(trainer)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        """A step's data wait starts here, not before the loader restarted or validation ran."""
        if self.on:
            self._mark = self._now(trainer)

    on_validation_end = on_train_epoch_start

    def _now(self, trainer: pl.Trainer) -> float | None:
        """The host clock after the device's queued work (a step's parts are the device's); None,
        without waiting for the device, when this fit is not timed."""
        return step_timer.now(trainer.strategy.root_device) if self.on else None

    def measured_from(self, warmup_batches: int) -> int:
        """The first optimizer step past the speed preset's warm-up of `warmup_batches` batches."""
        return -(-warmup_batches // self.accumulation)

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if (now := self._now(trainer)) is None:
            return
        step = self._current = self._current or StepRecord()
        waited = sum(end - start for start, end in self._broadcasts if start >= self._mark)
        self._broadcasts.clear()  # each is counted in the gap it ran in
        step.broadcast += waited
        step.data += now - self._mark - waited
        self._mark = now

    @override
    def on_before_backward(self, trainer: pl.Trainer, *_: Any) -> None:
        if (now := self._now(trainer)) is None:
            return
        if self._current is not None:
            self._current.forward += now - self._mark
        self._backward_at = self._mark = now

    @override
    def on_after_backward(self, trainer: pl.Trainer, *_: Any) -> None:
        step, calls = self._current, self.comm.take()
        if step is None or (now := self._now(trainer)) is None:
            return
        if calls:  # the micro-batch that synchronised: backward's own work ends at its last bucket
            last = max(c.called for c in calls)
            in_hooks = sum(c.returned - c.called for c in calls if c.called < last)
            step.backward += last - self._backward_at - in_hooks
            step.blocked += now - last + in_hooks
            step.comm_busy += in_flight(calls, now)
            step.bytes += sum(c.bytes for c in calls)
        else:  # an accumulation micro-batch (no_sync), or no DDP
            step.backward += now - self._backward_at
        self._mark = now

    @override
    def on_before_optimizer_step(self, trainer: pl.Trainer, *_: Any) -> None:
        self._optimizer_at = self._now(trainer) or 0.0  # 0.0: none timed

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        step = self._current
        if step is None or not self._optimizer_at:  # not timing, or an accumulation micro-batch
            return
        now = self._now(trainer)
        step.optimizer = now - self._optimizer_at
        step.wall = step.data + step.forward + step.backward + step.blocked + step.broadcast + (
            now - self._mark)  # the optimizer and what Lightning did around it
        self.steps.append(step)
        self._current, self._optimizer_at, self._mark = None, 0.0, now

    @override
    def on_train_end(self, trainer: pl.Trainer, *_: Any) -> None:
        if self.on:
            self.ranks = gather({"node": socket.gethostname(), "steps": [asdict(s) for s in self.steps],
                                 "hooks": self.hook_names})


@dataclass
class Breakdown:
    """Every rank's step parts and what they say across ranks, seconds per optimizer step
    (medians over the measured steps)."""

    ranks: list[dict[str, Any]]  # rank, node, compute_s, comm_s, data_wait_s, straggler_wait_s
    straggler: dict[str, Any] | None  # rank, node, wait_s, late_in; None: nobody beyond noise
    comm: dict[str, Any] | None  # bytes_per_step, time_s, algbw/busbw_bytes_per_s, share
    step_s: float  # the median wall time of an optimizer step
    steps: int  # measured steps the medians are over


def breakdown(ranks: list[dict[str, Any]], skip: int, late_above: float) -> Breakdown | None:
    """The gathered records read across ranks, after `skip` warm-up steps; a rank is named late
    when its own work exceeds every other's by more than `late_above` of the median step."""
    steps = min((len(r["steps"]) for r in ranks), default=0)
    measured = range(min(skip, max(steps - 1, 0)), steps)
    if not measured:
        return None
    rows = [[StepRecord(**r["steps"][i]) for r in ranks] for i in measured]
    # The collectives' own cost, each collective's least apart: the rank late to the broadcast
    # may not be the one late to the allreduce, and the least of their sum would hold a wait.
    cost = [min(s.blocked for s in row) + min(s.broadcast for s in row) for row in rows]
    busy = [[s.wall - s.blocked - s.broadcast for s in row] for row in rows]  # each rank's own work

    def median(values: list[float]) -> float:
        return float(statistics.median(values))

    figures = []
    for n, rank in enumerate(ranks):
        figures.append({
            "rank": n, "node": rank["node"],
            "compute_s": median([row[n].wall - row[n].data - row[n].blocked - row[n].broadcast
                                 for row in rows]),
            "comm_s": median(cost), "data_wait_s": median([row[n].data for row in rows]),
            "straggler_wait_s": median([row[n].blocked + row[n].broadcast - c
                                        for row, c in zip(rows, cost, strict=True)]),
        })
    step_s = median([max(s.wall for s in row) for row in rows])
    late = [median([b[n] - min(b) for b in busy]) for n in range(len(ranks))]
    order = sorted(range(len(ranks)), key=lambda n: -late[n])
    straggler = None
    if len(ranks) > 1 and late[order[0]] - late[order[1]] > late_above * step_s:
        n = order[0]
        excess = {part: median([getattr(row[n], part) - median(
            [getattr(s, part) for k, s in enumerate(row) if k != n]) for row in rows])
            for part in PARTS}
        straggler = {"rank": n, "node": ranks[n]["node"], "wait_s": late[n] - late[order[1]],
                     "late_in": max(excess, key=lambda part: excess[part])}
    return Breakdown(figures, straggler, _comm(rows, len(ranks), median(cost), step_s), step_s, len(rows))


def _comm(rows: list[list[StepRecord]], world: int, exposed_s: float, step_s: float
          ) -> dict[str, Any] | None:
    """The allreduce per optimizer step: its bytes, its time (the least any rank's buckets were
    in flight) and nccl-tests' bandwidths of that time (docs/presets/scaling.md)."""
    sizes = [row[0].bytes for row in rows if row[0].bytes]
    busy = [min(s.comm_busy for s in row) for row in rows if all(s.comm_busy > 0 for s in row)]
    if world < 2 or not sizes or not busy:
        return None
    size, seconds = statistics.median(sizes), statistics.median(busy)
    algbw = size / seconds if seconds > 0 else None
    return {"bytes_per_step": int(size), "time_s": seconds, "algbw_bytes_per_s": algbw,
            "busbw_bytes_per_s": algbw * 2 * (world - 1) / world if algbw else None,
            "exposed_s": exposed_s, "share": exposed_s / step_s if step_s else None}
