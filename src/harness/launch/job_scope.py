"""The frame around one job: stop cleanly on SIGTERM and preemption, leave no DDP state behind."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping

from harness.launch.ranks import global_rank
from harness.launch.signals import InterruptionSignals, stop_on_signals
from harness.result.schema import RunResult

log = logging.getLogger(__name__)
# What Lightning's DDP launcher writes into rank 0's environment when it starts the other ranks.
_DDP_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")


@contextlib.contextmanager
def job_scope() -> Iterator[InterruptionSignals]:
    """The job's signals; no DDP state outlives it (Lightning would take the next job of a sweep
    run in this process for an already-started rank)."""
    saved = {name: os.environ.get(name) for name in _DDP_ENV}
    try:
        with stop_on_signals() as signals:
            yield signals
    finally:
        end_process_group()
        put_back_environment(saved)


def put_back_environment(saved: Mapping[str, str | None]) -> list[str]:
    """`saved`'s environment variables set back as they were (None: unset); the names that changed."""
    changed = [name for name, value in saved.items() if os.environ.get(name) != value]
    for name in changed:
        os.environ.pop(name, None)
    os.environ.update({name: saved[name] for name in changed if saved[name] is not None})
    return changed


def end_process_group() -> None:
    if "torch" not in sys.modules:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def handle_interruption(result: RunResult, output_dir: str, signals: InterruptionSignals) -> bool:
    """False when no signal stopped the run (the caller re-raises); else it is `interrupted`, and a
    submitit job returns True (submitit stores its result), any other exits 128 + the signal."""
    reason = signals.reason
    if reason is None:
        return False
    result.status, result.reason = "interrupted", reason
    if global_rank() == 0:
        log.info("%s (in %s)", reason, output_dir)
    if "SUBMITIT_EXECUTOR" in os.environ:
        return True
    raise SystemExit(signals.exit_status)
