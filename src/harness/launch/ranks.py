"""Names of per-rank files, so ranks of one run never write over each other's traces."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def global_rank() -> int:
    """This process's global rank: Lightning's once loaded, else the environment's (or 0)."""
    if "lightning.pytorch" in sys.modules:
        from lightning.pytorch.utilities import rank_zero_only

        return int(getattr(rank_zero_only, "rank", 0) or 0)
    return next((int(os.environ[name]) for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK")
                 if name in os.environ), 0)


def rank_path(path: Path, rank: int | None = None) -> Path:
    """`dir/name.ext` -> `dir/name_rank<N>.ext` (N: `rank`, or this process's global rank)."""
    rank = global_rank() if rank is None else rank
    return path.with_name(f"{path.stem}_rank{rank}{path.suffix}")
