"""The GPUs this process can see, read through NVML (the `pynvml` module of nvidia-ml-py).

CUDA_VISIBLE_DEVICES decides which GPUs a process sees and in which order; it
holds indices ("0,2") or UUIDs ("GPU-8f3a...", a unique prefix is enough), and
CUDA ignores everything after the first entry it cannot resolve. NVML ignores
the variable, so the mapping is done here. Every NVML call that fails becomes a
missing value, never an error: the system report must survive any driver.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any


@dataclass
class Gpu:
    index: int  # index as the process sees it (cuda:<index>)
    nvml_index: int | None  # physical index in NVML, None when found by UUID only
    uuid: str
    name: str
    handle: Any
    has_energy_counter: bool


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_visible(value: str | None, count: int, uuids: list[str]) -> list[int]:
    """NVML indices of the devices CUDA_VISIBLE_DEVICES makes visible, in CUDA's order."""
    if value is None:
        return list(range(count))
    chosen: list[int] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            break
        if entry.lstrip("-").isdigit():
            index = int(entry)
            if not 0 <= index < count:
                break  # CUDA stops at the first invalid entry
            found = index
        else:
            prefix = entry if entry.startswith(("GPU-", "MIG-")) else f"GPU-{entry}"
            matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(prefix)]
            if len(matches) != 1:
                break  # unknown or ambiguous UUID: CUDA stops here too
            found = matches[0]
        if found in chosen:
            break
        chosen.append(found)
    return chosen


class Nvml:
    """An open NVML session, or the reason there is none (`unavailable`)."""

    def __init__(self) -> None:
        self.module: Any = None
        self.gpus: list[Gpu] = []
        self.unavailable: str | None = None
        try:
            self.module = importlib.import_module("pynvml")
        except ImportError:
            self.unavailable = (
                "NVML not available: the nvidia-ml-py package (pynvml) is not installed"
            )
            return
        try:
            self.module.nvmlInit()
        except Exception as err:
            self.unavailable = (
                f"NVML not available: {_text(err) or type(err).__name__} (no NVIDIA driver?)"
            )
            self.module = None
            return
        self.gpus = self._visible_gpus()
        if not self.gpus:
            self.unavailable = (
                "no GPU visible to this process (CUDA_VISIBLE_DEVICES or none installed)"
            )

    def _visible_gpus(self) -> list[Gpu]:
        nv = self.module
        count = int(nv.nvmlDeviceGetCount())
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        uuids = [_text(nv.nvmlDeviceGetUUID(h)) for h in handles]
        gpus = []
        for cuda_index, nvml_index in enumerate(
            parse_visible(os.environ.get("CUDA_VISIBLE_DEVICES"), count, uuids)
        ):
            handle = handles[nvml_index]
            gpus.append(
                Gpu(
                    index=cuda_index,
                    nvml_index=nvml_index,
                    uuid=uuids[nvml_index],
                    name=_text(self._call(nv.nvmlDeviceGetName, handle) or "unknown"),
                    handle=handle,
                    has_energy_counter=self._call(nv.nvmlDeviceGetTotalEnergyConsumption, handle)
                    is not None,
                )
            )
        return gpus

    @staticmethod
    def _call(function: Any, *args: Any) -> Any:
        try:
            return function(*args)
        except Exception:  # NVMLError_NotSupported and friends: the value is missing
            return None

    def sample(self, gpu: Gpu) -> dict[str, float | None]:
        """Utilisation %, memory used (bytes), power (W) and the energy counter (J) of one GPU."""
        nv = self.module
        util = self._call(nv.nvmlDeviceGetUtilizationRates, gpu.handle)
        memory = self._call(nv.nvmlDeviceGetMemoryInfo, gpu.handle)
        power_mw = self._call(nv.nvmlDeviceGetPowerUsage, gpu.handle)
        energy_mj = (
            self._call(nv.nvmlDeviceGetTotalEnergyConsumption, gpu.handle)
            if gpu.has_energy_counter
            else None
        )
        return {
            "utilization_pct": float(util.gpu) if util is not None else None,
            "memory_used_bytes": float(memory.used) if memory is not None else None,
            "power_w": power_mw / 1000.0 if power_mw is not None else None,
            "energy_counter_j": energy_mj / 1000.0 if energy_mj is not None else None,
        }

    def close(self) -> None:
        if self.module is not None:
            self._call(self.module.nvmlShutdown)
            self.module = None
