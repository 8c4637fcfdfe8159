"""The search: feasibility first, then successive halving, then the winner against the default.

A `Search` hands out waves of jobs and is told how each job ended; it never launches
anything itself, so the same code runs behind the Hydra sweeper, a unit test's planted
landscape, and `harness-report`'s replay of a sweep directory (the jobs on disk answer the
waves in order, and the same decisions follow).

    search = Search(space, settings)
    wave = search.start()
    while wave is not None:
        wave = search.advance(outcomes_of(wave), elapsed_s)   # one Outcome per job, in order

Stages (each job carries its stage as +autotune_stage=<name>):
  fit      the batch ladder at the start point (every key at its default): doubling from the
           default batch size up to the first OOM (never above it; down first when the start
           does not fit), bisection below it, halving down while that pays; then the start
           point once more (calibration: the job-to-job noise one-job figures are read with)
  screen   one key at a time (loader keys first, unless the diagnosis shows the input
           pipeline is not in the way; then precision, compile, the rest), each other value
           probed at the incumbent; the incumbent moves to the best value; values within
           spread stay as alternates, values beaten beyond spread are dropped
  recheck  the incumbent's step changed shape: its batch neighbours, while they pay
  s1, s2.. successive halving over the incumbent and its alternates (crossed while that
           makes at most CROSS_LIMIT candidates, else one swap each plus the simple corner):
           `growth` x the steps each stage, about as many jobs as the confirm stage, in
           alternating rounds; the best `keep` and the ties go on
  confirm  the winner and the default configuration, fresh jobs, alternating rounds: the
           headline ratio and its range
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.autotune.fit import fit
from harness.autotune.halving import confirm, halving, settle_leader
from harness.autotune.knowledge import PROBE_STAGES, Knowledge, Plan, Record, Stop, Wave
from harness.autotune.outcome import Outcome
from harness.autotune.screen import recheck, screen


@dataclass
class Search(Knowledge):
    """The search of one sweep (the module docstring): what it knows (Knowledge), and the
    plan that hands out its waves."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._plan: Plan | None = None
        self._wave: Wave | None = None

    # ---- the driver's side ------------------------------------------------------------
    def start(self) -> Wave | None:
        """The first wave."""
        self._plan = self._run()
        return self._next(None)

    def advance(self, outcomes: list[Outcome], elapsed_s: float | None = None,
                names: list[str] | None = None) -> Wave | None:
        """How each job of the last wave ended (in its order); the next wave, or None."""
        assert self._wave is not None and len(outcomes) == len(self._wave.jobs)
        if elapsed_s is not None:
            self.elapsed_s = elapsed_s
        names = names or [""] * len(outcomes)
        self.records.extend(Record(j, o, n) for j, o, n in zip(self._wave.jobs, outcomes, names,
                                                               strict=True))
        self.stages[-1]["jobs"] += len(outcomes)
        unfinished = [o for o in outcomes if o.unknown]
        if unfinished:
            self.interrupt(f"a job of stage {self._wave.stage} did not end ({unfinished[0].status}"
                           f"{': ' + unfinished[0].reason if unfinished[0].reason else ''})")
            return None
        return self._next(outcomes)

    def interrupt(self, reason: str = "interrupted (Ctrl-C or SIGTERM)") -> None:
        """Stop here: the best so far stands, marked interrupted."""
        if self.status in ("done", "budget", "infeasible", "interrupted"):
            return
        self.status, self.stop_reason, self._wave = "interrupted", reason, None
        settle_leader(self)

    def _next(self, outcomes: list[Outcome] | None) -> Wave | None:
        assert self._plan is not None
        try:
            self._wave = self._plan.send(outcomes) if outcomes is not None else next(self._plan)
        except StopIteration:
            self._wave = None
        except Stop as stop:
            self.status, self.stop_reason, self._wave = "budget", str(stop), None
            settle_leader(self)
        wave = self._wave
        if wave is not None:
            rounds = 1 + max(j.round for j in wave.jobs)
            if not self.stages or self.stages[-1]["name"] != wave.stage:
                self.stages.append({"name": wave.stage, "measured_steps": wave.jobs[0].measured_steps,
                                    "rounds": rounds, "jobs": 0})
            else:
                self.stages[-1]["rounds"] = max(self.stages[-1]["rounds"], rounds)
        return wave

    # ---- the plan ---------------------------------------------------------------------
    def _run(self) -> Plan:
        start = self.space.start()
        yield from fit(self, start)
        incumbent = self.best(self.tried(), PROBE_STAGES)
        if incumbent is None:
            self.status = "infeasible"
            return
        alternates: list[tuple[str, str]] = []  # (key, value) swapped into the final incumbent
        incumbent = yield from screen(self, incumbent, alternates)
        incumbent = yield from recheck(self, incumbent, start, alternates)
        yield from halving(self, incumbent, alternates)
        settle_leader(self)
        yield from confirm(self)
        self.status = "budget" if self.stop_reason else "done"

