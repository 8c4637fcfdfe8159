"""autotune's planted landscape: the costs of a step, chosen here, so the right answer is
known. tests/autotune_workload.py sleeps them in real harness jobs (the CI test,
tests/test_autotune.py); `Landscape` computes them with seeded noise, for the unit tests of
the search core (tests/test_autotune_search.py). Nothing here imports torch.

  training step (ms) = A + C * min(b, KNEE) + K * C * max(0, b - KNEE) + W * (workers - 2)
                       C = C32 with fp32, C16 with bf16; W: what each loader worker beyond
                       the second costs the main process (they share its cores)
  batch fetch (ms)   = F0 + F1 * b, in the loader's process: with w workers a batch
                       arrives every fetch / w, hidden behind the step
  b > MAX_FIT        out of memory at the first step
  compile            the same step time: it buys nothing, and costs its compile time

From the default configuration (batch_size=32, fp32, 0 workers, no compile) the fastest
setting is PLANTED_BEST, batch_size=64 precision=bf16 data.num_workers=2 compile=false, 3.4x
the default. With Lightning's ~3 ms of its own per step, every other setting is at least
1.35x slower there: fp32 2.3x, no loader workers 1.6x (the fetch adds to the step), 4
workers 1.6x, batch 32 1.35x, batch 128 (the largest that fits) 1.5x: margins that a loaded
machine's noise does not flip. The gains hold along the way from the default too (at batch
32 and fp32, 2 workers are 1.27x faster than none), and 2 workers deliver a batch in a third
of a step, so a loaded machine's late wake-ups do not starve the step. compile=true has the
same step and pays its compile time over autotune.planned_steps (about 3 s here: over the
CI test's 300 planned steps, 1.5x slower).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

A, C32, C16, KNEE, K, MAX_FIT, W = 4.0, 0.6, 0.2, 64, 3.0, 128, 6.0
F0, F1 = 2.0, 0.16
PLANTED_BEST = {"batch_size": "64", "precision": "bf16", "data.num_workers": "2",
                "compile": "false"}
# The CI test's space: 7 x 2 x 3 x 2 = 84 points.
GRID = {"batch_size": "4,8,16,32,64,128,256", "precision": "fp32,bf16",
        "data.num_workers": "0,2,4", "compile": "false,true"}
DEFAULTS = {"batch_size": "32", "precision": "fp32", "data.num_workers": "0", "compile": "false"}


def step_ms(batch_size: int, precision: str, workers: int, knee: int = KNEE) -> float:
    """The planted training step (module docstring)."""
    c = C16 if "bf16" in precision else C32
    return (A + c * min(batch_size, knee) + K * c * max(0, batch_size - knee)
            + W * max(0, workers - 2))


def fetch_ms(batch_size: int) -> float:
    return F0 + F1 * batch_size


@dataclass
class Landscape:
    """What a harness job of each candidate would report, with seeded log-normal noise.
    `run(job)` takes a harness.autotune.search.Job and returns an Outcome."""

    host_ms: float = 3.0  # Lightning's loop, per step
    compile_s: float = 3.0  # one-off compile seconds
    compile_gain: float = 1.0  # step time x this when compiled
    max_fit: int = MAX_FIT
    fetch_scale: float = 1.0  # 0: no fetch cost (compute-bound)
    knee: int = KNEE
    noise: float = 0.03  # sigma of the multiplicative noise of a job
    overhead_s: float = 1.0  # a job's fixed seconds
    invalid: set[str] = field(default_factory=set)  # "key=value" that make a job invalid
    untrusted: dict[str, int] = field(default_factory=dict)  # "key=value" -> jobs it stays noisy
    cold_first: float = 1.0  # the first job of the process is this many times slower
    # one job in `outlier_every` (at random) reads `outlier` times faster than it ran: a rare
    # outlier, as a job the machine favoured (0: none)
    outlier_every: int = 0
    outlier: float = 1.2
    seed: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.odd = random.Random(self.seed + 1)  # the outliers' own draws: the noise stays as seeded
        self.launched: list[Any] = []
        self.outliers: list[Any] = []  # the jobs that read `outlier` times faster

    def train_ms(self, b: int, precision: str, workers: int, compiled: bool) -> float:
        step = step_ms(b, precision, workers, self.knee) * (self.compile_gain if compiled else 1.0)
        fetch = fetch_ms(b) * self.fetch_scale
        total = step + fetch if workers == 0 else max(step, fetch / workers)
        return total + self.host_ms

    def run(self, job: Any) -> Any:
        from harness.autotune.outcome import Outcome, Phase

        self.launched.append(job)
        c = job.candidate.as_dict()
        b = int(c.get("batch_size", "32"))
        precision = c.get("precision", "fp32")
        workers = int(c.get("data.num_workers", "0"))
        compiled = c.get("compile", "false") != "false"
        for setting in self.invalid:
            key, value = setting.split("=")
            if c.get(key) == value:
                return Outcome("invalid", f"{setting} did not take effect", job_seconds=2.0)
        if b > self.max_fit:
            return Outcome("oom", f"out of memory: planted, {b} > {self.max_fit}",
                           job_seconds=self.overhead_s)
        jitter = self.rng.lognormvariate(0, self.noise) * (
            self.cold_first if len(self.launched) == 1 else 1.0)
        if self.outlier_every and self.odd.random() < 1 / self.outlier_every:
            jitter /= self.outlier
            self.outliers.append(job)
        train_s = self.train_ms(b, precision, workers, compiled) / 1000 * jitter
        fetch = fetch_ms(b) * self.fetch_scale
        infer_s = (self.train_ms(b, precision, workers, compiled) / 3 + (
            fetch if workers == 0 else 0)) / 1000 * self.rng.lognormvariate(0, self.noise)
        data_share = (fetch if workers == 0 else 0.0) / (train_s * 1000)
        why: tuple[str, ...] = ()
        for setting, times in self.untrusted.items():
            key, value = setting.split("=")
            seen = sum(1 for j in self.launched if j.candidate == job.candidate) - 1
            if c.get(key) == value and seen < times:
                why = ("noisy",)
        steps = job.measured_steps + job.warmup_steps
        return Outcome(
            "ok", None, {"train": Phase(train_s, b), "inference": Phase(infer_s, b)},
            trusted=not why, why=why, compile_charge_s=self.compile_s if compiled else 0.0,
            bound_by="data" if data_share > 0.5 else "compute", data_share=data_share,
            job_seconds=self.overhead_s + steps * train_s + (self.compile_s if compiled else 0))


def drive(search: Any, landscape: Landscape) -> tuple[dict[str, Any], list[Any]]:
    """Run a search against the landscape: autotune.json's body and every wave launched."""
    from harness.autotune.verdict import summary

    waves, elapsed = [], 0.0
    wave = search.start()
    while wave is not None:
        waves.append(wave)
        outcomes = [landscape.run(job) for job in wave.jobs]
        elapsed += sum(o.job_seconds for o in outcomes)
        wave = search.advance(outcomes, elapsed)
    return summary(search), waves


