"""The sweeper of every harness multirun: Hydra's basic grid, with `repeat=N` run as N rounds of
the grid, forward then reversed, so a drifting machine hits every point alike, and `repeat=auto`
as rounds until every comparison is decided (harness.sweep.rounds; docs/sweeps.md)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config.overrides import ROUND_KEY, parse_overrides
from harness.private_api import hydra_basic_sweeper

if TYPE_CHECKING:
    from harness.sweep.rounds import Rounds

log = logging.getLogger("harness.sweep.rounds")

# Hydra has no public base class for a sweeper that only changes the job list.
BasicSweeper = hydra_basic_sweeper()


def one_round(grid: list[list[str]], index: int) -> list[list[str]]:
    """Round `index` of `grid`: forward when even, reversed when odd, each job repeat=1."""
    order = grid if index % 2 == 0 else list(reversed(grid))
    return [[*(o for o in overrides if "repeat" not in parse_overrides([o])), "repeat=1",
             f"+{ROUND_KEY}={index}"] for overrides in order]


class RoundsSweeper(BasicSweeper):
    _grid: list[list[str]]
    _auto: Rounds | None = None
    _fresh = False  # code_dir: each job in a fresh process

    def split_arguments(self, overrides: list[Any], max_batch_size: int | None) -> list[Any]:
        from harness.config.knobs import AUTO, MIN_ROUNDS, SweepSettings, jobs_run_here
        from harness.sweep.rounds import Rounds, job_threads

        grid = [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
        settings = SweepSettings.read(self.config)
        threads, why = job_threads(settings.threads, here=jobs_run_here(self.config))
        ranks = (_most_ranks_per_node(grid, self.config.trainer.get("devices"))
                 if self.config.get("scaling", {}).get("mode") else 1)
        if threads is not None and ranks > 1:  # a scaling study: every rank alike, none shares
            threads = max(1, threads // ranks)
            why += f"; a scaling study: {threads} a rank, its largest point {ranks} ranks a node"
        log.info("%s", why)
        if threads is not None:  # every job the same: a comparison's two sides alike
            grid = [[*job, f"++sweep.threads={threads}"] for job in grid]
        self._grid = grid
        self._fresh = bool(self.config.get("code_dir") or any("code_dir=" in o for job in grid for o in job))
        if self._fresh:
            log.info("code_dir: each job runs in a fresh Python process that imports its"
                     " code_dir first, and pays that start once more than in one process")
        rounds = self._rounds(overrides)
        self._size = max_batch_size if max_batch_size and max_batch_size > 0 else None
        if rounds == AUTO:
            from harness.sweep.progress import current

            sweep = current()
            self._auto = Rounds(settings, Path(str(self.config.hydra.sweep.dir)),
                                sweep.table if sweep is not None else None, time.time())
            log.info("repeat=auto: rounds of the %d point(s) until every comparison is decided within or"
                     " beyond %s (sweep.decide_within), at least %d, at most %d rounds%s", len(grid),
                     f"{settings.decide_within:.0%}", MIN_ROUNDS, settings.max_rounds,
                     f" or {settings.max_minutes:g} minutes" if settings.max_minutes else "")
            return self._batches(one_round(grid, 0))
        if rounds > 1:  # every point once per round, forward then reversed
            grid = [job for index in range(rounds) for job in one_round(grid, index)]
        return self._batches(grid)

    def _batches(self, jobs: list[list[str]]) -> list[list[list[str]]]:
        from harness.sweep.progress import current

        sweep = current()
        if sweep is not None:  # the "job k/N" of the sweep's progress lines
            sweep.announce_jobs((sweep.progress.total or 0) * bool(self._auto) + len(jobs))
        size = self._size or len(jobs)
        return [jobs[i:i + size] for i in range(0, len(jobs), size)]

    def is_done(self) -> bool:
        """Done when every job launched, and with repeat=auto once a round decided all."""
        if self._fresh and self.batch_index == 1:
            self._say_fresh_cost()
        if not BasicSweeper.is_done(self) or self._auto is None:
            return BasicSweeper.is_done(self)
        if not self._auto.go_on():
            return True
        self.overrides.extend(self._batches(one_round(self._grid, self._auto.done)))
        return False

    def _say_fresh_cost(self) -> None:
        """After the first batch: what a fresh process cost its jobs (fresh_process_s)."""
        import statistics

        from harness.result.jobs import read_job
        from harness.result.store import job_dirs

        results = [read_job(d)[0].result for d in job_dirs(Path(str(self.config.hydra.sweep.dir)))]
        costs = [r.fresh_process_s for r in results if r is not None and r.fresh_process_s is not None]
        if costs:
            log.info("code_dir: a fresh process took %.1f s per job to start (median of %d;"
                     " fresh_process_s in result.json)", statistics.median(costs), len(costs))

    def _rounds(self, overrides: list[Any]) -> int | str:
        """`repeat` of this sweep: from the command line, else the config; 1 when swept."""
        from harness.config.knobs import repeat_of

        typed = next((o for o in overrides if o.get_key_element() == "repeat"), None)
        if typed is not None and typed.is_sweep_override():
            return 1  # repeat=1,3 is a sweep over repeat itself
        return repeat_of(self.config, typed.value() if typed is not None else None)


def _most_ranks_per_node(grid: list[list[str]], configured: object) -> int:
    """The largest trainer.devices (ranks on one node) of the grid's jobs or the config."""
    found = [int(d) for job in grid if (d := parse_overrides(job).get("trainer.devices", "")).isdigit()]
    return max([*found, configured if isinstance(configured, int) else 1])
