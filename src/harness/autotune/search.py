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

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from harness.autotune.outcome import Outcome
from harness.autotune.settings import AUTO, Settings, job_budget
from harness.autotune.space import BATCH, COMPILE, LOADER, OTHER, PRECISION, Candidate, Space
from harness.autotune.stats import Estimate, estimate, job_score, pooled_sigma

FIT, SCREEN, RECHECK, CONFIRM, FINAL = "fit", "screen", "recheck", "confirm", "final"
PROBE_STAGES = (FIT, SCREEN, RECHECK)
CROSS_LIMIT = 4  # alternates are crossed while that makes at most this many candidates
SIMPLER = "no compile, fp32, fewer workers, smaller batch"

Plan = Generator["Wave", list[Outcome], None]


@dataclass(frozen=True)
class Job:
    candidate: Candidate
    stage: str
    round: int
    measured_steps: int
    warmup_steps: int


@dataclass(frozen=True)
class Wave:
    stage: str
    jobs: tuple[Job, ...]


@dataclass(frozen=True)
class Decision:
    stage: str
    candidate: str
    action: str  # probed, kept, dropped, infeasible, skipped, collapsed, retry, tie, winner, budget
    why: str


@dataclass(frozen=True)
class Record:
    job: Job
    outcome: Outcome
    name: str  # the job's directory name, as the driver knows it


class Stop(Exception):
    """The budget ends the search before the wave that would pass it."""


def stage_rank(name: str) -> int:
    """fit < screen < recheck < s1 < s2 < ... < confirm."""
    if name in PROBE_STAGES:
        return PROBE_STAGES.index(name)
    if name == CONFIRM:
        return 1000
    return 10 + int(name[1:]) if name[1:].isdigit() else 999


