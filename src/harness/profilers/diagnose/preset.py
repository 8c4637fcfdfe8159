"""The `diagnose` preset: why a run is slow, with its evidence.

After each phase was measured it runs the speed-of-light passes (speed_of_light: the loader
alone, the model alone on a resident batch, FLOPs counted once), and, in multi-process runs,
records a few training steps with the torch profiler to split communication from compute
(communication). At the end it reads the speed preset's figures from result.json's metrics
and turns all of it into the step's shares, what the step is bound by, FLOP/s and MFU, and
ranked findings (findings), written to reports/diagnosis.{json,md}, result.json's
`diagnosis` and one verdict line.

The passes' cost is measured and reported; they run outside every timed step, their memory
is kept out of the run's peaks (harness.memory_peaks) and the model, optimizer and RNG
states are restored after them (speed_of_light.state_restored, rng_restored). The
communication window ends inside the speed preset's warm-up (RunShared.timed_from_step) and
its events are read after training, so neither lands in a measured step.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import psutil
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.profilers import PyTorchProfiler
from typing_extensions import override

from harness import memory_peaks
from harness.config.checks import non_negative_int, one_of, positive_int, positive_number
from harness.errors import first_line
from harness.measured import MAIN_PHASES
from harness.profilers.all_ranks import gather
from harness.profilers.diagnose import findings as rules
from harness.profilers.diagnose import speed_of_light
from harness.profilers.diagnose.communication import CommWindow
from harness.profilers.diagnose.peak_flops import dense_peak_tflops, matmul_dtype
from harness.profilers.flops import CONVENTION
from harness.profilers.preset import Preset, RunShared
from harness.profilers.speed_flags import robust_cv
from harness.reports.files import write_json, write_text
from harness.result.schema import Diagnosis, RunResult

WHEN = ("end", "start")
CONVOLUTIONS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose1d,
                torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)
DOC = "docs/presets/diagnose.md#output"
STATE = ("model, optimizer and RNG states copied before and restored after; their memory kept"
         " out of the run's peaks")


class DiagnosePreset(Preset, Callback):
    """Runs the extra passes and writes reports/diagnosis.{json,md}; see the module docstring."""

    def __init__(self, steps: int = 3, warmup: int = 0, when: str = "end", flops: bool = True,
                 peak_tflops: float | None = None, communication_steps: int = 2) -> None:
        self.steps = positive_int("profiler.diagnose.steps", steps, 3)
        self.warmup = non_negative_int("profiler.diagnose.warmup", warmup, 0)
        self.when = one_of("profiler.diagnose.when", when, WHEN)
        self.count_flops = bool(flops)
        self.peak_tflops = None if peak_tflops is None else positive_number(
            "profiler.diagnose.peak_tflops", peak_tflops, 989.4, "a number of TFLOP/s > 0")
        self.communication_steps = positive_int("profiler.diagnose.communication_steps",
                                                communication_steps, 2)
        self.shared = RunShared()  # alone until linked: no step timer, no warm-up to use
        self.passes: dict[str, dict[str, speed_of_light.PassResult]] = {}
        self.ended_by: BaseException | None = None  # what ended the fit early (on_exception)
        self.cost_s = 0.0
        self.notes: list[str] = []
        self.comm: CommWindow | None = None
        self.comm_by_rank: list[dict[str, float]] = []
        self.device: torch.device | None = None
        self.convolutions = False  # the module has convolution layers (setup)
        self.context: dict[str, Any] = {}

    # -- capturing a batch, opening the communication window ----------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.device = trainer.strategy.root_device
        # cuDNN runs convolutions on TF32 under its own switch: a conv net's fp32 peak is TF32's
        self.convolutions = pl_module is not None and any(
            isinstance(m, CONVOLUTIONS) for m in pl_module.modules())
        self.context.update(accelerator=self.device.type, world_size=trainer.world_size)
        if self.device.type == "cuda":
            self.context["device_memory_bytes"] = torch.cuda.get_device_properties(
                self.device).total_memory
        if trainer.world_size > 1 and self.comm is None and stage == "fit":
            if isinstance(trainer.profiler, PyTorchProfiler):
                self.notes.append("communication not split: the pytorch/memory preset holds"
                                  " the torch profiler (run diagnose without it)")
            else:
                self.comm = CommWindow(self.comm_start(self.shared.timed_from_step),
                                       self.communication_steps)

    def comm_start(self, timed_from_step: int | None) -> int:
        """The window's first step: the third (the first ones build DDP's buckets and warm
        caches), or earlier so that stopping the profiler, which collects its trace, lands in
        a step the speed preset leaves out as warm-up (`timed_from_step`: its first measured
        step; None without it)."""
        if timed_from_step is None:
            return 2
        start = min(2, max(0, timed_from_step - self.communication_steps - 1))
        if start < 2:
            self.notes.append(f"the communication window starts at step {start}: DDP rebuilds"
                              " its gradient buckets in the second step, which may be in it")
        if start + self.communication_steps + 1 > timed_from_step:
            self.notes.append(
                f"the communication window (from step {start}, {self.communication_steps} steps)"
                " reaches into the speed preset's measured steps: profiler.speed.warmup_steps >="
                f" {self.communication_steps + 1} keeps it out")
        return start
    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.when == "start":
            self._phase_passes("train", trainer, pl_module, trainer.train_dataloader)

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        if self.comm is not None:
            self.comm.step_starts(trainer.strategy.root_device)

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.comm is not None:
            self.comm.step_ended()

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.when == "end":
            self._phase_passes("train", trainer, pl_module, trainer.train_dataloader)
        self._gather_communication()

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        if self.comm is not None:
            self.comm.stop()  # a torch profiler left running would outlive the run
        self.ended_by = exception

    @override
    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._phase_passes("inference", trainer, pl_module, trainer.predict_dataloaders)

    # -- the passes ----------------------------------------------------------------------
    def _phase_passes(self, phase: str, trainer: pl.Trainer, module: pl.LightningModule,
                      loader: Any) -> None:
        if phase in self.passes:
            return
        device = trainer.strategy.root_device
        started = time.perf_counter()
        failed: str | None = None
        with memory_peaks.excluded(device) as excluded:
            if not excluded:
                self.notes.append("the passes' memory counts in peak_rss_bytes (no"
                                  " /proc/self/clear_refs here)")
            # A failed pass (an OOM, a loader that cannot be iterated again, a failed
            # restore) costs the verdict, never the run; under DDP this rank still reaches
            # the collectives of on_train_end that the other ranks wait in. The exception
            # and what its frames held are gone before `excluded` returns the memory.
            try:
                found = self._passes(phase, trainer, module, loader)
            except Exception as err:  # noqa: BLE001 - any failure of the pass, said below
                failed = f"the {phase} passes failed: {first_line(err)[:200]}"
        if failed is not None:
            self.notes.append(f"{failed}; the run's own figures stand")
            found = {part: speed_of_light.PassResult(None, 0, None, failed)
                     for part in ("loader", "model")}
        self.passes[phase] = found
        self.cost_s += time.perf_counter() - started

    def _passes(self, phase: str, trainer: pl.Trainer, module: pl.LightningModule,
                loader: Any) -> dict[str, speed_of_light.PassResult]:
        # The loader pass draws from the global RNG (samplers, worker seeds): restored, so
        # with when=start the measured run sees the data order it would see without it.
        with speed_of_light.rng_restored():
            loader_pass, batch = speed_of_light.loader_alone(trainer, loader, self.steps,
                                                             self.warmup)
            self._note_loader(loader)
            # The model pass runs on the loader pass's first batch, already on the device:
            # no batch is held through the measured steps.
            return {"loader": loader_pass,
                    "model": self._model_pass(phase, trainer, module, batch)}

    def _model_pass(self, phase: str, trainer: pl.Trainer, module: pl.LightningModule,
                    batch: Any) -> speed_of_light.PassResult:
        if batch is None:
            return speed_of_light.PassResult(None, 0, None, "model-alone pass: no batch (the"
                                             " loader pass was skipped or got none)")
        training = phase == "train"
        refused = speed_of_light.copy_refused(
            trainer.strategy, module, list(trainer.optimizers) if training else [],
            psutil.virtual_memory().available)
        if refused:
            return speed_of_light.PassResult(None, 0, None,
                                             f"model-alone pass skipped: {refused}")
        if training:
            if not module.automatic_optimization:
                self.notes.append("manual optimization: the model-alone pass runs"
                                  " training_step only (it steps its optimizers itself)")
            step = speed_of_light.training_step_fn(trainer, module, batch)
        else:
            step = speed_of_light.predict_step_fn(trainer, module, batch)
        return speed_of_light.model_alone(trainer, module, step, batch, self.steps, self.warmup,
                                          training=training, flops=self.count_flops)

    def _note_loader(self, loader: Any) -> None:
        if isinstance(loader, torch.utils.data.DataLoader) and "loader" not in self.context:
            self.context["loader"] = {"num_workers": loader.num_workers,
                                      "pin_memory": loader.pin_memory}

    def _gather_communication(self) -> None:
        """Every rank's window figures on every rank (all ranks call this: no hang)."""
        if self.comm is None:
            return
        mine = self.comm.finish()  # a run shorter than the window: what it recorded
        if self.comm.note:
            self.notes.append(self.comm.note)
        self.comm_by_rank = [figures or {} for figures in gather(mine)]

    # -- the diagnosis -------------------------------------------------------------------
    def _peak_tflops(self, precision: str | None) -> tuple[float | None, str | None]:
        """(The device's dense peak TFLOP/s for the run's matmuls, where it comes from)."""
        if self.peak_tflops is not None:
            return self.peak_tflops, "profiler.diagnose.peak_tflops"
        if self.device is None:
            return None, None
        dtype = matmul_dtype(precision, torch.get_float32_matmul_precision(),
                             self.convolutions and torch.backends.cudnn.allow_tf32)
        return dense_peak_tflops(self.device, dtype)

    def _exposed_comm_share(self) -> float:
        shares = [(r["communication_s"] - r["overlap_s"]) / r["window_s"]
                  for r in self.comm_by_rank if r.get("window_s")]
        return max(shares) if shares else 0.0

    def phase_figures(self, phase: str, metrics: dict[str, Any], peak: float | None
                      ) -> dict[str, Any]:
        """Shares, rates, FLOPs and MFU of one phase, from the passes and the speed figures
        (`metrics`: result.json's figures); `peak`: the device's dense peak TFLOP/s, if known.

        The step is the median iteration, like the passes' own figures (a few stalled steps
        move the mean and would read as host time); results without it fall back to s/it.
        The loop cannot iterate faster than the loader alone delivers a batch: where the
        median step is shorter (workers that deliver in bursts: most steps find a batch
        waiting, every few wait for the next burst), the step is the loader's pace, at most
        the mean step, and the difference is time spent waiting for data."""
        found = self.passes.get(phase)
        median, mean = (metrics.get(f"{phase}_median_step_s"),
                        metrics.get(f"{phase}_seconds_per_iteration"))
        step_s = median or mean
        if not found:
            return {"note": f"no {phase} passes ran"}
        loader, model = found["loader"], found["model"]
        between_s = metrics.get(f"{phase}_median_between_s")
        if between_s is None:
            between = metrics.get(f"{phase}_between_steps_share")
            between_s = between * step_s if between is not None and step_s else None
        if median and mean and loader.step_s and between_s is not None:
            paced = min(mean, loader.step_s)
            if paced > median:
                step_s, between_s = paced, between_s + paced - median
        comm = self._exposed_comm_share() * step_s if step_s and phase == "train" else 0.0
        noise = robust_cv({"mad_step_s": metrics.get(f"{phase}_mad_step_s"),
                           "median_step_s": metrics.get(f"{phase}_median_step_s")})
        notes = list(dict.fromkeys(n for n in (loader.note, model.note) if n))  # once each
        # Without the model alone the step cannot be split: its compute would read as host.
        part = (rules.shares(step_s, between_s, loader.step_s, model.step_s, comm)
                if model.step_s is not None else None)
        if part and loader.step_s is None:
            notes.append("no loader figure: the data share is all the time between steps")
        # The shares again with the model pass's quickest and slowest step: their noise.
        ends = [rules.shares(step_s, between_s, loader.step_s, model_s, comm)
                for model_s in (model.fastest_s, model.slowest_s) if model_s is not None]
        # And with the run's own noise: a step one robust deviation shorter and longer.
        spread = [rules.shares(step_s * factor, between_s, loader.step_s, model.step_s, comm)
                  for factor in (max(1 - noise, 0.05), 1 + noise)] if part and noise else []
        world = self.context.get("world_size", 1)
        flop_per_s = model.flops / step_s if model.flops and step_s else None
        return {
            "shares": part,
            "share_ranges": _ranges(ends) if part else None,
            "noise_ranges": _ranges(spread) if part else None,
            "step_noise": noise,
            "loader_step_s": loader.step_s,
            "loader_examples_per_second": _total(loader.examples_per_second(), world),
            "model_step_s": model.step_s,
            "model_examples_per_second": _total(model.examples_per_second(), world),
            "flops_per_step": model.flops,
            "flop_per_s": flop_per_s,
            "peak_tflops": peak,
            "mfu": flop_per_s / (peak * 1e12) if flop_per_s and peak else None,
            "note": "; ".join(notes) or None,
        }

    @override
    def diagnose(self, reports_dir: Path, result: RunResult) -> Diagnosis:
        """The `diagnosis` of result.json, from the passes and the speed preset's figures;
        also written to reports/diagnosis.{json,md}."""
        metrics = result.figures()  # the speed preset's, the memory peaks, what ran
        peak, peak_source = self._peak_tflops(result.precision_used)
        phases = {phase: self.phase_figures(phase, metrics, peak)
                  for phase in MAIN_PHASES if phase in self.passes}
        # The run's mode names the phase the verdict is about: a fit interrupted or failed
        # before its end ran no training passes, and its verdict must say that, not speak
        # of an inference step the run never meant to measure.
        main = "inference" if result.knobs.get("mode") == "inference" else "train"
        main_figures = phases.get(main) or {"note": self._why_no_passes(main)}
        # the run's noise larger than the gap between the two largest shares: no bound, so a
        # sweep's majority bound does not count this run
        bound = ("unknown" if rules.noise_beats_gap(main_figures)
                 else rules.bound_by(main_figures.get("shares")))
        contention = {phase: {key: metrics.get(f"{phase}_{key}") for key in
                              ("other_cpu_share", "run_delay_share", "gpu_other_sm_share")}
                      for phase in MAIN_PHASES}
        self.context.update(
            precision_note=result.precision_note, flags=list(result.flags),
            graph_breaks=metrics.get("graph_breaks"),
            peak_device_reserved_bytes=metrics.get("peak_device_reserved_bytes"),
            contention=contention,
            noise_said={phase: self._noise_said(phase, metrics) for phase in MAIN_PHASES})
        ranked = rules.ranked([f for phase, figures in phases.items()
                               for f in rules.phase_findings(phase, figures, self.context)],
                              rules.run_findings(self.context))
        contended = (rules.contention_said(contention[main])
                     if f"contended:{main}" in result.flags else None)
        diagnosis = Diagnosis.model_validate({
            "bound_by": bound,
            "verdict": rules.verdict(bound, main_figures, main, contended),
            **{f"{phase}_{key}": value for phase, figures in phases.items()
               for key, value in _flat(figures).items()},
            "peak_source": peak_source if peak else None,
            "flop_convention": CONVENTION,
            "communication_by_rank": self.comm_by_rank or None,
            "findings": ranked,
            "passes": {"when": self.when, "steps": self.steps, "warmup": self.warmup,
                       "cost_s": self.cost_s, "state": STATE, "notes": self.notes},
        })
        self._write(reports_dir, diagnosis)
        return diagnosis

    def _why_no_passes(self, phase: str) -> str:
        """Why `phase` has no passes, in the verdict's words: they run at the phase's end."""
        name = "training" if phase == "train" else "inference"
        ended = self.ended_by
        if ended is None:
            return f"the {name} step was not measured (no {phase} passes ran)"
        how = ("was interrupted" if isinstance(ended, (KeyboardInterrupt, SystemExit))
               else f"failed ({first_line(ended)[:120]})")
        return f"{name} {how} before its end, where the passes that split its step run"

    def _noise_said(self, phase: str, metrics: dict[str, Any]) -> list[str]:
        """What made `phase` noisy, as the speed preset that flagged it words it."""
        if self.shared.cautions is None:
            return []
        return self.shared.cautions.noise_said({
            "robust_cv": robust_cv({"mad_step_s": metrics.get(f"{phase}_mad_step_s"),
                                    "median_step_s": metrics.get(f"{phase}_median_step_s")}),
            "mean_over_median": _ratio(metrics.get(f"{phase}_seconds_per_iteration"),
                                       metrics.get(f"{phase}_median_step_s"))})

    def _write(self, reports_dir: Path, diagnosis: Diagnosis) -> None:
        found = diagnosis.model_dump(mode="json")
        write_json(reports_dir / "diagnosis.json", {"report": "diagnose", "doc": DOC, **found})
        lines = ["# Diagnosis", "", f"**{diagnosis.verdict}**", ""]
        for n, finding in enumerate(diagnosis.findings, 1):
            lines += [f"{n}. **{finding.kind}**: {finding.message}.",
                      f"   Next: {finding.next_step}.", ""]
        lines += [f"FLOPs: {CONVENTION}. Passes cost {self.cost_s:.2f} s ({STATE})."]
        write_text(reports_dir / "diagnosis.md", "\n".join(lines) + "\n")


def _total(per_rank: float | None, world: int) -> float | None:
    """A rank's rate as the run's: ranks work side by side."""
    return None if per_rank is None else per_rank * world


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def _ranges(ends: list[dict[str, float] | None]) -> dict[str, list[float]] | None:
    """Per bound, the lowest and highest share over `ends` (the shares worked out again),
    capped at 100% (a wait longer than a shortened step is the whole step)."""
    if not ends or not all(ends):
        return None
    return {bound: [min(min(e[bound] for e in ends), 1.0),  # type: ignore[index]
                    min(max(e[bound] for e in ends), 1.0)]  # type: ignore[index]
            for bound in rules.BOUNDS}


def _flat(figures: dict[str, Any]) -> dict[str, Any]:
    """`shares` spread into <bound>_share keys, `share_ranges` into <bound>_share_range;
    everything else as it is (`noise_ranges` only feeds the verdict)."""
    out = {k: v for k, v in figures.items()
           if k not in ("shares", "share_ranges", "noise_ranges")}
    for bound, share in (figures.get("shares") or {}).items():
        out[f"{bound}_share"] = share
    for bound, ends in (figures.get("share_ranges") or {}).items():
        out[f"{bound}_share_range"] = ends
    return out
