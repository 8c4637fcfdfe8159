"""What the search knows, and what it may still spend: every job launched with its outcome,
each candidate's figure in a stage, feasibility and the OOMs, the job-to-job noise, the
decisions said so far, the budget, and the one way a stage asks for probes (`probe`).
The stages (harness.autotune.fit, .screen, .halving) are functions of a Knowledge;
harness.autotune.search drives them.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

from harness.autotune.outcome import Outcome
from harness.autotune.settings import AUTO, Settings, job_budget
from harness.autotune.space import Candidate, Space
from harness.autotune.stats import Estimate, estimate, job_score, pooled_sigma

FIT, SCREEN, RECHECK, CONFIRM, FINAL = "fit", "screen", "recheck", "confirm", "final"
WARMUP = "warmup"  # a first job whose figures are not used (autotune.warmup_job)
PROBE_STAGES = (FIT, SCREEN, RECHECK)

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
    """warmup < fit < screen < recheck < s1 < s2 < ... < confirm."""
    if name == WARMUP:
        return -1
    if name in PROBE_STAGES:
        return PROBE_STAGES.index(name)
    if name == CONFIRM:
        return 1000
    return 10 + int(name[1:]) if name[1:].isdigit() else 999


@dataclass
class Knowledge:
    """What the search knows: every job launched and how it ended, the decisions, the
    budget; the stages (harness.autotune.fit, screen, halving) read and add to it."""

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

    # ---- what is known ---------------------------------------------------------------
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
        """The candidate's figure from the deepest stage that measured it, confirm (and the
        warm-up job) excluded."""
        stages = sorted({r.job.stage for r in self.records if r.job.candidate == candidate
                         and r.job.stage not in (CONFIRM, WARMUP)}, key=stage_rank, reverse=True)
        for stage in stages:
            found = self.estimate(candidate, PROBE_STAGES if stage in PROBE_STAGES else (stage,))
            if found is not None:
                return found
        return None

    # ---- budget ------------------------------------------------------------------------
    @property
    def job_cap(self) -> int | None:
        return job_budget(self.settings.budget, self.space.grid_points())

    def reserve(self) -> int:
        """Jobs kept for the confirm stage until it has run."""
        return 2 * self.settings.confirm_rounds if self.confirm is None else 0

    def job_seconds(self, candidate: Candidate, steps: int) -> float:
        """Seconds one job may take, on the safe side: the largest fixed part seen + steps x
        the candidate's slowest s/step (any candidate's before it ran), x 1.25."""
        mine = [p.seconds_per_step for r in self.records if r.job.candidate == candidate
                for p in r.outcome.phases.values()]
        anyone = [p.seconds_per_step for r in self.records for p in r.outcome.phases.values()]
        fixed = [max(0.0, r.outcome.job_seconds - (r.job.measured_steps + r.job.warmup_steps)
                     * sum(p.seconds_per_step for p in r.outcome.phases.values()))
                 for r in self.records]
        return 1.25 * (max(fixed, default=0.0) + steps * max(mine or anyone or [0.0]))

    def room(self, jobs: list[Job], reserve: bool = True) -> int:
        """How many of `jobs` (in order) fit the budget, the confirm stage's room kept."""
        cap, minutes = self.job_cap, self.settings.budget.minutes
        room = len(jobs)
        if cap is not None:
            room = min(room, cap - self.jobs_launched - (self.reserve() if reserve else 0))
        if minutes is not None:
            left = minutes * 60 - self.elapsed_s
            if reserve and self.confirm is None:
                leader = self.best(self.tried(), PROBE_STAGES) or self.space.default()
                left -= 2 * self.settings.confirm_rounds * self.job_seconds(
                    leader, self.confirm_steps() + self.settings.warmup_steps)
            spent, fits = 0.0, 0
            for job in jobs:
                spent += self.job_seconds(job.candidate, job.measured_steps + job.warmup_steps)
                if spent > left:
                    break
                fits += 1
            room = min(room, fits)
        return max(room, 0)

    def budget_words(self, where: str) -> str:
        budget, cap = self.settings.budget, self.job_cap
        parts = []
        if cap is not None:
            parts.append(f"{self.jobs_launched} of {cap} jobs"
                         + (" (auto: a third of the grid)" if budget.jobs == AUTO else ""))
        if budget.minutes is not None:
            parts.append(f"{self.elapsed_s / 60:.1f} of {budget.minutes:g} min")
        return f"stopped by the budget {where} ({', '.join(parts)} used)"

    # ---- probes ------------------------------------------------------------------------
    def job(self, candidate: Candidate, stage: str, round_: int, steps: int) -> Job:
        return Job(candidate, stage, round_, steps, self.settings.warmup_steps)

    def probe(self, stage: str, candidates: list[Candidate], again: Candidate | None = None
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
        jobs = [self.job(c, stage, 0, self.settings.probe_steps) for c in todo]
        if again in todo:
            jobs.append(self.job(again, stage, 1, self.settings.probe_steps))
        room = self.room(jobs)
        if room == 0:
            raise Stop(self.budget_words(f"before {stage}"))
        for job in jobs[room:]:
            if job.round:
                continue
            self.decide(stage, job.candidate, "budget", "not probed: the budget is spent")
            self.stop_reason = self.stop_reason or self.budget_words(f"at {stage}: not probed")
            self.left_out.append(job.candidate)
        yield Wave(stage, tuple(jobs[:room]))
        for job in jobs[:room]:
            reason = self.infeasible(job.candidate)
            if reason:
                self.decide(stage, job.candidate, "infeasible", reason)
        return list(dict.fromkeys(j.candidate for j in jobs[:room]))

    def best(self, candidates: list[Candidate], stages: tuple[str, ...]) -> Candidate | None:
        """The fastest feasible candidate (trusted figures first)."""
        scored = [(e.trusted, e.value, c) for c in candidates if not self.infeasible(c)
                  and (e := self.estimate(c, stages)) is not None]
        return max(scored, key=lambda s: (s[0], s[1]))[2] if scored else None

    def confirm_steps(self) -> int:
        """The confirm stage's measured steps: the last halving stage's (at least one
        growth over a probe's)."""
        halving = sum(1 for s in self.stages if s["name"][1:].isdigit())
        return self.settings.probe_steps * self.settings.growth ** max(1, halving)

