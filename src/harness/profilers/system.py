"""The `system` preset: a sampler thread recording CPU, memory, disk and the run's GPUs every
`interval_s` from each stage's setup to its teardown (docs/presets/system.md)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from statistics import fmean
from typing import Any

import lightning.pytorch as pl
import psutil
from lightning.pytorch.callbacks import Callback
from rich.table import Table
from typing_extensions import override

from harness.config.checks import PositiveNumber
from harness.profilers.nvml import Nvml, torch_uuids
from harness.profilers.preset import Preset, Report, figures_table
from harness.reports.files import write_report
from harness.terminal import size

log = logging.getLogger(__name__)
CPU_LABELS = {
    "process_cpu_pct": "process CPU, % of one core", "system_cpu_pct": "system CPU, % of all cores",
    "rss_bytes": "process memory (resident set)",
    "children_rss_bytes": "child processes' memory (dataloader workers)",
    "disk_read_bytes_per_s": "disk read (all disks)", "disk_write_bytes_per_s": "disk write (all disks)",
}
GPU_LABELS = {"utilization_pct": "utilisation, %", "memory_used_bytes": "memory used", "power_w": "power, W"}
# harness's own MLflow tracker is a child of the job: its memory is not the loader workers'.
TRACKER_COMMAND = "harness.tracking.tracker_process"


class SystemSampler:
    """Samples the machine on a background thread between start() and stop()."""

    def __init__(self, interval_s: float, with_gpus: bool = True, devices: list[int] | None = None,
                 cuda_uuids: list[str] | None = None) -> None:
        """`devices`: the run's CUDA indices (None: every visible GPU; []: none)."""
        self.interval_s = interval_s
        self.process = psutil.Process()
        self.nvml = Nvml(cuda_uuids) if with_gpus and devices != [] else None
        self.gpu_note = ("GPU sampling turned off (profiler.system.gpus=false)" if not with_gpus
                         else "the run uses no GPU" if self.nvml is None else self.nvml.unavailable)
        if self.nvml is not None and devices and not self.gpu_note:
            self.nvml.gpus = [gpu for gpu in self.nvml.gpus if gpu.index in devices]
            if not self.nvml.gpus:
                self.gpu_note = f"NVML lists none of the run's GPUs (cuda:{devices})"
        self.samples: list[dict[str, Any]] = []
        self.segments = 0
        self.active_s = 0.0
        self.stage: str | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._origin = time.perf_counter()
        self._segment_start = 0.0
        self._last: tuple[float, Any] = (0.0, None)  # (clock, disk counters) at the last sample
        self._cpu_last = (0.0, 0.0)  # (busy, total) CPU seconds of the machine at the last sample

    @property
    def gpus(self) -> list[Any]:
        return [] if self.nvml is None or self.gpu_note else self.nvml.gpus

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self, stage: str | None = None) -> None:
        if self._thread is not None:
            return
        self.stage = stage
        self.segments += 1
        # cpu_percent compares with the previous call: primed so the first sample is real.
        self.process.cpu_percent(None)
        self._cpu_last = _busy_and_total(psutil.cpu_times())
        self._segment_start = time.perf_counter()
        self._take(first=True)  # energy and power from the stage's very start
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name="harness-system-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stopping.set()
        self._thread.join(timeout=self.interval_s + 10)
        self._thread = None
        self._take()  # the tail of the stage, shorter than one interval
        self.active_s += time.perf_counter() - self._segment_start

    def close(self) -> None:
        self.stop()
        if self.nvml is not None:
            self.nvml.close()

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self._take()

    def _take(self, first: bool = False) -> None:
        now, disk = time.perf_counter(), psutil.disk_io_counters()
        sample: dict[str, Any] = {
            "t_s": now - self._origin,
            "timestamp_s": time.time(),  # wall clock, for trackers that plot against time
            "segment": self.segments, "stage": self.stage,
            "process_cpu_pct": None if first else self.process.cpu_percent(None),
            "system_cpu_pct": None if first else self._system_cpu_pct(),
            "rss_bytes": self.process.memory_info().rss, "children_rss_bytes": _children_rss(self.process),
            "disk_read_bytes_per_s": None, "disk_write_bytes_per_s": None,
        }
        before_s, before = self._last
        if not first and disk is not None and before is not None and now > before_s:
            elapsed = now - before_s
            for key in ("read_bytes", "write_bytes"):
                sample[f"disk_{key}_per_s"] = (getattr(disk, key) - getattr(before, key)) / elapsed
        self._last = (now, disk)
        for gpu in self.gpus:
            sample.update({f"gpu{gpu.index}_{key}": value for key, value in self.nvml.sample(gpu).items()})
        self.samples.append(sample)

    def _system_cpu_pct(self) -> float | None:
        """Busy % of all CPUs since the last sample (psutil.cpu_percent's state is per thread)."""
        now = _busy_and_total(psutil.cpu_times())
        busy, total = now[0] - self._cpu_last[0], now[1] - self._cpu_last[1]
        self._cpu_last = now
        return round(100 * busy / total, 1) if total > 0 else None

    def gpu_energy(self, index: int) -> tuple[float | None, str]:
        """(Joules one GPU used over the sampled time, how it was obtained)."""
        counter, power = f"gpu{index}_energy_counter_j", f"gpu{index}_power_w"
        total, methods = 0.0, set()
        for before, after in zip(self.samples, self.samples[1:], strict=False):
            if before["segment"] != after["segment"]:
                continue
            if before.get(counter) is not None and after.get(counter) is not None:
                total += after[counter] - before[counter]
                methods.add("NVML total-energy counter")
            elif before.get(power) is not None and after.get(power) is not None:
                total += (before[power] + after[power]) / 2 * (after["t_s"] - before["t_s"])
                methods.add("power integrated over samples")
        if not methods:
            return None, "not measured"
        return total, " + ".join(sorted(methods))

    def series_stats(self, key: str) -> dict[str, float | None]:
        values = [float(s[key]) for s in self.samples if s.get(key) is not None]
        return {"mean": fmean(values), "max": max(values)} if values else {"mean": None, "max": None}


