"""result.json, one typed record per run: what ran, how it ended and what it measured. The single
description of the file: docs/running.md lists its fields from the descriptions below."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 3
# Versions this harness reads: 1 had the same layout without the fields added since; 2 also
# copied figures into `metrics` that now live only where they belong (diagnosis, observed).
READABLE_VERSIONS = (1, 2, 3)

Status = Literal["running", "ok", "partial", "invalid", "failed", "oom", "interrupted"]
# Blocks written only when they hold something (a run without SLURM has no `slurm`).
OPTIONAL = ("precision_note", "distributed", "slurm", "isolation", "repeats", "report_errors", "error_log",
            "tracking", "nsys_command", "phase_errors", "sweep_round", "diagnosis", "torch_settings",
            "clocks", "threads", "code_dir", "code_commit", "fresh_process_s", "scaling")


class _Record(BaseModel):
    # Unknown keys are kept (a newer harness may add some), values are checked on load.
    model_config = ConfigDict(extra="allow", validate_assignment=False)


class Device(_Record):
    accelerator: str = Field(description="cpu, cuda or mps: the device type the run used")
    device_name: str = Field(description="the GPU's name (CUDA), else the CPU model")
    device_count: int = Field(description="devices of that type visible to the process")
    world_size: int = Field(1, description="processes (ranks) of the run")
    memory_bytes: int | None = Field(None, description="the GPU's memory (CUDA), else the machine's RAM")


class Repeats(_Record):
    requested: int = Field(description="the `repeat` knob")
    completed: int = Field(description="repeats that ran to their end")
    what: str = Field(description="how `metrics` summarises the repeats")
    min: dict[str, Any] = Field(default_factory=dict, description="per metric, the lowest repeat")
    max: dict[str, Any] = Field(default_factory=dict, description="per metric, the highest repeat")
    per_repeat: list[dict[str, Any]] = Field(
        default_factory=list, description="every repeat's own metrics, in run order")


class OptimizerStep(_Record):
    """What one optimizer step of the fit took, as it ran (global_batch_size is held to it)."""

    micro_batch: int | None = Field(None, description="examples per batch on one rank")
    accumulation: int = Field(1, description="batches per optimizer step"
                              " (trainer.accumulate_grad_batches as the fit ran it)")
    world_size: int = Field(1, description="ranks, each with batches of its own")
    examples: int | None = Field(None, description="examples per optimizer step, all ranks: the"
                                 " most common over the fit's steps (null: batches not readable)")
    steps: int = Field(0, description="optimizer steps of the fit (on this rank)")
    other_steps: int = Field(0, description="of those, steps that took another number of"
                             " examples (an epoch's last, short of batches)")


class Observed(_Record):
    """What really ran, read off the run itself, to hold against the knobs."""

    examples_per_batch: dict[str, int | None] = Field(
        default_factory=dict, description="phase -> the most common number of examples in a"
        " batch on one rank (Lightning's batch-size extraction); null: not readable")
    examples_source: str | None = Field("batches", description="batches (read off them), knob (unreadable:"
                                        " batch_size used) or null (no batch ran)")
    compiled_graphs: int | None = Field(None, description="graphs TorchDynamo compiled (null: compile off)")
    graph_breaks: int | None = Field(None, description="graph breaks TorchDynamo met")
    optimizer_step: OptimizerStep | None = Field(None, description="training: micro-batch x accumulation x"
                                                 " ranks = examples per optimizer step, as the fit ran them")
    checkpointed: dict[str, int] | None = Field(None, description="activation_checkpointing: class ->"
                                                " modules wrapped (null: off, or no block found)")
    notes: list[str] = Field(default_factory=list, description="differences from the knobs that did not make"
                             " it invalid; what activation_checkpointing wrapped, and how it found them")


class Finding(_Record):
    kind: str = Field(description="data-bound, host-bound, communication-bound, low-mfu, compute-bound,"
                      " precision, graph-breaks, memory-headroom, memory-limit, contended, thin, noisy")
    score: float | None = Field(description="the share of the step it costs (0..1), what ranks the step's"
                                " findings; null for findings about the run, which follow them")
    message: str = Field(description="what was found, with its numbers")
    next_step: str = Field(description="one concrete thing to try")


class Diagnosis(_Record):
    """Why the run is slow (the diagnose preset). Per phase (train_, inference_): the step's
    shares, the passes' rates, FLOPs, FLOP/s and MFU."""

    bound_by: Literal["data", "compute", "host", "communication", "unknown"] = Field(
        description="the largest share of a training step; unknown when the step was not"
        " split, or its noise exceeds the gap between the largest share and the next")
    verdict: str = Field(description="one line: the bound and its evidence; `contended: ...`"
                         " first for a contended run, `no verdict: noisy: ...` when the"
                         " run's noise exceeds the gap between the two largest shares")
    train_data_share: float | None = Field(None, description="of the median training step,"
                                           " waiting for data the input pipeline explains")
    train_compute_share: float | None = Field(None, description="the model alone")
    train_compute_share_range: list[float] | None = Field(
        None, description="the compute share with the model pass's quickest and slowest step:"
        " its noise (every <phase>_<bound>_share has a _range)")
    train_communication_share: float | None = Field(None, description="collectives not hidden")
    train_host_share: float | None = Field(None, description="Lightning's loop, callbacks,"
                                           " logging, launch overhead")
    train_flops_per_step: int | None = Field(None, description="FLOPs of one training step on"
                                             " one rank (forward + backward)")
    train_flop_per_s: float | None = Field(None, description="FLOPs per step / the median"
                                           " iteration (train_median_step_s), per device")
    train_step_noise: float | None = Field(None, description="the run's spread of a training"
                                           " step: 1.4826 x MAD / median")
    train_mfu: float | None = Field(None, description="train_flop_per_s / the device's dense"
                                    " peak (null without a peak)")
    inference_data_share: float | None = None
    inference_compute_share: float | None = None
    inference_communication_share: float | None = None
    inference_host_share: float | None = None
    inference_flops_per_step: int | None = None
    inference_flop_per_s: float | None = None
    inference_mfu: float | None = None
    peak_source: str | None = Field(None, description="where the MFU's peak came from")
    flop_convention: str = Field(description="how FLOPs are counted")
    communication_by_rank: list[dict[str, Any]] | None = Field(
        None, description="multi-process: per rank (and node), seconds of an optimizer step:"
        " compute_s, comm_s (collectives not hidden), data_wait_s, straggler_wait_s")
    findings: list[Finding] = Field(default_factory=list, description="the step's findings by"
                                    " share, largest first, then the run's")
    passes: dict[str, Any] = Field(default_factory=dict, description="what the extra passes"
                                   " did and cost (cost_s), how the state was restored")


