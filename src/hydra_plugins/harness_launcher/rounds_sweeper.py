"""The sweeper of every harness multirun: Hydra's basic grid, with `repeat=N` run as N rounds of
the grid, forward then reversed, so a drifting machine hits every point alike (docs/sweeps.md).
"""

from __future__ import annotations

from typing import Any

from harness.config.overrides import ROUND_KEY, parse_overrides
from harness.private_api import hydra_basic_sweeper

# Hydra has no public base class for a sweeper that only changes the job list.
BasicSweeper = hydra_basic_sweeper()


def in_rounds(grid: list[list[str]], rounds: int) -> list[list[str]]:
    """Every point of `grid` once per round, forward then reversed; each job runs once."""
    jobs = []
    for round_index in range(rounds):
        order = grid if round_index % 2 == 0 else list(reversed(grid))
        for overrides in order:
            kept = [o for o in overrides if "repeat" not in parse_overrides([o])]
            jobs.append([*kept, "repeat=1", f"+{ROUND_KEY}={round_index}"])
    return jobs


class RoundsSweeper(BasicSweeper):
    def split_arguments(self, overrides: list[Any], max_batch_size: int | None) -> list[Any]:
        from harness.sweep.progress import current

        batches = BasicSweeper.split_arguments(overrides, None)
        jobs = [job for batch in batches for job in batch]
        rounds = self._rounds(overrides)
        if rounds > 1:
            jobs = in_rounds(jobs, rounds)
        sweep = current()
        if sweep is not None:
            sweep.announce_jobs(len(jobs))  # the "job k/N" of the sweep's progress lines
        size = max_batch_size if max_batch_size and max_batch_size > 0 else len(jobs)
        return [jobs[i:i + size] for i in range(0, len(jobs), size)]

    def _rounds(self, overrides: list[Any]) -> int:
        """`repeat` of this sweep: from the command line, else the config; 1 when swept."""
        typed = next((o for o in overrides if o.get_key_element() == "repeat"), None)
        if typed is not None and typed.is_sweep_override():
            return 1  # repeat=1,3 is a sweep over repeat itself
        value = typed.value() if typed is not None else self.config.get("repeat", 1)
        return value if isinstance(value, int) and value > 0 else 1
