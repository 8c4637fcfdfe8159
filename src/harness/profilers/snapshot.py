"""The `snapshot` preset: CUDA memory history over a window of steps, for pytorch.org/memory_viz
(docs/presets/snapshot.md)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from typing_extensions import override

from harness import private_api
from harness.config.checks import NonNegativeInt, PositiveInt
from harness.profilers.preset import Report, RunShared, StepWindow, WindowPreset, check_window
from harness.reports.files import atomic_path, write_json

log = logging.getLogger(__name__)


class SnapshotPreset(WindowPreset):
    """Records CUDA memory history for `steps` training steps from step `warmup` and dumps it."""

    def __init__(self, warmup: NonNegativeInt = 2, steps: PositiveInt = 3, max_entries: PositiveInt = 100_000,
                 dump_on_oom: bool = True, output_dir: str = "reports") -> None:
        self.warmup, self.steps, self.max_entries = warmup, steps, max_entries
        self.dump_on_oom, self.output_dir = dump_on_oom, Path(output_dir)
        self.skipped: str | None = None
        self.rank = 0
        self.recording = False
        self.window = StepWindow(warmup, steps)
        self.files: list[str] = []
        self.shared = RunShared()  # alone until linked: no step timer to keep the dump out of

    def _record(self, on: bool) -> None:
        """Recording stopped (its history dropped) if it ran, then started afresh when `on`."""
        if self.recording:
            private_api.record_memory_history(None)
        if on:
            private_api.record_memory_history(self.max_entries)
        self.recording = on

    def _dump(self, name: str) -> None:
        path = self.output_dir / f"{name}-rank{self.rank}.pickle"
        with atomic_path(path) as tmp:
            private_api.dump_memory_snapshot(str(tmp))
        self.files.append(path.name)
        log.info("snapshot: wrote %s (open it at https://pytorch.org/memory_viz)", path)

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.rank = trainer.global_rank
        device = trainer.strategy.root_device
        if device.type != "cuda" and self.skipped is None:
            self.skipped = f"the run is on {device.type}: CUDA memory history needs a CUDA device"
            if trainer.is_global_zero:
                log.info("snapshot: skipped, %s; the run goes on", self.skipped)

    @override
    def on_train_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if self.skipped:
            return
        check_window("snapshot", trainer, warmup=self.warmup, steps=self.steps)
        self._record(self.dump_on_oom)

    @override
    def window_opens(self, trainer: pl.Trainer) -> None:
        if not self.skipped:
            self._record(True)  # afresh: the window's snapshot holds the window only

    @override
    def window_closed(self) -> None:
        if self.recording:
            self.shared.untimed(self._window_ended)

    def _window_ended(self) -> None:
        """The window's snapshot, then recording goes on for a later OOM (or stops)."""
        if not self.recording:  # training ended, or failed, before the work ran
            return
        torch.cuda.synchronize()
        self._dump("snapshot")
        self._record(self.dump_on_oom)

    @override
    def on_train_end(self, *_: Any) -> None:
        self._record(False)

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        if not self.recording:  # never True when skipped
            return
        if self.dump_on_oom and (isinstance(exception, torch.cuda.OutOfMemoryError)
                                 or "CUDA out of memory" in str(exception)):
            self._dump("snapshot-oom")
        self._record(False)

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        write_json(reports_dir / "snapshot.json", {
            "report": "snapshot", "doc": "docs/presets/snapshot.md#output",
            "recorded_steps": [self.warmup, self.warmup + self.steps - 1],  # training, 0-based
            "dump_on_oom": self.dump_on_oom, "skipped": self.skipped, "files": self.files})
        metrics = {"snapshot_files": len(self.files), "snapshot_skipped": self.skipped is not None}
        if self.skipped:
            return Report(metrics)  # said once, when the run started
        return Report(metrics, tables=[f"snapshot: {', '.join(self.files) or 'nothing dumped'} (open at"
                                       " https://pytorch.org/memory_viz)"])
