"""How a multirun decides (conf/config.yaml `sweep:`): `repeat=auto` adds rounds of the grid until
every speed-up is decided (harness.sweep.gate) or a cap is reached, and every job of the sweep
runs at one torch thread count that the CPUs free of other load can carry (docs/sweeps.md)."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from harness.config.checks import PositiveInt, PositiveNumber, check, read_fields
from harness.errors import HarnessError
from harness.judge import TOLERANCE

log = logging.getLogger(__name__)
AUTO = "auto"
MIN_ROUNDS = 6  # the pairs a paired 95 % interval needs (harness.judge.signed_rank_cut)
SAMPLE_S = 0.5  # how long the other processes' CPU use is read before the first job


@dataclass(frozen=True)
class SweepSettings:
    """The `sweep:` settings, each checked against its hint."""

    max_rounds: Annotated[int, f">= {MIN_ROUNDS}"] = 30
    max_minutes: PositiveNumber | None = 15
    decide_within: Annotated[float, "> 0", "< 1"] = TOLERANCE
    threads: Literal["auto"] | PositiveInt | None = AUTO

    @classmethod
    def read(cls, config: Any) -> SweepSettings:
        from omegaconf import DictConfig, OmegaConf

        node = config.get("sweep")
        raw = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else None
        return read_fields(cls, raw, "sweep.", "conf/config.yaml")


def repeat_of(config: Any, typed: Any = None) -> int | str:
    """`repeat` of a sweep: `typed` (the command line's), else the config's; AUTO or N >= 1."""
    value = typed if typed is not None else config.get("repeat", 1)
    if str(value).strip().lower() == AUTO:
        return AUTO
    return check("repeat", value, PositiveInt, "3", "a positive integer, or auto in a sweep")


def free_cpus(sample_s: float = SAMPLE_S) -> tuple[float, int] | None:
    """(CPUs free of other processes' load over `sample_s`, CPUs this process may use)."""
    from harness.contention import CpuWindow

    window = CpuWindow()
    window.open()
    time.sleep(sample_s)
    window.close()
    found = window.figures(above=1.0)
    if not found or not found.get("cpus") or found.get("other_cpu_share") is None:
        return None
    cpus = found["cpus"]
    return cpus * (1 - found["other_cpu_share"]), int(cpus)


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

    default = torch.get_num_threads()
    found = free_cpus()
    if found is None:
        return None, "sweep.threads=auto: the CPUs' load is not readable here; torch's default"
    free, cpus = found
    threads = max(1, min(default, math.floor(free + 0.25)))
    busy = cpus - free
    return threads, (f"every job at {threads} torch thread(s) (sweep.threads=auto): {cpus} CPUs,"
                     f" {busy:.1f} of them busy with other processes; torch's default would be"
                     f" {default}" + (" and oversubscribe them" if default > threads else ""))


@dataclass
class Rounds:
    """`repeat=auto`'s state: its settings, the table's, when it started, the rounds done."""

    settings: SweepSettings
    sweep_dir: Path
    table: Any  # harness.sweep.progress.TableSettings, or None: the defaults
    started: float = 0.0
    done: int = 0

    def go_on(self) -> bool:
        """After a round: whether another is due (a comparison undecided, no cap reached)."""
        self.done += 1
        if self.done < MIN_ROUNDS:
            return True
        after = f"after {self.done} rounds"
        try:
            undecided = self.undecided()
        except HarnessError as err:  # no job measured anything: more rounds would not either
            log.warning("%s: nothing to decide (%s); no more rounds", after, err)
            return False
        if not undecided:
            log.info("%s: every comparison is decided", after)
            return False
        said = "; ".join(undecided[:3]) + (f"; and {len(undecided) - 3} more"
                                            if len(undecided) > 3 else "")
        cap = self._cap()
        if cap:
            log.warning("%s: %d comparison(s) still undecided at the cap (%s): %s", after,
                        len(undecided), cap, said)
            return False
        log.info("%s: %d comparison(s) undecided, one more round: %s", after, len(undecided),
                 said)
        return True

    def _cap(self) -> str | None:
        if self.done >= self.settings.max_rounds:
            return f"sweep.max_rounds={self.settings.max_rounds}"
        minutes = (time.time() - self.started) / 60
        if self.settings.max_minutes is not None and minutes >= self.settings.max_minutes:
            return f"sweep.max_minutes={self.settings.max_minutes:g}"
        return None

    def undecided(self) -> list[str]:
        """What more rounds could still decide, each as its line: a failure is final."""
        from harness.sweep.collect import collect
        from harness.sweep.gate import decisions
        from harness.sweep.table import REPEAT_KEYS, build

        table = self.table
        comparison = build(collect(self.sweep_dir), rows=table.rows if table else None,
                           baseline=table.baseline if table else None,
                           repeat_keys=(table.repeat_keys if table and table.repeat_keys
                                        is not None else REPEAT_KEYS),
                           tolerance=self.settings.decide_within)
        found = list(decisions(comparison))
        if found:
            return [d.line.removeprefix("undecided: ") for d in found
                    if not d.decided and not d.final]
        return fastest_undecided(comparison)  # no variant: the sweep's fastest point decides


def fastest_undecided(comparison: Any) -> list[str]:
    """Per phase, why the sweep's fastest point is not decided yet; a plateau (every tie the
    judge reads `same`) is decided: no round would tell its points apart."""
    from harness.judge import fastest, judge
    from harness.measured import MAIN_PHASES, USABLE

    found = []
    frame = comparison.points
    for phase in MAIN_PHASES:
        usable = frame[frame["status"].isin(USABLE)]
        bands = {k: b for k, b in usable[f"{phase}_band"].items() if b is not None}
        best = fastest(bands, comparison.tolerance)
        if best is None or best.decided or len(bands) < 2:
            continue
        plateau = all(verdict is not None and verdict.kind == "same" for verdict in (
            judge(bands[k], best.band, comparison.tolerance) for k in best.ties))
        if not (plateau and best.ties and all(b.between_runs for b in bands.values())):
            found.append(f"fastest ({phase}): {best.why}")
    return found
