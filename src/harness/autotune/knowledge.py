"""What the search knows and may still spend, and `probe`, the one way a stage asks for jobs;
the stages (fit, screen, halving) are functions of a Knowledge driven by search."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from itertools import accumulate, takewhile

from harness.autotune.outcome import Outcome
from harness.autotune.score import Estimate, estimate, job_sample
from harness.autotune.settings import AUTO, Settings, job_budget
from harness.autotune.space import Candidate, Space
from harness.judge import job_noise

FIT, SCREEN, RECHECK, CONFIRM, FINAL = "fit", "screen", "recheck", "confirm", "final"
WARMUP = "warmup"  # a first job whose figures are not used (autotune.warmup_job)
PROBE_STAGES = (FIT, SCREEN, RECHECK)
GIB = 2**30

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
    """warmup < fit < screen < recheck < s1 < s2 < ... < confirm (the stages a job runs in)."""
    order = (WARMUP, *PROBE_STAGES)
    return order.index(name) if name in order else 1000 if name == CONFIRM else 10 + int(name[1:])


@dataclass
class Knowledge:
    """What the search knows (the module docstring); the stages read and add to it."""

    space: Space
    settings: Settings
    records: list[Record] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    status: str = "running"  # running, done, budget, interrupted, infeasible
    stop_reason: str | None = None
    stages: list[dict] = field(default_factory=list)  # name, measured_steps, rounds, jobs
    largest_fit: int | None = None  # the start point's batch ladder
    first_oom: int | None = None
    ladders: list[dict] = field(default_factory=list)  # each fit ladder: its point, largest, OOM
    pool: list[Candidate] = field(default_factory=list)  # still in the running
    kept: list[Candidate] = field(default_factory=list)  # alternates of several keys, whole
    left_out: list[Candidate] = field(default_factory=list)  # cut by the budget, unmeasured
    winner: Candidate | None = None
    winner_trusted: bool = True  # false: no trusted figure was left to rank on
    tied_with: list[Candidate] = field(default_factory=list)
    confirm: dict | None = None
    elapsed_s: float = 0.0

    def __post_init__(self) -> None:
        self.gains: dict[tuple[str, str], float] = {}  # (key, value) -> rate vs the value chosen

    @property
    def jobs_launched(self) -> int:
        return len(self.records)

    def outcomes(self, candidate: Candidate, stages: tuple[str, ...] | None = None) -> list[Outcome]:
        return [r.outcome for r in self.records if r.job.candidate == candidate
                and (stages is None or r.job.stage in stages)]

    def estimate(self, candidate: Candidate, stages: tuple[str, ...] = PROBE_STAGES) -> Estimate | None:
        return estimate(self.outcomes(candidate, stages), self.settings, self.sigma())

    def failed(self, candidate: Candidate) -> str | None:
        """Why the candidate did not run as asked: a job of it ended oom, failed or invalid."""
        return next((f"{o.status}: {o.reason or 'no figures for the objective'}"
                     for o in self.outcomes(candidate) if o.infeasible), None)

    def tight(self, candidate: Candidate) -> str | None:
        """Why the candidate runs too close to the device's memory (autotune.memory_margin): a
        job of it peaked above (1 - margin) of its CUDA device's memory. A batch that just fits
        in a short probe runs out later in the real run (fragmentation, a longer batch)."""
        limit = 1 - self.settings.memory_margin
        for o in self.outcomes(candidate):
            used, total = o.device_allocated_bytes, o.device_memory_bytes
            if o.accelerator == "cuda" and used and total and used > limit * total:
                return (f"tight: peak {used / GIB:.1f} GiB allocated, {used / total:.0%} of the"
                        f" device's {total / GIB:.1f} GiB (above 1 - autotune.memory_margin ="
                        f" {limit:.0%})")
        return None

    def infeasible(self, candidate: Candidate) -> str | None:
        """Why the candidate cannot win: it failed (oom, failed, invalid) or is tight."""
        return self.failed(candidate) or self.tight(candidate)

    def ran_oom(self, candidate: Candidate) -> bool:
        return any(o.oom for o in self.outcomes(candidate))

    def above_known_oom(self, candidate: Candidate) -> Candidate | None:
        """A memory twin of `candidate` with a batch no larger that ran out of memory."""
        batch = self.space.batch
        if batch is None:
            return None
        size = int(candidate[batch.name])
        return next((r.job.candidate for r in self.records if r.outcome.oom and size >= int(
            r.job.candidate[batch.name]) and self.space.memory_twin(r.job.candidate, candidate)), None)

    def tried(self) -> list[Candidate]:
        return list(dict.fromkeys(r.job.candidate for r in self.records))

    def decide(self, stage: str, candidate: Candidate | str, action: str, why: str) -> None:
        label = candidate if isinstance(candidate, str) else candidate.label()
        self.decisions.append(Decision(stage, label, action, why))

    def sigma(self) -> float:
        """The job-to-job noise (harness.judge.job_noise) of the points run twice in a stage."""
        groups: dict[tuple[Candidate, str], list[float]] = {}
        for r in self.records:
            sample = job_sample(r.outcome, self.settings)
            if sample is not None and sample.counted:
                stage = "probe" if r.job.stage in PROBE_STAGES else r.job.stage
                groups.setdefault((r.job.candidate, stage), []).append(sample.figure)
        return job_noise(list(groups.values()), self.settings.noise_floor / 2)

    def latest(self, candidate: Candidate, skip: tuple[str, ...] = (CONFIRM, WARMUP)) -> Estimate | None:
        """The candidate's figure from the deepest stage that measured it, `skip` excluded."""
        stages = sorted({r.job.stage for r in self.records if r.job.candidate == candidate
                         and r.job.stage not in skip}, key=stage_rank, reverse=True)
        found = (self.estimate(candidate, PROBE_STAGES if s in PROBE_STAGES else (s,)) for s in stages)
        return next((e for e in found if e is not None), None)

    @property
    def job_cap(self) -> int | None:
        return job_budget(self.settings.budget, self.space.grid_points())

    def job_seconds(self, candidate: Candidate, steps: int) -> float:
        """Seconds one job may take, on the safe side (docs/autotune.md, "The budget")."""
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
        kept = 2 * self.settings.confirm_rounds if reserve and self.confirm is None else 0
        room = len(jobs)
        if cap is not None:
            room = min(room, cap - self.jobs_launched - kept)
        if minutes is not None:
            left = minutes * 60 - self.elapsed_s
            if kept:
                leader = self.best(self.tried()) or self.space.default()
                left -= kept * self.job_seconds(leader, self.confirm_steps() + self.settings.warmup_steps)
            spent = accumulate(self.job_seconds(j.candidate, j.measured_steps + j.warmup_steps) for j in jobs)
            room = min(room, sum(1 for _ in takewhile(lambda s: s <= left, spent)))
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

    def job(self, candidate: Candidate, stage: str, round_: int, steps: int) -> Job:
        return Job(candidate, stage, round_, steps, self.settings.warmup_steps)

    def probe(self, stage: str, candidates: list[Candidate], again: Candidate | None = None) -> Plan:
        """Probe the candidates not measured yet nor above a known OOM; `again` twice in the wave."""
        todo = []
        for c in dict.fromkeys(c for c in candidates if not self.outcomes(c, PROBE_STAGES)):
            twin = self.above_known_oom(c)
            if twin is None:
                todo.append(c)
            else:
                self.decide(stage, c, "skipped", f"above a known OOM ({twin.label()})")
        if not todo:
            return
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

    def best(self, candidates: list[Candidate], stages: tuple[str, ...] = PROBE_STAGES) -> Candidate | None:
        """The fastest feasible candidate (trusted figures first)."""
        scored = [(e.trusted, e.value, c) for c in candidates if not self.infeasible(c)
                  and (e := self.estimate(c, stages)) is not None]
        return max(scored, key=lambda s: (s[0], s[1]))[2] if scored else None

    def confirm_steps(self) -> int:
        """The last halving stage's measured steps (at least one growth over a probe's)."""
        halving = sum(1 for s in self.stages if s["name"][1:].isdigit())
        return self.settings.probe_steps * self.settings.growth ** max(1, halving)