# -- a training recipe at a global batch (issue 27) ----------------------------------------
# Nobody here tuned for it: 40 points, the global batch of 128 examples per optimizer step
# run as micro-batch x accumulation, with activation checkpointing, precision and compile.
#
#   optimizer step (ms) = k * (R_A + c * b) * (R_CKPT with checkpointing) + R_OPT,  k = 128 / b
#                         c = R_C32 with fp32, R_C16 with bf16: each micro-batch pays R_A of
#                         its own (a GPU is latency-bound on small batches), so a larger one is
#                         cheaper per example; checkpointing recomputes: 25 % more per batch
#   peak memory (GiB)   = R_WEIGHTS + b * R_ACT[precision, checkpointing]; above the device's
#                         (80 GiB) out of memory at the first step
#   compile             the same step: it buys nothing, and costs R_COMPILE_S of compile
#
# Without checkpointing fp32 fits 32 (the recipe's default, 32 x 4: 529 examples/s) and bf16
# 32; with it, fp32 still fits 32 and bf16 64; 128 fits nowhere. The fastest is
# PLANTED_RECIPE, 64 x 2 with checkpointing in bf16 (934 examples/s): it fits only with
# checkpointing, and beats the largest bf16 micro-batch without it (32 x 4, 672 ex/s) by 1.39x
# despite the recompute, 1.77x the default.
RECIPE_GLOBAL = 128
RECIPE_GRID = {"batch_size": "8,16,32,64,128", "activation_checkpointing": "false,true",
               "precision": "fp32,bf16", "compile": "false,true"}