@dataclass
class Search:
    space: Space
    settings: Settings
    records: list[Record] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    status: str = "running"  # running, done, budget, interrupted, infeasible
    stop_reason: str | None = None
    stages: list[dict] = field(default_factory=list)  # name, measured_steps, rounds, jobs
    largest_fit: int | None = None
    first_oom: int | None = None
    pool: list[Candidate] = field(default_factory=list)  # still in the running
    left_out: list[Candidate] = field(default_factory=list)  # cut by the budget, unmeasured
    winner: Candidate | None = None
    winner_trusted: bool = True  # false: no trusted figure was left to rank on
    tied_with: list[Candidate] = field(default_factory=list)
    confirm: dict | None = None
    elapsed_s: float = 0.0

    def __post_init__(self) -> None:
        self.gains: dict[tuple[str, str], float] = {}  # (key, value) -> rate vs the value chosen
        self._plan: Plan | None = None
        self._wave: Wave | None = None

    # ---- the driver's side ------------------------------------------------------------
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
        if self.status in ("done", "budget", "infeasible", "interrupted"):
            return
        self.status, self.stop_reason, self._wave = "interrupted", reason, None
        self._settle_leader()

    def _next(self, outcomes: list[Outcome] | None) -> Wave | None:
        assert self._plan is not None
        try:
            self._wave = self._plan.send(outcomes) if outcomes is not None else next(self._plan)
        except StopIteration:
            self._wave = None
        except Stop as stop:
            self.status, self.stop_reason, self._wave = "budget", str(stop), None
            self._settle_leader()
        wave = self._wave
        if wave is not None:
            rounds = 1 + max(j.round for j in wave.jobs)
            if not self.stages or self.stages[-1]["name"] != wave.stage:
                self.stages.append({"name": wave.stage, "measured_steps": wave.jobs[0].measured_steps,
                                    "rounds": rounds, "jobs": 0})
            else:
                self.stages[-1]["rounds"] = max(self.stages[-1]["rounds"], rounds)
        return wave

    # ---- what is known -----------------------------------------------------------------
    @property
    def jobs_launched(self) -> int:
        return len(self.records)

    def outcomes(self, candidate: Candidate, stages: tuple[str, ...] | None = None) -> list[Outcome]:
        return [r.outcome for r in self.records if r.job.candidate == candidate
                and (stages is None or r.job.stage in stages)]

    def estimate(self, candidate: Candidate, stages: tuple[str, ...]) -> Estimate | None:
        return estimate(self.outcomes(candidate, stages), self.settings, self.sigma())

    def probe_estimate(self, candidate: Candidate) -> Estimate | None:
        return self.estimate(candidate, PROBE_STAGES)

    def infeasible(self, candidate: Candidate) -> str | None:
        """Why the candidate cannot win: a job of it ended oom, failed or invalid."""
        for o in self.outcomes(candidate):
            if o.infeasible:
                return f"{o.status}: {o.reason or 'no figures for the objective'}"
        return None

    def ran_oom(self, candidate: Candidate) -> bool:
        return any(o.oom for o in self.outcomes(candidate))

    def above_known_oom(self, candidate: Candidate) -> Candidate | None:
        """A memory twin of `candidate` with a batch no larger that ran out of memory."""
        batch = self.space.batch
        if batch is None:
            return None
        size = int(candidate[batch.name])
        for r in self.records:
            if r.outcome.oom and int(r.job.candidate[batch.name]) <= size and (
                    self.space.memory_twin(r.job.candidate, candidate)):
                return r.job.candidate
        return None

    def tried(self) -> list[Candidate]:
        return list(dict.fromkeys(r.job.candidate for r in self.records))

    def decide(self, stage: str, candidate: Candidate | str, action: str, why: str) -> None:
        label = candidate if isinstance(candidate, str) else candidate.label()
        self.decisions.append(Decision(stage, label, action, why))

    def sigma(self) -> float:
        """The job-to-job noise (log sd) over every point measured more than once in a stage
        (the probes pooled), shrunk towards noise_floor / 2."""
        groups: dict[tuple[Candidate, str], list[float]] = {}
        for r in self.records:
            scored = job_score(r.outcome, self.settings)
            if scored is not None and r.outcome.trusted:
                stage = "probe" if r.job.stage in PROBE_STAGES else r.job.stage
                groups.setdefault((r.job.candidate, stage), []).append(scored[0])
        return pooled_sigma(list(groups.values()), self.settings.noise_floor / 2)

    def latest(self, candidate: Candidate) -> Estimate | None:
        """The candidate's figure from the deepest stage that measured it, confirm excluded."""
        stages = sorted({r.job.stage for r in self.records if r.job.candidate == candidate
                         and r.job.stage != CONFIRM}, key=stage_rank, reverse=True)
        for stage in stages:
            found = self.estimate(candidate, PROBE_STAGES if stage in PROBE_STAGES else (stage,))
            if found is not None:
                return found
        return None

    # ---- budget ------------------------------------------------------------------------
    @property
    def job_cap(self) -> int | None:
        return job_budget(self.settings.budget, self.space.grid_points())

    def _reserve(self) -> int:
        """Jobs kept for the confirm stage until it has run."""
        return 2 * self.settings.confirm_rounds if self.confirm is None else 0

    def _job_seconds(self, candidate: Candidate, steps: int) -> float:
        """Seconds one job may take, on the safe side: the largest fixed part seen + steps x
        the candidate's slowest s/step (any candidate's before it ran), x 1.25."""
        mine = [p.seconds_per_step for r in self.records if r.job.candidate == candidate
                for p in r.outcome.phases.values()]
        anyone = [p.seconds_per_step for r in self.records for p in r.outcome.phases.values()]
        fixed = [max(0.0, r.outcome.job_seconds - (r.job.measured_steps + r.job.warmup_steps)
                     * sum(p.seconds_per_step for p in r.outcome.phases.values()))
                 for r in self.records]
        return 1.25 * (max(fixed, default=0.0) + steps * max(mine or anyone or [0.0]))

    def _room(self, jobs: list[Job], reserve: bool = True) -> int:
        """How many of `jobs` (in order) fit the budget, the confirm stage's room kept."""
        cap, minutes = self.job_cap, self.settings.budget.minutes
        room = len(jobs)
        if cap is not None:
            room = min(room, cap - self.jobs_launched - (self._reserve() if reserve else 0))
        if minutes is not None:
            left = minutes * 60 - self.elapsed_s
            if reserve and self.confirm is None:
                leader = self._best(self.tried(), PROBE_STAGES) or self.space.default()
                left -= 2 * self.settings.confirm_rounds * self._job_seconds(
                    leader, self._confirm_steps() + self.settings.warmup_steps)
            spent, fits = 0.0, 0
            for job in jobs:
                spent += self._job_seconds(job.candidate, job.measured_steps + job.warmup_steps)
                if spent > left:
                    break
                fits += 1
            room = min(room, fits)
        return max(room, 0)

    def _budget_words(self, where: str) -> str:
        budget, cap = self.settings.budget, self.job_cap
        parts = []
        if cap is not None:
            parts.append(f"{self.jobs_launched} of {cap} jobs"
                         + (" (auto: a third of the grid)" if budget.jobs == AUTO else ""))
        if budget.minutes is not None:
            parts.append(f"{self.elapsed_s / 60:.1f} of {budget.minutes:g} min")
        return f"stopped by the budget {where} ({', '.join(parts)} used)"

    # ---- the plan ----------------------------------------------------------------------
    def _job(self, candidate: Candidate, stage: str, round_: int, steps: int) -> Job:
        return Job(candidate, stage, round_, steps, self.settings.warmup_steps)

    def _probe(self, stage: str, candidates: list[Candidate], again: Candidate | None = None
               ) -> Generator[Wave, list[Outcome], list[Candidate]]:
        """Probe the candidates not measured yet and not above a known OOM; the ones run.
        `again`: one of them measured twice in the wave (the calibration, in stage mode)."""
        todo = []
        for c in dict.fromkeys(candidates):
            if self.outcomes(c, PROBE_STAGES):
                continue
            twin = self.above_known_oom(c)
            if twin is not None:
                self.decide(stage, c, "skipped", f"above a known OOM ({twin.label()})")
                continue
            todo.append(c)
        if not todo:
            return []
        jobs = [self._job(c, stage, 0, self.settings.probe_steps) for c in todo]
        if again in todo:
            jobs.append(self._job(again, stage, 1, self.settings.probe_steps))
        room = self._room(jobs)
        if room == 0:
            raise Stop(self._budget_words(f"before {stage}"))
        for job in jobs[room:]:
            if job.round:
                continue
            self.decide(stage, job.candidate, "budget", "not probed: the budget is spent")
            self.stop_reason = self.stop_reason or self._budget_words(f"at {stage}: not probed")
            self.left_out.append(job.candidate)
        yield Wave(stage, tuple(jobs[:room]))
        for job in jobs[:room]:
            reason = self.infeasible(job.candidate)
            if reason:
                self.decide(stage, job.candidate, "infeasible", reason)
        return list(dict.fromkeys(j.candidate for j in jobs[:room]))

    def _run(self) -> Plan:
        start = self.space.start()
        yield from self._fit(start)
        incumbent = self._best(self.tried(), PROBE_STAGES)
        if incumbent is None:
            self.status = "infeasible"
            return
        alternates: list[tuple[str, str]] = []  # (key, value) swapped into the final incumbent
        incumbent = yield from self._screen(incumbent, alternates)
        incumbent = yield from self._recheck(incumbent, start, alternates)
        yield from self._halving(incumbent, alternates)
        self._settle_leader()
        yield from self._confirm()
        self.status = "budget" if self.stop_reason else "done"

    def _best(self, candidates: list[Candidate], stages: tuple[str, ...]) -> Candidate | None:
        """The fastest feasible candidate (trusted figures first)."""
        scored = [(e.trusted, e.value, c) for c in candidates if not self.infeasible(c)
                  and (e := self.estimate(c, stages)) is not None]
        return max(scored, key=lambda s: (s[0], s[1]))[2] if scored else None

    # -- fit
    def _fit(self, start: Candidate) -> Plan:
        batch = self.space.batch
        if batch is None:
            yield from self._probe(FIT, [start])
            yield from self._calibrate(start)
            return
        b0 = int(start[batch.name])

        def at(b: int) -> Candidate:
            return start.with_(batch.name, str(b))

        def rate(b: int) -> Estimate | None:
            return self.estimate(at(b), (FIT,))

        ladder: list[int] = []
        if self.settings.sequential_probes:
            b: int | None = b0
            while b is not None:
                yield from self._probe(FIT, [at(b)])
                ladder.append(b)
                if self.infeasible(at(b)):
                    break  # the first OOM: nothing above it is launched
                if not self.settings.find_max_batch and self._falling(ladder, rate):
                    self.decide(FIT, at(b), "kept", "ladder stopped: two doublings slower"
                                " (autotune.find_max_batch=false)")
                    break
                b = self._up(b)
        else:  # one wave: every rung from the start up (no OOM is known when it is launched),
            # and the start twice (the calibration)
            rungs = [b0]
            while (nxt := self._up(rungs[-1])) is not None:
                rungs.append(nxt)
            yield from self._probe(FIT, [at(r) for r in rungs],
                                   again=at(b0) if self.settings.calibrate else None)
            ladder = rungs
        if self.ran_oom(at(b0)):  # the start does not fit: down until a batch does
            b = self._down(b0)
            while b is not None:
                yield from self._probe(FIT, [at(b)])
                ladder.append(b)
                if not self.ran_oom(at(b)):
                    break
                b = self._down(b)
        fits = [r for r in ladder if not self.infeasible(at(r))]
        ooms = [r for r in ladder if self.ran_oom(at(r))]
        self.largest_fit = max(fits) if fits else None
        self.first_oom = min((r for r in ooms if self.largest_fit is None or r > self.largest_fit),
                             default=None)
        ladder += yield from self._bisect(at)
        while True:  # down while it pays: the fastest so far is the smallest batch probed
            measured = [r for r in sorted(set(ladder)) if rate(r) is not None]
            if not measured:
                break
            best = max(measured, key=lambda r: rate(r).value)  # type: ignore[union-attr]
            lower = self._down(min(measured))
            if best != min(measured) or lower is None:
                break
            yield from self._probe(FIT, [at(lower)])
            ladder.append(lower)
            if rate(lower) is None:
                break
        measured = [at(r) for r in ladder if rate(r) is not None]
        yield from self._calibrate(at(b0) if at(b0) in measured else self._best(measured, (FIT,)))
        if self.largest_fit is not None:
            self.decide(FIT, at(self.largest_fit), "kept",
                        f"largest batch that fits: {self.largest_fit}"
                        + (f" (first OOM: {self.first_oom})" if self.first_oom else
                           " (no OOM up to the top of the space)"))

    def _bisect(self, at: Callable[[int], Candidate]) -> Generator[Wave, list[Outcome], list[int]]:
        """The largest batch that fits, between the largest that fit and the first OOM: one
        probe at a time nearest their geometric middle (bisect_steps of them), or in stage
        mode bisect_steps sizes spread evenly (log scale) in one wave."""
        batch, probed = self.space.batch, []
        assert batch is not None
        sequential = self.settings.sequential_probes
        steps = self.settings.bisect_steps if sequential else min(1, self.settings.bisect_steps)
        for _ in range(steps):
            if self.largest_fit is None or self.first_oom is None:
                break
            lo, hi = self.largest_fit, self.first_oom
            middle = batch.between(lo, hi)
            if not middle:
                break
            n = 1 if sequential else self.settings.bisect_steps
            targets = [lo * (hi / lo) ** ((i + 1) / (n + 1)) for i in range(n)]
            sizes = sorted({min(middle, key=lambda v, t=t: (abs(math.log(v / t)), v))
                            for t in targets})
            yield from self._probe(FIT, [at(m) for m in sizes])
            probed += sizes
            fits = [m for m in sizes if not self.infeasible(at(m))]
            ooms = [m for m in sizes if self.ran_oom(at(m))]
            if fits:
                self.largest_fit = max(self.largest_fit, *fits)
            above = [m for m in ooms if m > self.largest_fit]
            if above:
                self.first_oom = min(self.first_oom, *above)
            if len(fits) + len(ooms) < len(sizes):
                break  # a failure other than memory: no more bisection
        return probed

    def _up(self, b: int) -> int | None:
        batch = self.space.batch
        assert batch is not None
        if batch.interval is not None:
            hi = batch.interval[1]
            return None if b >= hi else min(2 * b, hi)
        above = [v for v in batch.sorted_numbers() if v > b]
        return next((v for v in above if v >= 2 * b), above[-1] if above else None)

    def _down(self, b: int) -> int | None:
        batch = self.space.batch
        assert batch is not None
        if batch.interval is not None:
            lo = batch.interval[0]
            return None if b <= lo else max(b // 2, lo)
        below = [v for v in batch.sorted_numbers() if v < b]
        return next((v for v in reversed(below) if v <= b / 2), below[0] if below else None)

    def _calibrate(self, point: Candidate | None) -> Plan:
        """A probed point once more, last in the fit stage: the job-to-job noise every one-job
        figure is read with (and a drift since the first job shows in it)."""
        if (point is None or not self.settings.calibrate or self.infeasible(point)
                or len(self.outcomes(point)) != 1):
            return
        jobs = [self._job(point, FIT, 1, self.settings.probe_steps)]
        if self._room(jobs) < 1:
            return
        yield Wave(FIT, tuple(jobs))
        self.decide(FIT, point, "probed", f"calibration: job-to-job noise {self.sigma():.1%}")

    @staticmethod
    def _falling(ladder: list[int], rate: Callable[[int], Estimate | None]) -> bool:
        values = [e.value if (e := rate(b)) else 0.0 for b in ladder]
        return len(values) >= 3 and values[-1] < values[-2] < values[-3]

    # -- screen: one key at a time, around the incumbent, the incumbent moving as it goes
    def _loader_irrelevant(self, incumbent: Candidate) -> str | None:
        """Why the loader keys do not matter here (the diagnosis of the incumbent's probes),
        or None."""
        probes = self.outcomes(incumbent, PROBE_STAGES)
        shares = [o.data_share for o in probes if o.data_share is not None]
        bounds = [o.bound_by for o in probes if o.bound_by]
        if not shares or "data" in bounds:
            return None
        share = max(shares)
        if share < self.settings.data_share_floor:
            return (f"the input pipeline is {share:.0%} of a step (bound by"
                    f" {bounds[0] if bounds else 'unknown'}; below autotune.data_share_floor"
                    f" {self.settings.data_share_floor:.0%})")
        return None

    def _screen_order(self) -> list[str]:
        """Loader keys first (a data-bound step hides every other gain), then precision,
        compile, then the other keys as typed."""
        rank = {LOADER: 0, PRECISION: 1, COMPILE: 2, OTHER: 3}
        keys = [k for k in self.space.keys if k.role != BATCH]
        return [k.name for k in sorted(keys, key=lambda k: (rank[k.role], self.space.keys.index(k)))]

    def _screen(self, incumbent: Candidate, alternates: list[tuple[str, str]]
                ) -> Generator[Wave, list[Outcome], Candidate]:
        skip_loaders = self._loader_irrelevant(incumbent)
        for name in self._screen_order():
            key = self.space.key(name)
            if key.role == LOADER and skip_loaders:
                self.decide(SCREEN, f"{name}=*", "collapsed",
                            f"does not matter: {skip_loaders}; kept at {incumbent[name]}")
                continue
            others = [incumbent.with_(name, v) for v in key.listed() if v != incumbent[name]]
            yield from self._probe(SCREEN, others)
            incumbent = self._screen_key(name, incumbent, alternates)
        return incumbent

    def _screen_key(self, name: str, incumbent: Candidate, alternates: list[tuple[str, str]]
                    ) -> Candidate:
        """The incumbent moves to the fastest value; the others within spread stay as
        alternates (the halving stages settle them); values beaten beyond spread drop."""
        key = self.space.key(name)
        points = {v: incumbent.with_(name, v) for v in key.listed()}
        points[incumbent[name]] = incumbent
        est: dict[str, Estimate] = {}
        for v, c in points.items():
            reason = self.infeasible(c)
            e = self.probe_estimate(c)
            if reason or e is None:
                if c in self.tried() and not reason:
                    self.decide(SCREEN, c, "dropped", f"{name}={v}: no figures")
                continue
            est[v] = e
        if not est:
            return incumbent
        trusted = {v: e for v, e in est.items() if e.trusted} or est
        # the search goes on from the best (a knob's gain can hide behind another's, e.g.
        # bf16's behind a data-bound step); the final tie rule gives the simplest its due
        chosen = max(trusted, key=lambda v: trusted[v].value)
        for v, e in est.items():
            if v == chosen:
                continue
            if not e.trusted or e.tied(est[chosen], self.settings.min_gain):
                alternates.append((name, v))
                why = (f"untrusted probe ({', '.join(e.why)}): measured again, longer"
                       if not e.trusted else
                       f"within spread of {name}={chosen} ({e.describe()} vs"
                       f" {est[chosen].describe()})")
                self.decide(SCREEN, points[v], "kept", f"an alternate: {why}")
            else:
                self.decide(SCREEN, points[v], "dropped",
                            f"{name}={v}: {e.describe()}, slower than {name}={chosen}"
                            f" ({est[chosen].describe()}) beyond the spread")
        for v, e in est.items():  # what each value does to the step, to rank crossed candidates
            self.gains[(name, v)] = e.value / est[chosen].value
        if chosen != incumbent[name]:
            self.decide(SCREEN, points[chosen], "kept", f"{name}={chosen} goes on:"
                        f" {est[chosen].describe()}")
        return points[chosen]

    # -- recheck: the incumbent's step changed shape, so its best batch may have moved
    def _recheck(self, incumbent: Candidate, start: Candidate, alternates: list[tuple[str, str]]
                 ) -> Generator[Wave, list[Outcome], Candidate]:
        """Sequential probes: up to two rungs each way while they pay; stage mode: the next
        rung each way, in one wave."""
        batch = self.space.batch
        others = [k.name for k in self.space.keys if k.role != BATCH]
        if batch is None or all(incumbent[n] == start[n] for n in others):
            return incumbent
        numbers = batch.sorted_numbers()

        def neighbour(c: Candidate, direction: int) -> Candidate | None:
            b = int(c[batch.name])
            side = [v for v in numbers if (v > b if direction > 0 else v < b)]
            return c.with_(batch.name, str(side[0] if direction > 0 else side[-1])) if side else None

        if not self.settings.sequential_probes:
            found = [c for d in (+1, -1) if (c := neighbour(incumbent, d)) is not None]
            yield from self._probe(RECHECK, found)
            verdicts = {c: self._judge_rung(incumbent, c, alternates) for c in found}
            faster = [c for c, v in verdicts.items() if v == "faster"]
            return max(faster, key=lambda c: self.probe_estimate(c).value) if faster else incumbent  # type: ignore[union-attr]
        for direction in (+1, -1):
            current = incumbent
            for _ in range(2):
                nxt = neighbour(current, direction)
                if nxt is None:
                    break
                yield from self._probe(RECHECK, [nxt])
                if self._judge_rung(incumbent, nxt, alternates) != "faster":
                    break
                incumbent = current = nxt
        return incumbent

    def _judge_rung(self, incumbent: Candidate, rung: Candidate,
                    alternates: list[tuple[str, str]]) -> str | None:
        """A batch neighbour of the incumbent: 'faster' (beyond spread), 'tie' (an alternate),
        'slower' (dropped), or None (not measured, infeasible)."""
        name = self.space.batch.name  # type: ignore[union-attr]
        mine, theirs = self.probe_estimate(incumbent), self.probe_estimate(rung)
        if theirs is None or mine is None or self.infeasible(rung):
            return None
        self.gains[(name, rung[name])] = theirs.value / mine.value
        here = f"{name}={incumbent[name]} ({mine.describe()})"
        if not theirs.trusted or theirs.tied(mine, self.settings.min_gain):
            alternates.append((name, rung[name]))
            self.decide(RECHECK, rung, "kept", "an alternate: " + (
                f"untrusted probe ({', '.join(theirs.why)}): measured again, longer"
                if not theirs.trusted else f"{theirs.describe()}: within spread of {here}"))
            return "tie"
        if theirs.value < mine.value:
            self.decide(RECHECK, rung, "dropped",
                        f"{theirs.describe()}: slower than {here} beyond the spread")
            return "slower"
        self.decide(RECHECK, rung, "kept",
                    f"{theirs.describe()}: faster than {here} beyond the spread; goes on")
        return "faster"

    # -- halving
    def _halving_pool(self, incumbent: Candidate, alternates: list[tuple[str, str]]
                      ) -> list[Candidate]:
        """The incumbent and its alternates: crossed while that makes at most CROSS_LIMIT
        candidates, else each alternate swapped in alone plus the simple corner (every key
        at its simplest value within spread). A knob within spread adds candidates; it
        does not multiply the others."""
        values: dict[str, list[str]] = {}
        for k, v in alternates:
            values.setdefault(k, [incumbent[k]]).append(v)
        combos = [incumbent]
        for k, vs in values.items():
            combos = [c.with_(k, v) for c in combos for v in dict.fromkeys(vs)]
        if len(combos) > CROSS_LIMIT:
            corner = incumbent
            for k, vs in values.items():
                corner = corner.with_(k, min(vs, key=self.space.key(k).simplicity))
            combos = [incumbent, *(incumbent.with_(k, v) for k, v in alternates), corner]
        pool = [c for c in dict.fromkeys(combos) if c == incumbent
                or (not self.infeasible(c) and not self.above_known_oom(c))]
        for c in pool[self.settings.max_candidates:]:
            self.decide(SCREEN, c, "dropped", "beyond autotune.max_candidates"
                        f"={self.settings.max_candidates}")
        return pool[:self.settings.max_candidates]

    def _halving(self, incumbent: Candidate, alternates: list[tuple[str, str]]) -> Plan:
        pool = self.pool = self._halving_pool(incumbent, alternates)
        last: dict[Candidate, Estimate] = {c: e for c in pool
                                           if (e := self.probe_estimate(c)) is not None}
        base = self.probe_estimate(incumbent)
        retries: dict[Candidate, int] = {}

        def predicted(c: Candidate) -> float:
            """Unmeasured (crossed) candidates: the incumbent x each swapped value's gain."""
            if c in last:
                return last[c].value
            value = base.value if base else 0.0
            for k, v in c.items:
                if v != incumbent[k]:
                    value *= self.gains.get((k, v), 1.0)
            return value

        for k in range(1, self.settings.max_stages + 1):
            if len(pool) == 1 and pool[0] in last and last[pool[0]].trusted:
                break
            stage = f"s{k}"
            steps = self.settings.probe_steps * self.settings.growth ** k
            # about as many jobs as the confirm stage: a small pool gets more rounds
            rounds = min(self.settings.max_rounds, max(1 + k, math.ceil(
                2 * self.settings.confirm_rounds / len(pool))))
            order = sorted(pool, key=lambda c: -predicted(c))
            jobs = self._rounds(order, stage, rounds, steps)
            while self._room(jobs) < len(jobs):  # fewer rounds, then fewer candidates
                if rounds > 2:
                    rounds -= 1
                elif len(order) > 2:
                    dropped = order.pop()
                    self.decide(stage, dropped, "budget", "left out: the budget holds fewer jobs")
                    self.stop_reason = self.stop_reason or self._budget_words(
                        f"at stage {stage}: candidates left out")
                    self.left_out.append(dropped)
                else:  # the halving ends here; the confirm stage keeps its reserve
                    self.stop_reason = self._budget_words(f"before stage {stage}")
                    self.decide(stage, "*", "budget", self.stop_reason)
                    self.pool = order
                    return
                jobs = self._rounds(order, stage, rounds, steps)
            pool = self.pool = order
            yield Wave(stage, tuple(jobs))
            pool, settled = self._halving_verdict(stage, pool, rounds, last, retries)
            self.pool = pool
            if settled or not pool:
                break

    def _halving_verdict(self, stage: str, pool: list[Candidate], rounds: int,
                         last: dict[Candidate, Estimate], retries: dict[Candidate, int]
                         ) -> tuple[list[Candidate], bool]:
        """Who goes on after a halving stage, and whether the stage settled it."""
        est = {c: e for c in pool if (e := self.estimate(c, (stage,))) is not None}
        for c in pool:
            if c not in est:
                self.decide(stage, c, "infeasible", self.infeasible(c) or "no figures")
        carried = []
        for c in (c for c in est if not est[c].trusted):
            retries[c] = retries.get(c, 0) + 1
            if retries[c] > self.settings.retries:
                self.decide(stage, c, "dropped", f"untrusted in {retries[c]} stages"
                            f" ({', '.join(est[c].why)}): no verdict can rest on it")
            else:
                carried.append(c)
                self.decide(stage, c, "retry", f"{', '.join(est[c].why)}: measured again,"
                            " longer; never ranked on this")
        trusted = sorted((c for c in est if est[c].trusted), key=lambda c: -est[c].value)
        last.update(est)
        if not trusted:
            return carried, False
        best, gain = trusted[0], self.settings.min_gain
        n_keep = max(1, math.ceil(len(trusted) * self.settings.keep))
        ties = [c for c in trusted[n_keep:] if est[c].tied(est[best], gain)]
        # a big pool must shrink (ties kept up to half of it); a small one keeps every
        # candidate within spread of the best: a tie, which the simplest wins
        cap = max(n_keep, math.ceil(len(trusted) / 2)) if len(trusted) > 3 else len(trusted)
        kept = [c for c in (trusted[:n_keep] + ties)[:cap]
                if c == best or est[c].tied(est[best], gain)]
        simplest = min([best, *ties], key=self.space.simplicity)
        if simplest not in kept:  # the tie rule's answer is never dropped by rank
            kept.append(simplest)
        for i, c in enumerate(trusted):
            place = f"rank {i + 1} of {len(trusted)}"
            if c in kept:
                self.decide(stage, c, "kept", f"{est[c].describe()}, {place}")
            elif est[c].tied(est[best], gain):
                self.decide(stage, c, "dropped", f"{est[c].describe()}: within spread of the"
                            f" best ({est[best].describe()}) but {place}; a stage keeps the"
                            f" best {self.settings.keep:.0%} and the ties, at most half")
            else:
                self.decide(stage, c, "dropped", f"{est[c].describe()}: slower than the best"
                            f" ({est[best].describe()}) beyond the spread")
        # settled: one left, or every one left within the measured spread of the best
        # (rounds >= 2: a spread was measured): a tie, which the simplest wins
        settled = not carried and (len(kept) == 1 or (
            rounds >= 2 and all(est[c].tied(est[best], gain) for c in kept)))
        return kept + carried, settled

    def _rounds(self, order: list[Candidate], stage: str, rounds: int, steps: int) -> list[Job]:
        """Every candidate once per round, forward then reversed (the rounds sweeper's order,
        so a steady drift hits every candidate alike)."""
        jobs = []
        for r in range(rounds):
            for c in (order if r % 2 == 0 else list(reversed(order))):
                jobs.append(self._job(c, stage, r, steps))
        return jobs

    def _settle_leader(self) -> None:
        """The winner among the pool: the best, or the simplest of those within its spread;
        trusted figures only, while any candidate has them."""
        # the budget's left-outs were measured before it cut them: still in the running
        running = [*self.pool, *self.left_out] or self.tried()
        pool = [c for c in dict.fromkeys(running) if not self.infeasible(c)]
        est = {c: e for c in pool if (e := self.latest(c)) is not None}
        trusted = {c: e for c, e in est.items() if e.trusted}
        ranked = trusted or est
        if not ranked:
            return
        best = max(ranked, key=lambda c: ranked[c].value)
        contenders = [c for c in ranked if ranked[c].tied(ranked[best], self.settings.min_gain)]
        if self.winner is None or self.status in ("budget", "interrupted"):
            self.winner = min(contenders, key=self.space.simplicity)
            self.winner_trusted = bool(trusted)
            self.tied_with = [c for c in contenders if c != self.winner]
            if self.tied_with and self.status == "running":
                self.decide(FINAL, self.winner, "tie", "within spread of " + "; ".join(
                    f"{c.label()} ({ranked[c].describe()})" for c in self.tied_with)
                    + f": the simplest wins ({SIMPLER})")

    def _confirm_steps(self) -> int:
        halving = sum(1 for s in self.stages if s["name"][1:].isdigit())
        return self.settings.probe_steps * self.settings.growth ** max(1, halving)

    # -- confirm
    def _confirm(self) -> Plan:
        winner, default = self.winner, self.space.default()
        if winner is None:
            return
        self.decide(FINAL, winner, "winner", "fastest" + (" (a tie)" if self.tied_with else "")
                    + ("" if self.winner_trusted else "; on untrusted figures only"))
        if winner == default:
            self.confirm = {"same_as_default": True}
            return
        failed = self.infeasible(default)
        if failed:  # measured already (the start point): no figure to confirm against
            self.confirm = {"default_failed": failed}
            return
        steps, rounds = self._confirm_steps(), self.settings.confirm_rounds
        jobs = self._rounds([winner, default], CONFIRM, rounds, steps)
        room = self._room(jobs, reserve=False)
        if room < 4:
            raise Stop(self._budget_words("before the confirm stage"))
        self.confirm = {"steps": steps, "rounds": rounds}
        yield Wave(CONFIRM, tuple(jobs[:room - room % 2]))
        for _ in range(self.settings.retries):  # a side with no trusted job: measured again
            w, d = self.estimate(winner, (CONFIRM,)), self.estimate(default, (CONFIRM,))
            if w is None or d is None or (w.trusted and d.trusted):
                break
            steps *= self.settings.growth
            more = [self._job(c, CONFIRM, rounds + r, steps)
                    for r, pair in enumerate(([winner, default], [default, winner])) for c in pair]
            if self._room(more, reserve=False) < len(more):
                break
            why = ", ".join(dict.fromkeys(e for side in (w, d) if not side.trusted for e in side.why))
            self.decide(CONFIRM, winner, "retry", f"{why}: both measured again, longer")
            rounds += 2
            self.confirm["rounds"] = rounds
            yield Wave(CONFIRM, tuple(more))
        w, d = self.estimate(winner, (CONFIRM,)), self.estimate(default, (CONFIRM,))
        self.confirm.update(winner=w, default=d, default_failed=self.infeasible(default))
