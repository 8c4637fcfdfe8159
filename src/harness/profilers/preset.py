"""The contract between a preset and the run that hosts it (docs/architecture.md, "Presets").

A preset is a Lightning Callback or Profiler that is also a `Preset`. The run puts the presets together
with `Presets.of` and calls each at three moments only: `link(shared)` before the Trainer runs;
Lightning's own hooks; at the end, on global rank zero (harness.run.finish), `write_reports` of every
preset in config order, then `diagnose` (it reads the others' figures). What one preset needs from
another goes through the run's one `RunShared`."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.profilers import Profiler
from lightning.pytorch.utilities.data import extract_batch_size
from rich.table import Table
from typing_extensions import override

from harness.config.targets import absorber
from harness.errors import HarnessError
from harness.measured import PHASES
from harness.result.schema import Diagnosis, RunResult


class ReportError(HarnessError):
    """Raised by `write_reports` after writing what it could; result.json's `report_errors`."""


@dataclass
class Report:
    """What a preset's `write_reports` hands the run."""

    metrics: dict[str, Any] = field(default_factory=dict)  # result.json metrics: flat, unit in the name
    flags: list[str] = field(default_factory=list)  # result.json flags: cautions about the figures
    tables: list[Any] = field(default_factory=list)  # rich renderables or lines for the terminal
    clocks: dict[str, str] = field(default_factory=dict)  # result.json clocks: metric -> its clock
    blocks: dict[str, Any] = field(default_factory=dict)  # result.json blocks of their own (scaling)


def figures_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]] = (),
                  labels: int = 1) -> Table:
    """A terminal table for a Report: its first `labels` columns left-aligned, the figures right."""
    table = Table(title=title)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index < labels else "right")
    for row in rows:
        table.add_row(*row)
    return table


def count_examples(batch: Any) -> int | None:
    """Examples in a batch on this rank, by Lightning's extract_batch_size; None if unreadable."""
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
        # training: examples per optimizer step on this rank, how many steps took each
        self.step_examples: Counter[int | None] = Counter()
        self._since_step: int | None = 0  # None: a batch since the last step was not readable

    def count(self, phase: str, batch: Any) -> int | None:
        examples = count_examples(batch)
        self.sizes[phase][examples] += 1
        if phase == "train":
            self._since_step = (None if examples is None or self._since_step is None
                                else self._since_step + examples)
        return examples

    def optimizer_stepped(self) -> None:
        """The training batches counted since the last optimizer step made one."""
        self.step_examples[self._since_step] += 1
        self._since_step = 0

    def examples_per_batch(self) -> dict[str, int | None]:
        """Phase -> the most common examples per batch (None: unreadable), for phases that ran."""
        return {phase: sizes.most_common(1)[0][0] for phase, sizes in self.sizes.items() if sizes}


@dataclass
class RunShared:
    """What one run's presets offer each other: written at `link`, read in Lightning's hooks."""

    # Counted once per batch: inside its timed step by the step timer, else by BatchObserver.
    batches: BatchCounts = field(default_factory=BatchCounts)
    timed_from_step: int | None = None  # the first measured step; None: no step timer
    cautions: Any = None  # the step timer's speed_flags.Cautions
    # Slow work kept out of timed steps (a logger's flush), run where the step clock restarts.
    between_steps: list[Callable[[], None]] = field(default_factory=list)
    # untimed(work): one-off slow work from a step's hooks, run once no step is timed (at once
    # when no preset times steps).
    untimed: Callable[[Callable[[], None]], None] = lambda work: work()
    # each rank's step parts (profilers.rank_timer), one for the presets that `needs_rank_timer`
    rank_timer: Any = None

    def run_between_steps(self) -> None:
        for work in self.between_steps:
            work()


class BatchObserver(Callback):
    """Counts batches and runs `shared.between_steps` when no preset times steps."""

    def __init__(self, shared: RunShared) -> None:
        self.shared = shared
        self._global_step = 0  # the trainer's optimizer steps when the batch started

    def _seen(self, phase: str, batch: Any) -> None:
        if self.shared.timed_from_step is None:
            self.shared.batches.count(phase, batch)

    @override
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, *_: Any) -> None:
        self._seen("train", batch)
        self._global_step = trainer.global_step

    @override
    def on_train_batch_end(self, trainer: Any, *_: Any) -> None:
        # global_step counts optimizer steps: with accumulation, not every batch makes one
        if trainer.global_step != self._global_step:
            self.shared.batches.optimizer_stepped()

    @override
    def on_validation_batch_start(self, trainer: Any, pl_module: Any, batch: Any, *_: Any) -> None:
        if not trainer.sanity_checking:
            self._seen("validation", batch)

    @override
    def on_predict_batch_start(self, trainer: Any, pl_module: Any, batch: Any, *_: Any) -> None:
        self._seen("inference", batch)

    @override
    def on_validation_end(self, *_: Any) -> None:
        if self.shared.timed_from_step is None:
            self.shared.run_between_steps()

    on_train_epoch_end = on_predict_end = on_validation_end


