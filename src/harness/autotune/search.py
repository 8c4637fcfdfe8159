"""The search (docs/autotune.md, "How it searches"), launching nothing: `wave = search.start()`,
then `wave = search.advance(outcomes, elapsed_s)` (one Outcome per job) until the wave is None."""

from __future__ import annotations

from dataclasses import dataclass

from harness.autotune.fit import fit
from harness.autotune.halving import confirm, halving, settle_leader
from harness.autotune.knowledge import Knowledge, Plan, Record, Stop, Wave
from harness.autotune.outcome import Outcome
from harness.autotune.screen import recheck, screen


@dataclass
class Search(Knowledge):
    """The search of one sweep: what it knows (Knowledge), and the plan that hands out its waves."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._plan: Plan | None = None
        self._wave: Wave | None = None

    def start(self) -> Wave | None:
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
        if self.status == "running":
            self.status, self.stop_reason, self._wave = "interrupted", reason, None
            settle_leader(self)

    def _next(self, outcomes: list[Outcome] | None) -> Wave | None:
        assert self._plan is not None
        try:
            self._wave = self._plan.send(outcomes)
        except StopIteration:
            self._wave = None
        except Stop as stop:
            self.status, self.stop_reason, self._wave = "budget", str(stop), None
            settle_leader(self)
        wave = self._wave
        if wave is not None:
            if not self.stages or self.stages[-1]["name"] != wave.stage:
                self.stages.append({"name": wave.stage, "measured_steps": wave.jobs[0].measured_steps,
                                    "rounds": 0, "jobs": 0})
            self.stages[-1]["rounds"] = max(self.stages[-1]["rounds"], 1 + max(j.round for j in wave.jobs))
        return wave

    def _run(self) -> Plan:
        start = self.space.start()
        yield from fit(self, start)
        incumbent = self.best(self.tried())
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

