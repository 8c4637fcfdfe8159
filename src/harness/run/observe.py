"""What really ran (examples per batch, precision, compiled graphs), held against the knobs: a
knob the user set that did not take effect makes the run `invalid` (figures kept, not shown)."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from harness.config.knobs import Knobs
from harness.config.locations import conf_dir
from harness.profilers.preset import BatchCounts
from harness.result.schema import Observed, OptimizerStep, RunResult


def _set_by_user(key: str, value: Any, overrides: list[str]) -> bool:
    """Set on the command line, or to a value other than harness's default (a named sweep)."""
    return (any(o.lstrip("+~").split("=", 1)[0] == key for o in overrides)
            or str(OmegaConf.load(conf_dir() / "config.yaml").get(key)) != str(value))


def observed_of(batches: BatchCounts, compiled: dict[str, Any] | None, accumulation: int = 1,
                world_size: int = 1) -> Observed:
    """What ran, as result.json's `observed`: examples per batch per phase, per optimizer step
    (`accumulation`: the trainer's, as it ran), compiled graphs."""
    sizes, compiled = batches.examples_per_batch(), compiled or {}
    readable = any(n is not None for n in sizes.values())
    return Observed(
        examples_per_batch=sizes, examples_source="batches" if readable else "knob" if sizes else None,
        optimizer_step=_optimizer_step(batches, sizes.get("train"), accumulation, world_size),
        compiled_graphs=compiled.get("compiled_graphs"), graph_breaks=compiled.get("graph_breaks"))


def _optimizer_step(batches: BatchCounts, micro_batch: int | None, accumulation: int,
                    world_size: int) -> OptimizerStep | None:
    """The fit's optimizer steps as counted (BatchObserver); None when none was taken."""
    if not batches.step_examples:
        return None
    examples, most = batches.step_examples.most_common(1)[0]
    steps = sum(batches.step_examples.values())
    return OptimizerStep(micro_batch=micro_batch, accumulation=accumulation, world_size=world_size,
                         steps=steps, other_steps=steps - most,
                         examples=None if examples is None else examples * world_size)


def check_what_ran(result: RunResult, knobs: Knobs, world_size: int) -> None:
    """Make the run invalid where what ran contradicts a knob the user set (left at its default: a note)."""
    observed = result.observed  # set by observed_of just before
    readable = {phase: n for phase, n in observed.examples_per_batch.items() if n is not None}
    problems = []
    main_phase = next((p for p in ("train", "inference", "validation") if p in readable), None)
    if main_phase is not None and readable[main_phase] != knobs.batch_size:
        seen = readable[main_phase]
        why = "the data config ignores the knob"
        fix = "batch_size: ${batch_size} in your data config"
        if result.data is None:  # data=none: the module's own dataloaders
            why = "the module's own dataloaders (data=none) set the batch size"
            fix = f"set batch_size={seen} (per rank) to label the run with it"
        elif world_size > 1 and seen * world_size == knobs.batch_size:
            why = (f"the data module divides batch_size by the world size ({world_size}); in"
                   " harness batch_size is per rank")
            fix = "drop that division, or set batch_size to the per-rank size you want"
        problems.append(("batch_size", f"batch_size={knobs.batch_size} but {main_phase} batches"
                         f" hold {seen} examples per rank: {why}. Fix: {fix}"))
    if knobs.global_batch_size is not None and (found := _global_batch_differs(observed, knobs)):
        problems.append(("global_batch_size", found))
    if knobs.compile and observed.compiled_graphs == 0:
        problems.append(("compile", f"compile={knobs.compile} but TorchDynamo compiled no graph of"
                         f" model.{knobs.compile_module}. Fix: point compile_module at the network"
                         " the steps call, or set compile=false"))
    if result.precision_used and result.precision_used != knobs.lightning_precision:
        problems.append(("precision", f"precision={knobs.precision} but Lightning ran"
                         f" {result.precision_used}: {result.precision_note or 'not what was asked'}."
                         " Fix: ask for the precision the device runs"))
    for knob, message in problems:
        user_set = knobs.check_knobs and (
            knob == "compile" or _set_by_user(knob, getattr(knobs, knob), result.overrides))
        if user_set and result.status in ("running", "ok", "partial"):
            # a partial run's failed phase stays said (also in result.phase_errors)
            also = f"; also {result.reason}" if result.status == "partial" else ""
            result.status, result.reason = "invalid", message + also
        else:
            observed.notes.append(message)


def _global_batch_differs(observed: Observed, knobs: Knobs) -> str | None:
    """Why the fit's optimizer steps did not take global_batch_size examples each, or None."""
    step, asked = observed.optimizer_step, knobs.global_batch_size
    if step is None or step.examples is None:
        return None
    if step.examples != asked:
        why = (f"the trainer accumulated {step.accumulation} batches, not {knobs.accumulation}"
               " (a callback or the module changed trainer.accumulate_grad_batches)"
               if step.accumulation != knobs.accumulation else
               f"the batches held {step.micro_batch} examples, not batch_size={knobs.batch_size}"
               if step.micro_batch != knobs.batch_size else
               "the ranks ran more or fewer batches than the config's world size names")
        return (f"global_batch_size={asked} but each optimizer step took {step.examples} examples"
                f" ({step.micro_batch} per batch x {step.accumulation} batches x {step.world_size}"
                f" ranks): {why}. Fix: make what runs follow the knobs, or drop global_batch_size")
    if step.other_steps:
        return (f"global_batch_size={asked} but {step.other_steps} of the fit's {step.steps} optimizer"
                f" steps took fewer examples: an epoch's training batches are not a multiple of the"
                f" {step.accumulation} each step takes, so Lightning steps on a short last one. Fix:"
                f" training batches per epoch a multiple of {step.accumulation} (trainer.limit_train_batches,"
                " or the data)")
    return None
