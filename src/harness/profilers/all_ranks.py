"""Every rank's figures on every rank, for reports that rank zero writes about the whole run."""

from __future__ import annotations

from typing import TypeVar

import torch.distributed as dist

T = TypeVar("T")


def gather(mine: T) -> list[T]:
    """Every rank's `mine`, in rank order ([mine] in a single process). A collective: every
    rank must call it, from a hook every rank runs, or the others wait for ever."""
    if not (dist.is_available() and dist.is_initialized()):
        return [mine]
    gathered: list[T] = [mine] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    return gathered
