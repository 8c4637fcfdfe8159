"""The `diagnose` preset: why a run is slow, with its evidence (docs/presets/diagnose.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import psutil
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from harness import memory_peaks
from harness.config.checks import NonNegativeInt, PositiveInt, PositiveNumber
from harness.errors import first_line
from harness.measured import MAIN_PHASES
from harness.profilers.diagnose import findings as rules
from harness.profilers.diagnose import speed_of_light
from harness.profilers.diagnose.peak_flops import dense_peak_tflops, matmul_dtype
from harness.profilers.flops import CONVENTION
from harness.profilers.preset import Preset, RunShared
from harness.profilers.rank_timer import breakdown
from harness.profilers.speed_flags import phase_word, robust_cv
from harness.reports.files import write_json, write_text
from harness.result.schema import Diagnosis, RunResult

WHEN = ("end", "start")
CONVOLUTIONS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose1d,
                torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)
DOC = "docs/presets/diagnose.md#output"
STATE = ("model, optimizer and RNG states and the modules' attributes copied before and restored"
         " after; their memory kept out of the run's peaks")


class DiagnosePreset(Preset, Callback):
    """Writes reports/diagnosis.{json,md}; a multi-process run's communication is each rank's
    time blocked in collectives (harness.profilers.rank_timer, the one timer of ranks)."""

    needs_rank_timer = "ranks"  # only a run of several ranks has communication to split

    def __init__(self, steps: PositiveInt = 3, warmup: NonNegativeInt = 0, when: Literal[WHEN] = "end",
                 flops: bool = True, peak_tflops: PositiveNumber | None = None) -> None:
        self.steps, self.warmup, self.when = steps, warmup, when
        self.count_flops, self.peak_tflops = flops, peak_tflops
        self.shared = RunShared()  # alone until linked: no step timer, no warm-up to use
        self.passes: dict[str, dict[str, speed_of_light.PassResult]] = {}
        self.ended_by: BaseException | None = None  # what ended the fit early (on_exception)
        self.cost_s = 0.0
        self.notes: list[str] = []
        self.device: torch.device | None = None
        self.convolutions = False  # the module has convolution layers (setup)
        self.context: dict[str, Any] = {}

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.device = trainer.strategy.root_device
        # cuDNN runs convolutions on TF32 under its own switch: a conv net's fp32 peak is TF32's
        self.convolutions = pl_module is not None and any(
            isinstance(m, CONVOLUTIONS) for m in pl_module.modules())
        self.context.update(accelerator=self.device.type, world_size=trainer.world_size)
        if self.device.type == "cuda":
            self.context["device_memory_bytes"] = torch.cuda.get_device_properties(self.device).total_memory

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.when == "start":
            self._phase_passes("train", trainer, pl_module, trainer.train_dataloader)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._phase_passes("train", trainer, pl_module, trainer.train_dataloader)  # once a phase (when=start)

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        self.ended_by = exception

    @override
    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._phase_passes("inference", trainer, pl_module, trainer.predict_dataloaders)

    def _phase_passes(self, phase: str, trainer: pl.Trainer, module: pl.LightningModule, loader: Any) -> None:
        if phase in self.passes:
            return
        started = time.perf_counter()
        with memory_peaks.excluded(trainer.strategy.root_device) as excluded:
            if not excluded:
                self.notes.append("the passes' memory counts in peak_rss_bytes (no"
                                  " /proc/self/clear_refs here)")
            # a failed pass costs the verdict, never the run (nor, under DDP, the collectives)
            try:  # restored so that with when=start the run sees the data order it would without it
                with speed_of_light.rng_restored():
                    loader_pass, batch = speed_of_light.loader_alone(trainer, loader, self.steps, self.warmup)
                    if isinstance(loader, torch.utils.data.DataLoader) and "loader" not in self.context:
                        self.context["loader"] = {"num_workers": loader.num_workers,
                                                  "pin_memory": loader.pin_memory}
                    found = {"loader": loader_pass, "model": self._model_pass(phase, trainer, module, batch)}
            except Exception as err:  # noqa: BLE001 - any failure of the pass, said below
                failed = f"the {phase} passes failed: {first_line(err)[:200]}"
                self.notes.append(f"{failed}; the run's own figures stand")
                found = dict.fromkeys(("loader", "model"), speed_of_light.PassResult(None, 0, None, failed))
        self.passes[phase] = found
        self.cost_s += time.perf_counter() - started

    def _model_pass(self, phase: str, trainer: pl.Trainer, module: pl.LightningModule,
                    batch: Any) -> speed_of_light.PassResult:
        if batch is None:
            return speed_of_light.PassResult(None, 0, None, "model-alone pass: no batch (the"
                                             " loader pass was skipped or got none)")
        training = phase == "train"
        refused = speed_of_light.copy_refused(trainer.strategy, module, list(trainer.optimizers) if training
                                              else [], psutil.virtual_memory().available)
        if refused:
            return speed_of_light.PassResult(None, 0, None, f"model-alone pass skipped: {refused}")
        if training and not module.automatic_optimization:
            self.notes.append("manual optimization: the model-alone pass runs"
                              " training_step only (it steps its optimizers itself)")
        step = speed_of_light.own_step_fn(trainer, module, batch, training)
        return speed_of_light.model_alone(trainer, module, step, batch, self.steps, self.warmup,
                                          training=training, flops=self.count_flops)

    def _peak_tflops(self, precision: str | None) -> tuple[float | None, str | None]:
        if self.peak_tflops is not None:
            return self.peak_tflops, "profiler.diagnose.peak_tflops"
        if self.device is None:
            return None, None
        dtype = matmul_dtype(precision, torch.get_float32_matmul_precision(),
                             self.convolutions and torch.backends.cudnn.allow_tf32)
        return dense_peak_tflops(self.device, dtype)

    def phase_figures(self, phase: str, metrics: dict[str, Any], peak: float | None) -> dict[str, Any]:
        """Shares, rates, FLOPs and MFU of a phase that ran its passes; `peak`: dense TFLOP/s.
        The step is the median, never shorter than the loader's pace (docs/presets/diagnose.md)."""
        loader, model = self.passes[phase]["loader"], self.passes[phase]["model"]
        # With gradient accumulation a training step is k batches and the passes time one: the
        # step per batch (its optimizer step shared by the k; the model pass holds one each).
        per = metrics.get(f"{phase}_batches_per_step") or 1
        median, mean, between_s = (None if value is None else value / per for value in (
            metrics.get(f"{phase}_median_step_s"), metrics.get(f"{phase}_seconds_per_iteration"),
            metrics.get(f"{phase}_median_between_s")))
        step_s = median or mean
        if between_s is None:
            between = metrics.get(f"{phase}_between_steps_share")
            between_s = between * step_s if between is not None and step_s else None
        if median and mean and loader.step_s and between_s is not None:
            paced = min(mean, loader.step_s)
            if paced > median:
                step_s, between_s = paced, between_s + paced - median
        # each rank's time blocked in collectives a batch: the most any rank lost to them
        comm = max((r["comm_s"] + r["straggler_wait_s"] for r in self._ranks()), default=0.0) / per
        comm = comm if step_s and phase == "train" else 0.0
        noise = robust_cv(_step_figures(phase, metrics))
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
        return {"shares": part, "share_ranges": _ranges(ends) if part else None,
                "noise_ranges": _ranges(spread) if part else None, "step_noise": noise,
                "loader_step_s": loader.step_s,
                "loader_examples_per_second": loader.examples_per_second(world),
                "model_step_s": model.step_s, "model_examples_per_second": model.examples_per_second(world),
                "flops_per_step": model.flops, "flop_per_s": flop_per_s, "peak_tflops": peak,
                "mfu": flop_per_s / (peak * 1e12) if flop_per_s and peak else None,
                "note": "; ".join(notes) or None}

    @override
    def diagnose(self, reports_dir: Path, result: RunResult) -> Diagnosis:
        """result.json's `diagnosis`, also written to reports/diagnosis.{json,md}."""
        metrics = result.figures()  # the speed preset's, the memory peaks, what ran
        peak, peak_source = self._peak_tflops(result.precision_used)
        phases = {phase: self.phase_figures(phase, metrics, peak)
                  for phase in MAIN_PHASES if phase in self.passes}
        # the run's mode names the verdict's phase: a fit ended early says so, not inference's
        main = "inference" if result.knobs.get("mode") == "inference" else "train"
        main_figures = phases.get(main) or {"note": self._why_no_passes(main)}
        # noise beyond the gap between the two largest shares: no bound, for a sweep's majority
        bound = ("unknown" if rules.noise_beats_gap(main_figures)
                 else rules.bound_by(main_figures.get("shares")))
        contention = {phase: {key: metrics.get(f"{phase}_{key}") for key in
                              ("other_cpu_share", "run_delay_share", "gpu_other_sm_share")}
                      for phase in MAIN_PHASES}
        self.context.update(
            precision_note=result.precision_note, flags=list(result.flags),
            graph_breaks=metrics.get("graph_breaks"),
            peak_device_reserved_bytes=metrics.get("peak_device_reserved_bytes"), contention=contention,
            noise_said={phase: self._noise_said(phase, metrics) for phase in MAIN_PHASES})
        ranked = rules.ranked([f for phase, figures in phases.items()
                               for f in rules.phase_findings(phase, figures, self.context)],
                              rules.run_findings(self.context))
        contended = (rules.contention_said(contention[main]) if f"contended:{main}" in result.flags else None)
        diagnosis = Diagnosis.model_validate({
            "bound_by": bound, "verdict": rules.verdict(bound, main_figures, main, contended),
            **{f"{phase}_{key}": value for phase, figures in phases.items()
               for key, value in _flat(figures).items()},
            "peak_source": peak_source if peak else None, "flop_convention": CONVENTION,
            "communication_by_rank": self._ranks() or None, "findings": ranked,
            "passes": {"when": self.when, "steps": self.steps, "warmup": self.warmup, "cost_s": self.cost_s,
                       "state": STATE, "notes": self.notes},
        })
        self._write(reports_dir, diagnosis)
        return diagnosis

    def _ranks(self) -> list[dict[str, Any]]:
        """Each rank's parts of an optimizer step (multi-process runs; [] otherwise)."""
        timer = self.shared.rank_timer
        if timer is None or len(timer.ranks) < 2:
            return []
        found = breakdown(timer.ranks, timer.measured_from(self.shared.timed_from_step or 0), 1.0)
        return found.ranks if found is not None else []

    def _why_no_passes(self, phase: str) -> str:
        name = phase_word(phase)
        ended = self.ended_by
        if ended is None:
            return f"the {name} step was not measured (no {phase} passes ran)"
        how = ("was interrupted" if isinstance(ended, (KeyboardInterrupt, SystemExit))
               else f"failed ({first_line(ended)[:120]})")
        return f"{name} {how} before its end, where the passes that split its step run"

    def _noise_said(self, phase: str, metrics: dict[str, Any]) -> list[str]:
        cautions = self.shared.cautions
        return [] if cautions is None else cautions.noise_said(cautions.noise(_step_figures(phase, metrics)))

    def _write(self, reports_dir: Path, diagnosis: Diagnosis) -> None:
        found = diagnosis.model_dump(mode="json")
        write_json(reports_dir / "diagnosis.json", {"report": "diagnose", "doc": DOC, **found})
        lines = ["# Diagnosis", "", f"**{diagnosis.verdict}**", ""]
        for n, finding in enumerate(diagnosis.findings, 1):
            lines += [f"{n}. **{finding.kind}**: {finding.message}.", f"   Next: {finding.next_step}.", ""]
        lines += [f"FLOPs: {CONVENTION}. Passes cost {self.cost_s:.2f} s ({STATE})."]
        write_text(reports_dir / "diagnosis.md", "\n".join(lines) + "\n")


def _step_figures(phase: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """`phase`'s step figures in result.json's metrics, keyed as speed.json names them."""
    return {key: metrics.get(f"{phase}_{key}")
            for key in ("mad_step_s", "median_step_s", "seconds_per_iteration")}


def _ranges(ends: list[dict[str, float] | None]) -> dict[str, list[float]] | None:
    """Per bound, the lowest and highest share over `ends`, capped at 100%."""
    if not ends or not all(ends):
        return None
    return {bound: [min(min(e[bound] for e in ends), 1.0),  # type: ignore[index]
                    min(max(e[bound] for e in ends), 1.0)]  # type: ignore[index]
            for bound in rules.BOUNDS}


def _flat(figures: dict[str, Any]) -> dict[str, Any]:
    """`shares` and `share_ranges` spread into <bound>_share(_range) keys; no noise_ranges."""
    return {**{k: v for k, v in figures.items() if k not in ("shares", "share_ranges", "noise_ranges")},
            **{f"{bound}_share": share for bound, share in (figures.get("shares") or {}).items()},
            **{f"{bound}_share_range": ends for bound, ends in (figures.get("share_ranges") or {}).items()}}
