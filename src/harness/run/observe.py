"""What really ran, read off the run, and held against the knobs the table labels it with.

`BatchObserver` is a callback harness adds to every Trainer: it counts the examples in
each batch of each phase on its rank (Lightning's batch-size extraction, the same count
the speed preset uses). After the run `check_what_ran` compares what it saw, the
precision Lightning used and the graphs TorchDynamo compiled with the knobs. A knob the
user set or swept that did not take effect makes the run `invalid`: its figures stay in
result.json but no table shows them as a measurement of that knob.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from harness.config.knobs import Knobs
from harness.measured import PHASES
from harness.profilers.speed import SpeedPreset, count_examples
from harness.result.schema import Observed, RunResult


class BatchObserver(Callback):
    """Counts the examples of every batch, per phase, on this rank."""

    def __init__(self) -> None:
        self.sizes: dict[str, Counter[int | None]] = {phase: Counter() for phase in PHASES}
        self._speed: SpeedPreset | None = None

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._speed = next((c for c in trainer.callbacks if isinstance(c, SpeedPreset)), None)

    def _seen(self, phase: str, batch: Any) -> None:
        # The speed preset, earlier in the callbacks, has counted this batch inside the step.
        counted = self._speed.counted if self._speed is not None else None
        examples = counted[1] if counted and counted[0] == id(batch) else count_examples(batch)
        self.sizes[phase][examples] += 1

    @override
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._seen("train", batch)

    @override
    def on_validation_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        if not trainer.sanity_checking:
            self._seen("validation", batch)

    @override
    def on_predict_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                               dataloader_idx: int = 0) -> None:
        self._seen("inference", batch)

    def examples_per_batch(self) -> dict[str, int | None]:
        """Phase -> the most common examples per batch (None: unreadable), for phases that ran."""
        return {phase: sizes.most_common(1)[0][0] for phase, sizes in self.sizes.items() if sizes}


def _set_by_user(key: str, value: Any, overrides: list[str]) -> bool:
    """Set on the command line, or to a value other than harness's default (a named sweep,
    the user's own primary config with -cd)."""
    from omegaconf import OmegaConf

    from harness.config.locations import conf_dir

    if any(o.lstrip("+~").split("=", 1)[0] == key for o in overrides):
        return True
    defaults = OmegaConf.load(conf_dir() / "config.yaml")
    return str(defaults.get(key)) != str(value)


def check_what_ran(result: RunResult, knobs: Knobs, observer: BatchObserver,
                   world_size: int, compiled: dict[str, Any] | None) -> None:
    """Fill `result.observed`; make the run invalid (or note it) where what ran contradicts
    a knob. Knobs left at their default only get a note: the user did not ask for them."""
    sizes = observer.examples_per_batch()
    readable = {phase: n for phase, n in sizes.items() if n is not None}
    observed = Observed(
        examples_per_batch=sizes,
        examples_source="batches" if readable else "knob" if sizes else None,
        compiled_graphs=(compiled or {}).get("compiled_graphs"),
        graph_breaks=(compiled or {}).get("graph_breaks"),
    )
    result.observed = observed
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
    if knobs.compile and observed.compiled_graphs == 0:
        problems.append(("compile", f"compile={knobs.compile} but TorchDynamo compiled no graph of"
                         f" model.{knobs.compile_module}. Fix: point compile_module at the network"
                         " the steps call, or set compile=false"))
    if result.precision_used and result.precision_used != knobs.lightning_precision:
        problems.append(("precision", f"precision={knobs.precision} but Lightning ran"
                         f" {result.precision_used}: {result.precision_note or 'not what was asked'}."
                         " Fix: ask for the precision the device runs"))
    for knob, message in problems:
        if knobs.check_knobs and (knob == "compile" or _set_by_user(
                knob, getattr(knobs, knob), result.overrides)):
            if result.status in ("running", "ok", "partial"):
                # a partial run's failed phase stays said (also in result.phase_errors)
                also = f"; also {result.reason}" if result.status == "partial" else ""
                result.status, result.reason = "invalid", message + also
            else:
                observed.notes.append(message)
        else:
            observed.notes.append(message)
