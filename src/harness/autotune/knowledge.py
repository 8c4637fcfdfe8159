"""What the search knows and may still spend, and `probe`, the one way a stage asks for jobs;
the stages (fit, screen, halving) are functions of a Knowledge driven by search."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from itertools import accumulate, takewhile

from harness.autotune.outcome import Outcome
from harness.autotune.score import Estimate, estimate, job_sample
from harness.autotune.settings import AUTO, Settings, job_budget
from harness.autotune.space import BATCH, Candidate, Space
from harness.judge import Evidence, Verdict, compare, job_noise

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


def halving_stage(name: str) -> bool:
    """s1, s2, ...: the stages that run their candidates in alternating rounds."""
    return name[:1] == "s" and name[1:].isdigit()


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
    stages: list[dict] = field(default_factory=list)  # name, measured_steps, rounds
    ladders: list[dict] = field(default_factory=list)  # each fit ladder, the start point's first
    pool: list[Candidate] = field(default_factory=list)  # still in the running
    kept: list[Candidate] = field(default_factory=list)  # alternates of several keys, whole
    left_out: list[Candidate] = field(default_factory=list)  # cut by the budget, unmeasured
    winner: Candidate | None = None
    winner_trusted: bool = True  # false: no trusted figure was left to rank on
    tied_with: list[Candidate] = field(default_factory=list)
    confirm: dict | None = None
    elapsed_s: float = 0.0
    gains: dict[tuple[str, str], float] = field(default_factory=dict)  # (key, value): rate vs chosen

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
        """Why a job of the candidate peaked above (1 - autotune.memory_margin) of its CUDA device's
        memory: a batch that just fits a short probe runs out later (fragmentation, a longer batch)."""
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
        return next((r.job.candidate for r in self.records if batch and r.outcome.oom
                     and int(candidate[batch.name]) >= int(r.job.candidate[batch.name])
                     and self.space.memory_twin(r.job.candidate, candidate)), None)

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

    def figure(self, candidate: Candidate) -> tuple[str, Estimate] | None:
        """(stage, figure) from the deepest stage that ranked the candidate (confirm aside): the one
        figure the search went on; the confirm stage's for one it ran in no other (a default outside
        the space searched). The probes (fit, screen, recheck) pool, named by the latest."""
        ran = {r.job.stage for r in self.records if r.job.candidate == candidate} - {WARMUP}
        stages = sorted(ran - {CONFIRM} or ran, key=stage_rank, reverse=True)
        found = ((s, self.estimate(candidate, PROBE_STAGES if s in PROBE_STAGES else (s,))) for s in stages)
        return next(((s, e) for s, e in found if e is not None), None)

    def evidence(self, candidate: Candidate, stage: str | None = None) -> Evidence | None:
        """What the judge compares the candidate on: its band in `stage` (None: its `figure`'s) and
        its job of each round, keyed (stage, round): the confirm stage's, else every halving stage's
        (their pairs add up: one stage's few rounds decide little, and one odd job sways them)."""
        if stage is None:
            stage, band = self.figure(candidate) or ("", None)
        else:
            band = self.estimate(candidate, (stage,))
        if band is None:
            return None
        paired = halving_stage if halving_stage(stage) else (lambda s: s == stage == CONFIRM)
        rounds = {(r.job.stage, r.job.round): sample for r in self.records
                  if r.job.candidate == candidate and paired(r.job.stage)
                  and (sample := job_sample(r.outcome, self.settings)) is not None}
        return Evidence(band, rounds)

    def compare(self, a: Evidence | None, b: Evidence | None) -> Verdict | None:
        """B against A by harness.judge.compare, at autotune.min_gain and the search's job-to-job noise."""
        return None if a is None or b is None else compare(a, b, self.settings.min_gain, self.sigma())

    @property
    def job_cap(self) -> int | None:
        return job_budget(self.settings.budget, self.space.grid_points())

    def job_seconds(self, candidate: Candidate, steps: int) -> float:
        """Seconds a job of `steps` measured steps may take, on the safe side (autotune.md, "The budget")."""
        mine = [p.seconds_per_step for r in self.records if r.job.candidate == candidate
                for p in r.outcome.phases.values()]
        anyone = [p.seconds_per_step for r in self.records for p in r.outcome.phases.values()]
        fixed = [max(0.0, r.outcome.job_seconds - (r.job.measured_steps + r.job.warmup_steps)
                     * sum(p.seconds_per_step for p in r.outcome.phases.values()))
                 for r in self.records]
        steps += self.settings.warmup_steps
        return 1.25 * (max(fixed, default=0.0) + steps * max(mine or anyone or [0.0]))

    def screen_jobs(self) -> int:
        """The screen's probes: one per other value of each key but the batch's."""
        return sum(len(k.listed()) - 1 for k in self.space.keys if k.role != BATCH)

    def room(self, jobs: list[Job], confirm_kept: int | None = None) -> int:
        """How many of `jobs` (in order) fit the budget, the stages still to come kept: the
        confirm stage's jobs (`confirm_kept` of them; None: 2 x confirm_rounds) until it starts,
        and while the fit stage runs, the screen's probes."""
        cap, minutes = self.job_cap, self.settings.budget.minutes
        confirming = 0 if self.confirm is not None else (
            2 * self.settings.confirm_rounds if confirm_kept is None else confirm_kept)
        screening = self.screen_jobs() if jobs and jobs[0].stage in (WARMUP, FIT) else 0
        room = len(jobs) if cap is None else min(len(jobs), cap - len(self.records) - confirming - screening)
        if minutes is not None:
            left = minutes * 60 - self.elapsed_s
            leader = self.best(self.tried()) or self.space.default()
            left -= (confirming * self.job_seconds(leader, self.confirm_steps())
                     + screening * self.job_seconds(leader, self.settings.probe_steps))
            spent = accumulate(self.job_seconds(j.candidate, j.measured_steps) for j in jobs)
            room = min(room, sum(1 for _ in takewhile(lambda s: s <= left, spent)))
        return max(room, 0)

    def budget_words(self, where: str) -> str:
        """'stopped by the budget at fit (autotune.budget.jobs=10)'."""
        budget = self.settings.budget
        parts = [f"autotune.budget.jobs={budget.jobs}" + (f": {self.job_cap}" if budget.jobs == AUTO else "")
                 ] if self.job_cap is not None else []
        if budget.minutes is not None:
            parts.append(f"autotune.budget.minutes={budget.minutes:g}")
        return f"stopped by the budget {where} ({', '.join(parts)})"

    def job(self, candidate: Candidate, stage: str, round_: int, steps: int) -> Job:
        return Job(candidate, stage, round_, steps, self.settings.warmup_steps)

    def probe(self, stage: str, candidates: list[Candidate], again: Candidate | None = None) -> Plan:
        """Probe the candidates not measured yet nor above a known OOM; `again` twice in the wave."""
        todo = []
        for c in dict.fromkeys(c for c in candidates if not self.outcomes(c, PROBE_STAGES)):
            if (twin := self.above_known_oom(c)) is not None:
                self.decide(stage, c, "skipped", f"above a known OOM ({twin.label()})")
            else:
                todo.append(c)
        jobs = [self.job(c, stage, 0, self.settings.probe_steps) for c in todo]
        if again in todo:
            jobs.append(self.job(again, stage, 1, self.settings.probe_steps))
        room = self.room(jobs)
        for job in (j for j in jobs[room:] if not j.round):  # the calibration's second job aside
            self.decide(stage, job.candidate, "budget", "not probed: the budget's rest is kept for"
                        + (" the screen and" if stage == FIT else "") + " the confirm stage")
            self.stop_reason = self.stop_reason or self.budget_words(f"at {stage}")
            self.left_out.append(job.candidate)
        if room:
            yield Wave(stage, tuple(jobs[:room]))
        for job in jobs[:room]:
            if reason := self.infeasible(job.candidate):
                self.decide(stage, job.candidate, "infeasible", reason)

    def best(self, candidates: list[Candidate], stages: tuple[str, ...] = PROBE_STAGES) -> Candidate | None:
        """The fastest feasible candidate (trusted figures first)."""
        scored = [(e.trusted, e.value, c) for c in candidates if not self.infeasible(c)
                  and (e := self.estimate(c, stages)) is not None]
        return max(scored, key=lambda s: (s[0], s[1]))[2] if scored else None

    def confirm_steps(self) -> int:
        """The last halving stage's measured steps (at least one growth over a probe's)."""
        halving = sum(1 for s in self.stages if halving_stage(s["name"]))
        return self.settings.probe_steps * self.settings.growth ** max(1, halving)