class Preset:
    """Base of every preset, listed first among its bases; the defaults do nothing. A Lightning
    Profiler preset that can take over another's work has `can_absorb(other class)` and
    `absorb(other)` (config.targets.absorber, `combine_profilers`)."""

    shared: RunShared

    def link(self, shared: RunShared) -> None:
        """Offer what this preset offers into `shared` and keep it for what it needs."""
        self.shared = shared

    def write_reports(self, reports_dir: Path) -> Report:
        """Write reports/<name>.* and return the Report; raise ReportError after writing."""
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
        """`built`: config name -> its built object; a plain Callback runs without a report."""
        presets = cls()
        profiler_name: str | None = None
        for name, obj in built.items():
            if isinstance(obj, Profiler):
                if profiler_name is not None:
                    name, obj = combine_profilers(profiler_name, presets.profiler, name, obj)
                    presets.by_name.pop(profiler_name, None)
                profiler_name, presets.profiler = name, obj
            elif isinstance(obj, Callback):
                presets.callbacks.append(obj)
            else:
                raise HarnessError(f"profiler.{name}._target_ built a {type(obj).__name__}, which is"
                                   " neither a Lightning Callback nor a Lightning Profiler")
            if isinstance(obj, Preset):
                presets.by_name[name] = obj
        wanted = {getattr(p, "needs_rank_timer", None) for p in presets.by_name.values()} - {None}
        if wanted:  # "ranks": runs of several processes only; "always": a single process too
            from harness.profilers.rank_timer import RankTimer

            presets.shared.rank_timer = RankTimer(single_process="always" in wanted)
            presets.callbacks.insert(0, presets.shared.rank_timer)
        for preset in presets.by_name.values():
            preset.link(presets.shared)
        presets.observer = BatchObserver(presets.shared)
        return presets


# Lightning takes one profiler: of the presets that are one, only pytorch + memory combine
def combine_profilers(first_name: str, first: Any, second_name: str, second: Any) -> tuple[str, Any]:
    """The (name, profiler) that does the work of both presets, or a ConfigError naming both."""
    name, _ = absorber((first_name, type(first)), (second_name, type(second)))
    kept, other = (first, second) if name == first_name else (second, first)
    kept.absorb(other)
    return name, kept


def check_window(preset: str, trainer: Any, **window: int) -> None:
    """A one-line HarnessError, at training start, when the recording window does not fit the fit:
    `window`, profiler.<preset>.<key> = its training steps, in the order they run."""
    needed, keys = sum(window.values()), [f"profiler.{preset}.{key}" for key in window]
    epochs = trainer.max_epochs if trainer.max_epochs not in (None, -1) else math.inf
    planned = trainer.num_training_batches * epochs if trainer.num_training_batches else 0
    if trainer.max_steps is not None and trainer.max_steps > 0:
        # max_steps counts optimizer steps; with gradient accumulation a step takes several batches.
        planned = min(planned, trainer.max_steps * trainer.accumulate_grad_batches)
    if needed > planned:
        raise HarnessError(
            f"profiler.{preset}: the recording window ({' + '.join(window)} = {needed} training steps) is"
            f" longer than this run ({int(planned)} training steps, set by trainer.limit_train_batches, the"
            f" data's batches, max_epochs and max_steps), so the report would be empty. Fix: lower"
            f" {' / '.join(keys)}, or raise trainer.limit_train_batches")


@dataclass
class StepWindow:
    """Training steps [start, start + length) that a preset records."""

    start: int
    length: int
    done: int = 0  # training steps finished so far

    def step_done(self) -> bool:
        self.done += 1
        return self.done == self.start + self.length


class WindowPreset(Preset, Callback):
    """A Callback preset that records the training steps of its `window` (None: no window)."""

    window: StepWindow | None = None

    def window_opens(self, trainer: Any) -> None:
        """The window's first step is about to start."""

    def window_closed(self) -> None:
        """The window's last step has ended."""

    @override
    def on_train_batch_start(self, trainer: Any, *_: Any) -> None:
        if self.window is not None and self.window.done == self.window.start:
            self.window_opens(trainer)

    @override
    def on_train_batch_end(self, *_: Any) -> None:
        if self.window is not None and self.window.step_done():
            self.window_closed()
