"""How a multirun decides (conf/config.yaml `sweep:`): `repeat=auto` adds rounds of the grid until
every speed-up is decided (harness.sweep.gate) or a cap is reached, and every job of the sweep
runs at one torch thread count that the CPUs free of other load can carry (docs/sweeps.md)."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

from harness.config.knobs import MIN_ROUNDS, SweepSettings
from harness.errors import HarnessError
from harness.measured import USABLE
from harness.sweep.gate import decisions
from harness.sweep.progress import TableSettings

log = logging.getLogger(__name__)
SAMPLE_S = 0.5  # how long the other processes' CPU use is read before the first job


def job_threads(setting: int | str | None, here: bool) -> tuple[int | None, str]:
    """(torch threads for every job of the sweep, None: torch's default; why, to say once)."""
    if setting is None:
        return None, "sweep.threads=null: each job at torch's default thread count"
    if isinstance(setting, int):
        return setting, f"every job at {setting} torch thread(s) (sweep.threads={setting})"
    if not here:
        return None, ("sweep.threads=auto: the jobs run on other machines, each at torch's"
                      " default thread count")
    import torch

    from harness.contention import CpuWindow

    default = torch.get_num_threads()
    window = CpuWindow()  # the CPUs this process may use, and the other processes' load on them
    window.open()
    time.sleep(SAMPLE_S)
    window.close()
    found = window.figures(above=1.0)
    if not found or not found.get("cpus") or found.get("other_cpu_share") is None:
        return None, "sweep.threads=auto: the CPUs' load is not readable here; torch's default"
    free, cpus = found["cpus"] * (1 - found["other_cpu_share"]), int(found["cpus"])
    threads = max(1, min(default, math.floor(free + 0.25)))
    return threads, (f"every job at {threads} torch thread(s) (sweep.threads=auto): {cpus} CPUs,"
                     f" {cpus - free:.1f} of them busy with other processes; torch's default would be"
                     f" {default}" + (" and oversubscribe them" if default > threads else ""))


@dataclass
class Rounds:
    """`repeat=auto`'s state: its settings, the table's, when it started, the rounds done."""

    settings: SweepSettings
    sweep_dir: Path
    table: TableSettings | None  # None: its defaults
    started: float = 0.0
    done: int = 0

    def go_on(self) -> bool:
        """After a round: whether another is due: something measured, a comparison (or, with no
        variant, the sweep's fastest point) undecided, and no cap reached."""
        self.done += 1
        after = f"after {self.done} round{'s' if self.done > 1 else ''}"
        try:
            undecided = self.undecided()
        except HarnessError as err:  # no job measured anything: more rounds would not either
            log.warning("%s: nothing to decide (%s); no more rounds", after, err)
            return False
        if undecided is None:
            log.warning("%s: no job measured its point; no more rounds", after)
            return False
        if self.done < MIN_ROUNDS:
            return True
        if not undecided:
            log.info("%s: every comparison is decided", after)
            return False
        said = "; ".join(undecided[:3]) + (f"; and {len(undecided) - 3} more" if len(undecided) > 3 else "")
        if cap := self._cap():
            log.warning("%s: %d comparison(s) still undecided at the cap (%s): %s", after,
                        len(undecided), cap, said)
            return False
        log.info("%s: %d comparison(s) undecided, one more round: %s", after, len(undecided), said)
        return True

    def _cap(self) -> str | None:
        if self.done >= self.settings.max_rounds:
            return f"sweep.max_rounds={self.settings.max_rounds}"
        minutes = (time.time() - self.started) / 60
        if self.settings.max_minutes is not None and minutes >= self.settings.max_minutes:
            return f"sweep.max_minutes={self.settings.max_minutes:g}"
        return None

    def undecided(self) -> list[str] | None:
        """What more rounds could still decide, each as its line (a failure is final); None
        when no job of the sweep measured its point. Before MIN_ROUNDS, when no round can end
        the sweep, the comparison is not built: [] (go_on asks nothing of it then)."""
        from harness.result.jobs import collect
        from harness.sweep.table import build

        collection = collect(self.sweep_dir)
        if not any(job.status in USABLE for job in collection.jobs):
            return None
        if self.done < MIN_ROUNDS:
            return []
        table = self.table or TableSettings()
        comparison = build(collection, rows=table.rows, baseline=table.baseline,
                           repeat_keys=table.repeat_keys, tolerance=self.settings.decide_within)
        found = list(decisions(comparison))
        if found:
            return [d.line.removeprefix("undecided: ") for d in found if not d.decided and not d.final]
        # no variant: the sweep's fastest point decides; a plateau (every tie the same) is settled
        return [f"fastest ({phase}): {best['why']}"
                for phase, best in comparison.fastest.items() if not best["settled"]]
