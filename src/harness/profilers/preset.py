"""The contract between a preset and the run that hosts it.

A preset is a Lightning Callback or a Lightning Profiler that is also a `Preset`. The run
(harness.run.build, or a user's Trainer through harness.session) puts the configured presets
together with `Presets.of`, and then calls a preset's code at three moments only:

1. `link(shared)`, once, before the Trainer runs: what the preset offers the others goes into
   the run's one `RunShared`, and it keeps that object for what it needs from them.
2. Lightning's own hooks while the run trains and predicts (the preset's business).
3. At the end, on global rank zero (harness.run.finish): `write_reports(reports_dir)` for
   every preset, in config order, returning a `Report` (figures for result.json's metrics,
   flags, terminal tables); then `diagnose(reports_dir, result)` for every preset, after
   all reports, since a diagnosis reads the others' figures.

Every method has a default that does nothing, so a preset overrides only what it does.

**What presets share** (`RunShared`). No preset looks another up: what one needs from
another goes through this object, written at `link` and read in Lightning hooks (at `link`
a preset later in the list may not have offered its part yet):

- `batches` (offered by harness): examples per batch per phase on this rank (`BatchCounts`),
  read by harness.run.observe.check_what_ran.
- `timed_from_step` (offered by the preset that times steps, speed): its first measured
  training step; None without it. Read by diagnose (its communication window ends before
  it) and by `BatchObserver`.
- `cautions` (offered by the preset that times steps, speed): its thresholds and wording for
  the `contended` and `noisy` flags it decides (harness.profilers.speed_flags.Cautions); None
  without it. Read by diagnose, whose findings word those flags.
- `between_steps` (offered by whoever has slow work that must not land in a timed step, such
  as a logger's flush to its store): run by the preset that times steps just before its
  clock restarts (after each validation, at each training epoch's end, after predict);
  without one, by `BatchObserver` at the same moments.
- `untimed(work)` (offered by the preset that times steps): for one-off slow work a preset
  must do at a given step, such as the snapshot's dump at its window's end or py-spy writing
  its files: called from a step's hooks (or between steps), it runs `work` at the first
  moment no step is timed: at once when the step in progress has been recorded (or none
  runs), else just after it is, with the clock paused around it (the measured window
  closes, and the next step starts after the work). Without a timer: at once. So the work
  lands in no step's time whichever order the presets' hooks run in.

Each batch is counted once: inside its timed step by the preset that times steps (its rate
needs the count), else by harness's `BatchObserver` at the batch's start.

**Lightning takes one profiler.** Callback presets combine freely; of the presets that are
Lightning Profilers only `pytorch` + `memory` combine (`absorb`: the pytorch preset takes
over the memory preset's report, one torch profiler for both). Any other pair is refused,
naming both.

**Step windows.** Presets that record part of a run (snapshot, pyspy, nsys, the diagnose
preset's communication window) follow its training steps with a `StepWindow`; pytorch,
memory, snapshot and pyspy check at the start of training that their window fits the run
(`check_window`), so a report is never empty for want of steps.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.profilers import Profiler
from lightning.pytorch.utilities.data import extract_batch_size
from typing_extensions import override

from harness.errors import ConfigError, HarnessError
from harness.measured import PHASES
from harness.result.schema import Diagnosis, RunResult


class ReportError(HarnessError):
    """A preset's report could not be made; the message (one line) says why. Raised by
    `write_reports` after it wrote what it could: result.json's `report_errors` records it."""


@dataclass
class Report:
    """What a preset's `write_reports` hands the run."""

    metrics: dict[str, Any] = field(default_factory=dict)  # result.json metrics: flat, unit in the name
    flags: list[str] = field(default_factory=list)  # result.json flags: cautions about the figures
    tables: list[Any] = field(default_factory=list)  # rich renderables or lines for the terminal
    clocks: dict[str, str] = field(default_factory=dict)  # result.json clocks: metric -> its clock


