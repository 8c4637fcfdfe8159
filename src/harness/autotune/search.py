"""The search (docs/autotune.md, "How it searches"), launching nothing: `wave = search.start()`,
then `wave = search.advance(outcomes, elapsed_s)` (one Outcome per job) until the wave is None."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.autotune.fit import fit
from harness.autotune.halving import confirm, halving, settle_leader
from harness.autotune.knowledge import Knowledge, Plan, Record, Wave
from harness.autotune.outcome import Outcome
from harness.autotune.screen import recheck, screen
from harness.autotune.settings import AUTO
from harness.autotune.space import BATCH
from harness.errors import ConfigError


@dataclass
class Search(Knowledge):
    """The search of one sweep: what it knows (Knowledge), and the plan that hands out its waves."""

    _plan: Plan | None = field(default=None, init=False, repr=False)
    _wave: Wave | None = field(default=None, init=False, repr=False)

    def budget_line(self) -> str:
        """What the job budget buys, before any job: the fit ladder gets what the kept confirm stage
        and screen leave (`room`); a ConfigError where it cannot probe the start, each other value
        once and run the confirm stage."""
        settings, cap, jobs = self.settings, self.job_cap, self.settings.budget.jobs
        warm = 1 if settings.warmup_job is True else 0
        confirm, screen = 2 * settings.confirm_rounds, self.screen_jobs()
        # the fit ladder's jobs before any OOM is known: the start, each rung up, the calibration
        batch = self.space.batch
        rungs = [int(self.space.start()[batch.name])] if batch is not None else []
        while batch and (up := batch.rung(rungs[-1], up=True)) is not None:
            rungs.append(up)
        ladder = max(len(rungs), 1) + int(settings.calibrate)
        climbs = ((f"batch_size={rungs[0]} up to {rungs[-1]}" if len(rungs) > 1 else "the start point")
                  + (" and the calibration" if settings.calibrate else ""))
        others = ", ".join(k.name for k in self.space.keys if k.role != BATCH) or "no other key"
        least = warm + 1 + screen + confirm
        named = (f"autotune.budget.jobs={'null' if jobs is None else jobs}"
                 + (": a third of the grid, at least 20" if jobs == AUTO else ""))
        if cap is not None and cap < least:
            raise ConfigError("autotune.budget.jobs", settings.budget.jobs,
                              f"at least {least} here: the start point's probe"
                              + (", the warm-up job" if warm else "")
                              + f", one probe per other value of {others} ({screen}) and the confirm"
                              f" stage ({confirm} jobs: 2 x autotune.confirm_rounds)",
                              f"autotune.budget.jobs={least}")
        fit = ladder if cap is None else min(ladder, cap - least + 1)
        rest = "the rest" if cap is None else cap - warm - fit - screen - confirm
        return (f"{cap or 'any number of'} jobs ({named}): " + (f"{warm} warm-up, " if warm else "")
                + f"{fit} for the fit ladder ({'' if fit == ladder else f'of the {ladder} for '}{climbs}),"
                f" {screen} for the screen (one per other value of {others}), {confirm} kept for the"
                f" confirm stage, {rest} for the recheck and the halving"
                + ("" if fit == ladder else f"; autotune.budget.jobs={cap + ladder - fit} climbs the"
                   " whole ladder"))

    def start(self) -> Wave | None:
        self._plan = self._run()
        return self._next(None)

    def advance(self, outcomes: list[Outcome], elapsed_s: float | None = None,
                names: list[str] | None = None) -> Wave | None:
        """How each job of the last wave ended (in its order); the next wave, or None."""
        assert self._wave is not None and len(outcomes) == len(self._wave.jobs)
        if elapsed_s is not None:
            self.elapsed_s = elapsed_s
        self.records += map(Record, self._wave.jobs, outcomes, names or [""] * len(outcomes))
        if (odd := next((o for o in outcomes if o.unknown), None)) is not None:
            self.interrupt(f"a job of stage {self._wave.stage} did not end ({odd.status}"
                           f"{': ' + odd.reason if odd.reason else ''})")
            return None
        return self._next(outcomes)

    def interrupt(self, reason: str = "interrupted (Ctrl-C or SIGTERM)") -> None:
        """Stop here: the best so far stands, marked interrupted."""
        if self.status == "running":
            self.status, self.stop_reason, self._wave = "interrupted", reason, None
            settle_leader(self)

    def _next(self, outcomes: list[Outcome] | None) -> Wave | None:
        assert self._plan is not None
        try:
            self._wave = wave = self._plan.send(outcomes)
        except StopIteration:
            self._wave = None
            return None
        if not self.stages or self.stages[-1]["name"] != wave.stage:
            self.stages.append({"name": wave.stage, "measured_steps": wave.jobs[0].measured_steps,
                                "rounds": 0})
        self.stages[-1]["rounds"] = max(self.stages[-1]["rounds"], 1 + max(j.round for j in wave.jobs))
        return wave

    def _run(self) -> Plan:
        start = self.space.start()
        yield from fit(self, start)
        incumbent = self.best(self.tried())
        if incumbent is None:  # the budget may have cut the fit before any point ran
            self.status = "budget" if self.stop_reason else "infeasible"
            return
        alternates: list[tuple[str, str]] = []  # (key, value) swapped into the final incumbent
        incumbent = yield from screen(self, incumbent, alternates)
        incumbent = yield from recheck(self, incumbent, start, alternates)
        yield from halving(self, incumbent, alternates)
        settle_leader(self)
        yield from confirm(self)
        self.status = "budget" if self.stop_reason else "done"