def _busy_and_total(times: Any) -> tuple[float, float]:
    """(busy, total) seconds of psutil.cpu_times(); guest time is already inside user time."""
    fields = times._asdict()
    total = sum(fields.values()) - fields.get("guest", 0.0) - fields.get("guest_nice", 0.0)
    return total - fields["idle"] - fields.get("iowait", 0.0), total


def _children_rss(process: psutil.Process) -> int:
    try:
        children = process.children(recursive=True)
    except psutil.Error:
        return 0
    total = 0
    for child in children:
        with contextlib.suppress(psutil.Error):  # a worker that just exited
            if TRACKER_COMMAND not in child.cmdline():
                total += child.memory_info().rss
    return total


class SystemPreset(Preset, Callback):
    """Runs a SystemSampler during every stage and writes reports/system.{json,csv}."""

    def __init__(self, interval_s: PositiveNumber = 1.0, gpus: bool = True) -> None:
        self.interval_s, self.with_gpus = interval_s, gpus
        self.sampler: SystemSampler | None = None

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.sampler is None:
            device = trainer.strategy.root_device
            # the trainer's CUDA indices on this node, found in NVML by torch's UUIDs
            on_cuda = self.with_gpus and device.type == "cuda"
            devices = list(getattr(trainer, "device_ids", None) or [device.index or 0])
            self.sampler = SystemSampler(self.interval_s, with_gpus=self.with_gpus,
                                         devices=devices if on_cuda else [],
                                         cuda_uuids=torch_uuids() if on_cuda else None)
            if self.sampler.gpu_note and trainer.is_global_zero:
                log.info("system: no GPU figures, %s", self.sampler.gpu_note)
        self.sampler.start(stage)

    @override
    def teardown(self, *_: Any, **__: Any) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    on_exception = teardown  # Lightning calls no teardown after an error

    def summary(self) -> dict[str, Any]:
        sampler = self.sampler
        if sampler is None:
            return {"samples": 0}
        gpus = []
        for gpu in sampler.gpus:
            energy_j, method = sampler.gpu_energy(gpu.index)
            if gpu.parent is not None:
                method += " (the whole GPU's: a MIG slice)"
            gpus.append({
                "index": gpu.index, "nvml_index": gpu.nvml_index, "uuid": gpu.uuid, "name": gpu.name,
                "mig": gpu.parent is not None,
                **{key: sampler.series_stats(f"gpu{gpu.index}_{key}") for key in GPU_LABELS},
                "energy_wh": energy_j / 3600.0 if energy_j is not None else None, "energy_method": method})
        return {"samples": len(sampler.samples), "execution_time_s": sampler.active_s,
                **{key: sampler.series_stats(key) for key in CPU_LABELS},
                "gpus": gpus, "gpu_note": sampler.gpu_note}

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        if self.sampler is not None:
            self.sampler.close()
        figures = self.summary()
        samples = self.sampler.samples if self.sampler else []
        write_report(reports_dir, "system", {
            "report": "system", "doc": "docs/presets/system.md#output",
            "stages": [str(getattr(stage, "value", stage))
                       for stage in dict.fromkeys(s["stage"] for s in samples)],
            "interval_s": self.interval_s, **figures}, samples)
        # one figure per physical GPU: MIG slices of one GPU share its energy
        per_gpu = {g["nvml_index"] if g["mig"] else ("cuda", g["index"]): g["energy_wh"]
                   for g in figures.get("gpus", []) if g["energy_wh"] is not None}
        metrics = {
            "system_samples": figures["samples"], "system_execution_time_s": figures.get("execution_time_s"),
            "system_process_cpu_pct_mean": figures.get("process_cpu_pct", {}).get("mean"),
            "system_rss_bytes_max": figures.get("rss_bytes", {}).get("max"),
            "system_gpu_energy_wh": sum(per_gpu.values()) if per_gpu else None}
        return Report(metrics, tables=[self.table(figures)])

    def table(self, figures: dict[str, Any]) -> Table:
        table = figures_table(f"System ({figures['samples']} samples every {self.interval_s:g} s,"
                              f" {figures.get('execution_time_s') or 0:.1f} s)", ("measure", "mean", "max"))
        for key, label in CPU_LABELS.items():
            stats = figures.get(key, {})
            table.add_row(label, _fmt(key, stats.get("mean")), _fmt(key, stats.get("max")))
        for gpu in figures.get("gpus", []):
            for key, label in GPU_LABELS.items():
                table.add_row(f"gpu{gpu['index']} {label}", _fmt(key, gpu[key]["mean"]),
                              _fmt(key, gpu[key]["max"]))
            table.add_row(f"gpu{gpu['index']} energy, Wh ({gpu['energy_method']})",
                          _fmt("energy_wh", gpu["energy_wh"]), "")
        table.caption = figures.get("gpu_note") or None
        return table


def _fmt(key: str, value: float | None) -> str:
    if value is None:
        return "-"
    if key.endswith("_bytes_per_s"):
        return size(value, "/s")
    if key.endswith("_bytes"):
        return size(value)
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.2f}"