# -- what presets share ------------------------------------------------------------------------
def count_examples(batch: Any) -> int | None:
    """Examples in a batch on this rank, by Lightning's own batch-size extraction (the leading
    dimension of the first tensor found in it), or None when no tensor holds it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an ambiguous collection: the first size found is kept
        try:
            return int(extract_batch_size(batch))
        except Exception:  # MisconfigurationException: nothing to read it from
            return None


class BatchCounts:
    """Examples per batch, per phase, on this rank: how many batches held how many examples."""

    def __init__(self) -> None:
        self.sizes: dict[str, Counter[int | None]] = {phase: Counter() for phase in PHASES}

    def count(self, phase: str, batch: Any) -> int | None:
        """Count `batch`'s examples (None: unreadable) and tally them."""
        examples = count_examples(batch)
        self.sizes[phase][examples] += 1
        return examples

    def examples_per_batch(self) -> dict[str, int | None]:
        """Phase -> the most common examples per batch (None: unreadable), for phases that ran."""
        return {phase: sizes.most_common(1)[0][0] for phase, sizes in self.sizes.items() if sizes}


def at_once(work: Callable[[], None]) -> None:
    """`RunShared.untimed` when no preset times steps: nothing to keep the work out of."""
    work()


@dataclass
class RunShared:
    """What the presets of one run offer each other (the module docstring has the table)."""

    batches: BatchCounts = field(default_factory=BatchCounts)
    timed_from_step: int | None = None  # None: no preset times steps
    cautions: Any = None  # speed_flags.Cautions of the preset that times steps
    between_steps: list[Callable[[], None]] = field(default_factory=list)
    untimed: Callable[[Callable[[], None]], None] = at_once

    def run_between_steps(self) -> None:
        for work in self.between_steps:
            work()


class BatchObserver(Callback):
    """Harness's own callback in every Trainer: when no preset times steps, it counts each
    batch into `shared.batches` and runs `shared.between_steps` where a step timer would."""

    def __init__(self, shared: RunShared) -> None:
        self.shared = shared

    def _seen(self, phase: str, batch: Any) -> None:
        if self.shared.timed_from_step is None:
            self.shared.batches.count(phase, batch)

    def _between_steps(self) -> None:
        if self.shared.timed_from_step is None:
            self.shared.run_between_steps()

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

    @override
    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._between_steps()

    @override
    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._between_steps()

    @override
    def on_predict_end(self, trainer: Any, pl_module: Any) -> None:
        self._between_steps()


# -- the contract ------------------------------------------------------------------------------
class Preset:
    """Base of every preset, listed first among its bases; the module docstring says when the
    run calls each method. The defaults do nothing."""

    shared: RunShared

    def link(self, shared: RunShared) -> None:
        """Offer what this preset offers into `shared` and keep it for what it needs."""
        self.shared = shared

    @classmethod
    def can_absorb(cls, other: type) -> bool:
        """Whether a preset of this class can take over the work of one of class `other`,
        both Lightning Profilers (Lightning takes one): the rule `absorb` follows, known from
        the classes alone, so a clash is refused before anything runs (`check_one_profiler`)."""
        return False

    def absorb(self, other: Preset) -> bool:
        """Take over `other`'s work when both are Lightning Profilers (Lightning takes one);
        True when this preset now does both."""
        return False

    def write_reports(self, reports_dir: Path) -> Report:
        """Write reports/<name>.* and return what result.json and the terminal get; raise
        ReportError (one line) after writing what could be written."""
        return Report()

    def diagnose(self, reports_dir: Path, result: RunResult) -> Diagnosis | None:
        """The run's diagnosis from the other presets' figures (in `result.metrics`), or None."""
        return None


@dataclass
class Presets:
    """The run's presets, sorted by how Lightning takes them, linked through one RunShared."""

    by_name: dict[str, Preset] = field(default_factory=dict)  # those that report, config order
    callbacks: list[Callback] = field(default_factory=list)
    profiler: Profiler | None = None
    shared: RunShared = field(default_factory=RunShared)
    observer: BatchObserver | None = None  # for the Trainer's callbacks, after the presets

    @classmethod
    def of(cls, built: dict[str, Any]) -> Presets:
        """`built`: config name -> the object its `_target_` built. A plain Lightning Callback
        runs too (it writes no report); anything else is a HarnessError."""
        presets = cls()
        profiler_name: str | None = None
        for name, obj in built.items():
            if isinstance(obj, Profiler):
                if presets.profiler is not None and profiler_name is not None:
                    name, obj = combine_profilers(profiler_name, presets.profiler, name, obj)
                    presets.by_name.pop(profiler_name, None)
                profiler_name, presets.profiler = name, obj
            elif isinstance(obj, Callback):
                presets.callbacks.append(obj)
            else:
                raise HarnessError(
                    f"profiler.{name}._target_ built a {type(obj).__name__}, which is neither a"
                    " Lightning Callback nor a Lightning Profiler"
                )
            if isinstance(obj, Preset):
                presets.by_name[name] = obj
        for preset in presets.by_name.values():
            preset.link(presets.shared)
        presets.observer = BatchObserver(presets.shared)
        return presets