class Tracking(_Record):
    backend: str = Field("mlflow", description="the experiment tracker")
    tracking_uri: str | None = Field(None, description="the store, as an absolute URI")
    experiment_id: str | None = None
    run_id: str | None = None
    parent_run_id: str | None = Field(None, description="the sweep's parent run, if any")
    logged: bool = Field(False, description="whether everything reached the store")
    tags: dict[str, str] = Field(default_factory=dict, description="tags the run was given")
    failure: str | None = Field(None, description="why tracking stopped, when it did")
    not_logged: list[str] = Field(default_factory=list, description="what the store lacks")
    upload_command: str | None = Field(None, description="the command that uploads the run")


class RunResult(_Record):
    schema_version: int = Field(SCHEMA_VERSION, description="layout version of this file")
    status: Status = Field(
        "running", description="ok; partial (a phase failed after another was measured); invalid (what"
        " ran contradicts a knob: figures kept, not comparable); failed; oom; interrupted")
    reason: str | None = Field(None, description="one line: why the status is not ok, and the fix")
    knobs: dict[str, Any] = Field(
        default_factory=dict, description="the validated top-level knobs (batch_size, precision,"
        " lightning_precision, compile, compile_module, mode, seed, repeat, check_knobs,"
        " global_batch_size, accumulation, activation_checkpointing)")
    overrides: list[str] = Field(default_factory=list, description="the job's command-line / sweep overrides")
    metrics: dict[str, Any] = Field(default_factory=dict, description="flat headline figures, unit in the"
                                    " name (_s, _bytes, _per_second, _share); null: not measured")
    observed: Observed | None = Field(
        None, description="what really ran: examples per batch, precision, compiled graphs;"
        " checked against the knobs (a contradiction makes the run invalid)")
    diagnosis: Diagnosis | None = Field(
        None, description="why the run is slow: bound_by, the step's shares, FLOPs, MFU,"
        " findings (the diagnose preset; docs/presets/diagnose.md)")
    flags: list[str] = Field(
        default_factory=list, description="cautions about the figures: thin:<phase> (fewer measured"
        " steps than min_measured_steps), warmup_swallowed:<phase> (every step was warm-up),"
        " contended:<phase> (other processes took the machine during the phase's measured window, above"
        " profiler.speed.contended_above), noisy:<phase> (its step times vary too much for its figures"
        " to be read as precise), nonfinite_loss (a training loss was NaN or infinite)")
    clocks: dict[str, str] | None = Field(
        None, description="metric -> the clock that made it: host, step, events, window or"
        " dispatch (the speed preset; docs/presets/speed.md#clocks)")
    phase_errors: dict[str, str] = Field(
        default_factory=dict, description="phase -> why it has no figures (status partial)")
    sweep_round: int | None = Field(
        None, description="in a sweep with repeat=N: the round (0..N-1) this job belongs to")
    threads: int | None = Field(
        None, description="torch threads set for the job by sweep.threads (the same for every job"
        " of a sweep; torch_settings.num_threads is what ran); null: torch's default")
    code_dir: str | None = Field(None, description="code_dir: the directory first on the job's"
                                 " import path (the job ran in a fresh process)")
    code_commit: str | None = Field(None, description="code_dir's git commit, '+dirty' with"
                                    " uncommitted changes; null: not a git tree")
    fresh_process_s: float | None = Field(
        None, description="code_dir: seconds from the start of the job's fresh process until"
        " torch and Lightning were imported, which a job in the sweep's own process skips")
    precision_used: str | None = Field(None, description="the precision Lightning really ran")
    precision_note: str | None = Field(None, description="why it differs from the knob")
    device: Device | None = Field(None, description="what the run ran on")
    versions: dict[str, str | None] = Field(
        default_factory=dict, description="python, torch, cuda, lightning, hydra-core, harness")
    host: str | None = Field(None, description="the machine's host name")
    model: str | None = Field(None, description="model._target_")
    data: str | None = Field(None, description="data._target_ (null: the module's own loaders)")
    distributed: dict[str, Any] | None = Field(None, description="strategy, num_nodes, devices_per_node,"
                                               " cluster_environment (the world size is device.world_size)")
    slurm: dict[str, Any] | None = Field(None, description="SLURM's facts about the job")
    scaling: dict[str, Any] | None = Field(
        None, description="the scaling preset: per rank (and node) compute, exposed"
        " communication, data wait and wait for others per optimizer step; the late rank; the"
        " allreduce's bytes and bandwidth (docs/presets/scaling.md)")
    isolation: dict[str, Any] | None = Field(
        None, description="resets done before the measurement and the resident set it started from")
    torch_settings: dict[str, Any] | None = Field(
        None, description="process-wide torch settings the measurement ran with, read after it"
        " (cudnn_*, float32_matmul_precision, *_allow_tf32, fp32_precision_*, deterministic_*,"
        " sdp_*, num_threads, default_dtype; null: unreadable); isolation.torch_settings_put_back"
        " names those the job changed and harness set back")
    repeats: Repeats | None = Field(None, description="with repeat > 1: each repeat's figures")
    report_errors: dict[str, str] = Field(default_factory=dict,
                                          description="preset -> why its report was not written")
    error_log: str | None = Field(None, description="file holding the traceback of a failure")
    tracking: Tracking | None = Field(None, description="where the run was tracked")
    nsys_command: str | None = Field(None, description="profiler=nsys: the command nsys ran")
    reports: list[str] = Field(default_factory=list,
                               description="report files, relative to the run directory")
    started_at: str | None = Field(None, description="ISO 8601 start time, UTC")
    duration_s: float | None = Field(None, description="wall time of the whole job, seconds")

    def figures(self) -> dict[str, Any]:
        """Every headline number of the run in one flat mapping (the sweep table, MLflow):
        `metrics`, the diagnosis's per-phase figures and the compiled graphs and breaks."""
        found = dict(self.metrics)
        if self.observed is not None:
            for key in ("compiled_graphs", "graph_breaks"):
                if getattr(self.observed, key) is not None:
                    found[key] = getattr(self.observed, key)
        if self.diagnosis is not None:
            found.update({key: value for key, value in self.diagnosis.model_dump().items()
                          if key.startswith(("train_", "validation_", "inference_"))
                          and isinstance(value, (int, float)) and not isinstance(value, bool)})
        return found

    def as_json(self) -> dict[str, Any]:
        """The file's content; optional blocks that hold nothing are left out."""
        return {k: v for k, v in self.model_dump(mode="json").items()
                if not (k in OPTIONAL and v in (None, {}, []))}

