"""The `nsys` preset inside the job Nsight Systems runs (harness.launch.nsys): NVTX ranges for
`harness.annotate` and a cudaProfilerApi range over `active_steps` after `warmup_steps`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from hydra.core.hydra_config import HydraConfig
from typing_extensions import override

from harness.config.overrides import as_typed
from harness.instrument import switches
from harness.launch.nsys import REPORT_STEM, NsysOptions, in_child, manual_command
from harness.profilers.preset import Report, StepWindow, WindowPreset
from harness.reports.files import write_json

log = logging.getLogger(__name__)


class NsysPreset(WindowPreset):
    """Opens the cudaProfilerApi capture range over the configured training steps."""

    def __init__(self, **options: Any) -> None:
        self.options = NsysOptions.read(options)
        self.active = in_child()
        self.window = StepWindow(self.options.warmup_steps, self.options.active_steps)
        self.device: torch.device | None = None
        self.state = "waiting"  # waiting -> capturing -> done | no-cuda
        self.started_at: int | None = None
        self.stopped_after: int | None = None
        self.nvtx = False
        self._nvtx_enabled = 0

    @override
    def window_opens(self, trainer: pl.Trainer) -> None:
        if not self.active or self.state != "waiting":
            return
        if self.device is None or self.device.type != "cuda":
            self.state = "no-cuda"
            log.warning("profiler=nsys: the run is not on a CUDA device, so no capture range was"
                        " opened and nsys records nothing of it")
            return
        torch.cuda.synchronize(self.device)  # earlier steps' kernels stay out of the range
        torch.cuda.profiler.start()
        self.state = "capturing"
        self.started_at = self.window.done

    @override
    def window_closed(self) -> None:
        if self.state != "capturing":
            return
        torch.cuda.synchronize(self.device)  # the last step's kernels finish inside the range
        torch.cuda.profiler.stop()
        self.state = "done"
        self.stopped_after = self.window.done - 1

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not self.active:
            return
        first = self.device is None
        self.device = trainer.strategy.root_device
        self.nvtx = switches.enable("nvtx")
        self._nvtx_enabled += 1
        if first and not self.nvtx:
            log.warning("profiler=nsys: no NVTX here (neither the nvtx package nor CUDA), so"
                        " harness.annotate ranges will not show in the report")

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._nvtx_enabled:
            switches.disable("nvtx")
            self._nvtx_enabled -= 1

    @override
    def on_train_end(self, *_: Any) -> None:
        self.window_closed()  # training ended inside the window
        if self.active and self.state == "waiting":
            log.warning("profiler=nsys: training ran %d steps, fewer than warmup_steps=%d, so the"
                        " capture range never opened", self.window.done, self.options.warmup_steps)

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        if not self.active:
            return Report()
        try:
            overrides = as_typed(HydraConfig.get().overrides.task)
        except ValueError:  # not inside a Hydra job (tests that build the preset directly)
            overrides = ["profiler=[speed,nsys]"]
        write_json(reports_dir / "nsys.json", {
            "report": "nsys", "doc": "docs/profiling-your-code.md#6-which-kernels-profilernsys",
            "report_file": f"{REPORT_STEM}.nsys-rep",  # written by nsys when the run exits
            "capture": self.state, "capture_first_step": self.started_at,
            "capture_last_step": self.stopped_after, "trace": list(self.options.trace),
            "nvtx_ranges": self.nvtx, "manual_command": manual_command(self.options, overrides)})
        return Report()