def combine_profilers(first_name: str, first: Any, second_name: str, second: Any
                      ) -> tuple[str, Any]:
    """The (name, profiler) that does the work of both presets, or a ConfigError."""
    for name, kept, other in ((first_name, first, second), (second_name, second, first)):
        if isinstance(kept, Preset) and kept.absorb(other):
            return name, kept
    raise _clash(first_name, second_name)


def check_one_profiler(targets: list[tuple[str, Any, Any]]) -> None:
    """Lightning takes one Profiler: presets of which two are one, and neither can take over
    the other's work, are refused before anything runs (harness.run.job.check_config; the
    same rule as combine_profilers, on the classes). `targets`: check_targets' (key, class,
    node) list."""
    chosen = [key.removeprefix("profiler.") for key, _, _ in targets
              if key.startswith("profiler.")]
    kept: tuple[str, type] | None = None
    for key, found, _ in targets:
        if not (key.startswith("profiler.") and isinstance(found, type)
                and issubclass(found, Profiler)):
            continue
        name = key.removeprefix("profiler.")
        if kept is None or _can_absorb(kept[1], found):
            kept = kept or (name, found)
        elif _can_absorb(found, kept[1]):
            kept = (name, found)
        else:
            raise _clash(kept[0], name, chosen)


def _can_absorb(kept: type, other: type) -> bool:
    return issubclass(kept, Preset) and kept.can_absorb(other)


def _clash(first_name: str, second_name: str, chosen: list[str] | None = None) -> ConfigError:
    return ConfigError(
        "profiler", f"[{','.join(chosen or (first_name, second_name))}]",
        f"at most one Lightning Profiler among the presets: '{first_name}' and"
        f" '{second_name}' cannot run together (Lightning takes one profiler and each of them"
        " is one; only pytorch + memory merge)",
        f"keep one of them, e.g. profiler=[speed,system,{second_name}], and run the other in"
        " a second run")


# -- step windows ------------------------------------------------------------------------------
def planned_training_steps(trainer: Any) -> float:
    """Training batches the fit will run on this rank (inf when unbounded). Known only once
    Lightning has set up the training data (num_training_batches is inf before that): call it
    at the start of training."""
    per_epoch = trainer.num_training_batches
    epochs = trainer.max_epochs if trainer.max_epochs not in (None, -1) else math.inf
    planned = per_epoch * epochs if per_epoch else 0
    if trainer.max_steps is not None and trainer.max_steps > 0:
        # max_steps counts optimizer steps; with gradient accumulation a step takes several batches.
        planned = min(planned, trainer.max_steps * trainer.accumulate_grad_batches)
    return planned


def check_window(preset: str, window: str, needed: int, trainer: Any, fix: str) -> None:
    """Raise a one-line HarnessError when a `needed`-step window does not fit into the fit."""
    planned = planned_training_steps(trainer)
    if needed > planned:
        raise HarnessError(
            f"profiler.{preset}: the recording window ({window} = {needed} training steps) is"
            f" longer than this run ({int(planned)} training steps, set by"
            " trainer.limit_train_batches, the data's batches, max_epochs and max_steps), so the"
            f" report would be empty. Fix: {fix}, or raise trainer.limit_train_batches"
        )


class StepWindow:
    """Training steps [start, start + length) of a preset that records part of a run.

    Call `opens_now()` in on_train_batch_start (True just before the window's first
    step) and `step_done()` in on_train_batch_end (True once its last step finished).
    """

    def __init__(self, start: int, length: int) -> None:
        self.start = start
        self.length = length
        self.done = 0  # training steps finished so far

    @property
    def end(self) -> int:
        return self.start + self.length

    def opens_now(self) -> bool:
        return self.done == self.start

    def step_done(self) -> bool:
        self.done += 1
        return self.done == self.end
