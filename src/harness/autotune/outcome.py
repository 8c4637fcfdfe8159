"""What one job said, as the core reads it: its status, the objective's figures and why they
are not trusted (noisy, contended). Built by harness.autotune.reading, or a planted landscape."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.measured import USABLE


@dataclass(frozen=True)
class Phase:
    seconds_per_step: float  # the phase's robust step time (median), warm-up excluded
    examples_per_step: float  # all ranks
    spread: float | None = None  # the job's own band half-width, a share (harness.judge)


@dataclass(frozen=True)
class Outcome:
    status: str  # ok | partial | oom | failed | invalid | interrupted | missing | unreadable
    reason: str | None = None
    phases: dict[str, Phase] = field(default_factory=dict)  # "train", "inference"
    trusted: bool = True
    why: tuple[str, ...] = ()  # why not trusted: noisy, contended
    compile_charge_s: float = 0.0  # one-off seconds (compile), spread over planned_steps
    bound_by: str | None = None  # result.json diagnosis.bound_by
    data_share: float | None = None  # the objective's share of a step waiting for data
    job_seconds: float = 0.0  # result.json duration_s
    ended_at: float | None = None  # seconds since the epoch, from started_at + duration_s
    # Memory, as the sweep table reads it (harness.measured.peak_memory): bytes and source
    peak_memory_bytes: float | None = None
    memory_source: str | None = None  # device allocated, peak RSS increase, process RSS
    accelerator: str | None = None  # result.json device.accelerator: cpu, cuda, mps
    device_allocated_bytes: float | None = None  # CUDA: torch's peak allocated, the process
    device_memory_bytes: float | None = None  # CUDA: the device's memory (device.memory_bytes)

    @property
    def measured(self) -> bool:
        return self.status in USABLE and bool(self.phases)

    @property
    def oom(self) -> bool:
        return self.status == "oom"

    @property
    def unknown(self) -> bool:
        return self.status in ("interrupted", "missing", "unreadable", "running")  # the job did not end

    @property
    def infeasible(self) -> bool:
        """OOM, a failure, invalid, or no figures for the objective: the point cannot win."""
        return self.status in ("oom", "failed", "invalid") or (self.status in USABLE and not self.phases)