RECIPE_DEFAULTS = {"batch_size": "32", "activation_checkpointing": "false", "precision": "fp32",
                   "compile": "false"}
PLANTED_RECIPE = {"batch_size": "64", "activation_checkpointing": "true", "precision": "bf16",
                  "compile": "false"}
R_A, R_C32, R_C16, R_CKPT, R_OPT = 40.0, 0.6, 0.2, 1.25, 5.0
R_WEIGHTS, R_DEVICE_GIB, R_COMPILE_S = 8.0, 80.0, 30.0
R_ACT = {("fp32", False): 2.0, ("bf16", False): 1.75, ("fp32", True): 1.6, ("bf16", True): 0.9}
GIB = 2**30


def recipe_step_ms(b: int, precision: str, checkpointing: bool,
                   global_batch: int = RECIPE_GLOBAL, ckpt_cost: float = R_CKPT) -> float:
    """One optimizer step of the planted recipe (the block above)."""
    c = R_C16 if "bf16" in precision else R_C32
    return (global_batch // b) * (R_A + c * b) * (ckpt_cost if checkpointing else 1.0) + R_OPT


def recipe_peak_gib(b: int, precision: str, checkpointing: bool) -> float:
    return R_WEIGHTS + b * R_ACT["bf16" if "bf16" in precision else "fp32", checkpointing]


@dataclass
class RecipeLandscape:
    """What a harness job of each recipe candidate would report: an optimizer step of
    `global_batch` examples, its peak memory on a CUDA device of `device_gib` (out of memory
    above it), seeded log-normal noise. `run(job)` takes a Job and returns an Outcome."""

    global_batch: int = RECIPE_GLOBAL
    device_gib: float = R_DEVICE_GIB  # on a CPU: its RAM (result.json's device.memory_bytes)
    accelerator: str = "cuda"
    ckpt_cost: float = R_CKPT  # a checkpointed batch's time x this
    noise: float = 0.03
    overhead_s: float = 2.0
    seed: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.launched: list[Any] = []

    def run(self, job: Any) -> Any:
        from harness.autotune.outcome import Outcome, Phase

        self.launched.append(job)
        c = job.candidate.as_dict()
        b = int(c.get("batch_size", RECIPE_DEFAULTS["batch_size"]))
        precision = c.get("precision", "fp32")
        checkpointing = c.get("activation_checkpointing", "false") != "false"
        compiled = c.get("compile", "false") != "false"
        peak = recipe_peak_gib(b, precision, checkpointing) * GIB
        cpu = self.accelerator != "cuda"
        device = self.device_gib * GIB
        if peak > self.device_gib * GIB:
            return Outcome("oom", f"CUDA out of memory: planted, {peak / GIB:.1f} GiB of"
                           f" {self.device_gib:g}", job_seconds=self.overhead_s,
                           accelerator=self.accelerator, device_memory_bytes=device)
        step_s = recipe_step_ms(b, precision, checkpointing, self.global_batch,
                                self.ckpt_cost) / 1000 * self.rng.lognormvariate(0, self.noise)
        steps = job.measured_steps + 1  # one optimizer step of warm-up
        return Outcome(
            "ok", None, {"train": Phase(step_s, self.global_batch),
                         "inference": Phase(step_s / 3, self.global_batch)},
            compile_charge_s=R_COMPILE_S if compiled else 0.0, bound_by="compute",
            data_share=0.0, job_seconds=self.overhead_s + steps * step_s
            + (R_COMPILE_S if compiled else 0.0),
            peak_memory_bytes=peak, memory_source="peak RSS increase" if cpu else
            "device allocated", accelerator=self.accelerator,
            device_allocated_bytes=None if cpu else peak, device_memory_bytes=device)
