"""What one job said, as the core reads it: its status, the objective's figures and whether
they can be trusted. harness.autotune.reading builds it from a job's result.json; the unit
tests build it from a planted landscape.

Trust (issue #20 owns the rules): a phase flagged thin, noisy or contended is `trusted`
false, `why` naming the flags; its figures rank nothing, and the candidate is measured
again, longer. `rate_range`, where a job gives one, is its own interval of the phase's rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

USABLE = ("ok", "partial")  # harness.measured.USABLE: statuses whose figures measure the point
INFEASIBLE = ("oom", "failed", "invalid")
UNKNOWN = ("interrupted", "missing", "unreadable", "running")  # the sweep was stopped


@dataclass(frozen=True)
class Phase:
    seconds_per_step: float  # the phase's robust step time (median), warm-up excluded
    examples_per_step: float  # all ranks
    rate_range: tuple[float, float] | None = None  # examples/s interval of this job, if known


@dataclass(frozen=True)
class Outcome:
    status: str  # ok | partial | oom | failed | invalid | interrupted | missing | unreadable
    reason: str | None = None
    phases: dict[str, Phase] = field(default_factory=dict)  # "train", "inference"
    trusted: bool = True
    why: tuple[str, ...] = ()  # why not trusted: thin, noisy, contended
    compile_charge_s: float = 0.0  # one-off seconds (compile), spread over planned_steps
    bound_by: str | None = None  # result.json diagnosis.bound_by
    data_share: float | None = None  # the objective's share of a step waiting for data
    job_seconds: float = 0.0  # result.json duration_s
    ended_at: float | None = None  # seconds since the epoch, from started_at + duration_s
    peak_memory_bytes: float | None = None

    @property
    def measured(self) -> bool:
        return self.status in USABLE and bool(self.phases)

    @property
    def oom(self) -> bool:
        return self.status == "oom"

    @property
    def unknown(self) -> bool:
        """The job did not end (the sweep was stopped, or it is still running)."""
        return self.status in UNKNOWN

    @property
    def infeasible(self) -> bool:
        """OOM, a failure, invalid, or no figures for the objective: the point cannot win."""
        return self.status in INFEASIBLE or (self.status in USABLE and not self.phases)
