"""The GPUs this process can see, read through NVML (pynvml), matched to CUDA indices by UUID
or CUDA_VISIBLE_DEVICES."""

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
    parent: Any = None  # a MIG slice's physical GPU: its power and energy are the whole GPU's

    @property
    def power_handle(self) -> Any:
        return self.handle if self.parent is None else self.parent


def _bare(uuid: str) -> str:
    """A UUID as torch writes it: NVML writes "GPU-<uuid>" / "MIG-<uuid>"."""
    text = _text(uuid).strip().lower()
    return text[4:] if text.startswith(("gpu-", "mig-")) else text


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
            found = int(entry) if 0 <= int(entry) < count else None
        else:
            prefix = entry if entry.startswith(("GPU-", "MIG-")) else f"GPU-{entry}"
            matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(prefix)]
            found = matches[0] if len(matches) == 1 else None
        if found is None or found in chosen:
            break  # CUDA stops at the first invalid, unknown, ambiguous or repeated entry
        chosen.append(found)
    return chosen


class Nvml:
    """An open NVML session, or the reason there is none (`unavailable`)."""

    def __init__(self, cuda_uuids: list[str] | None = None) -> None:
        """`cuda_uuids`: CUDA's devices in order (None: CUDA_VISIBLE_DEVICES decides)."""
        self.module: Any = None
        self.gpus: list[Gpu] = []
        self.unavailable: str | None = None
        try:
            self.module = importlib.import_module("pynvml")
        except ImportError:
            self.unavailable = "NVML not available: the nvidia-ml-py package (pynvml) is not installed"
            return
        try:
            self.module.nvmlInit()
        except Exception as err:
            self.unavailable = (f"NVML not available: {_text(err) or type(err).__name__}"
                                " (no NVIDIA driver?)")
            self.module = None
            return
        self.gpus = self._visible_gpus(cuda_uuids)
        if not self.gpus:
            self.unavailable = "no GPU visible to this process (CUDA_VISIBLE_DEVICES or none installed)"

    def _visible_gpus(self, cuda_uuids: list[str] | None) -> list[Gpu]:
        nv = self.module
        count = int(nv.nvmlDeviceGetCount())
        # (nvml index of the physical GPU, handle, parent handle for a MIG slice)
        devices = [(i, nv.nvmlDeviceGetHandleByIndex(i), None) for i in range(count)]
        devices += [(i, slice_, handle) for i, handle, _ in list(devices)
                    for slice_ in self._mig_slices(handle)]
        uuids = [_text(self._call(nv.nvmlDeviceGetUUID, h) or "") for _, h, _ in devices]
        if cuda_uuids is not None:
            chosen = [next((k for k, uuid in enumerate(uuids) if _bare(uuid) == _bare(wanted)), None)
                      for wanted in cuda_uuids]
        else:  # indices name physical GPUs; a UUID may name a MIG slice
            chosen = parse_visible(os.environ.get("CUDA_VISIBLE_DEVICES"), count, uuids)
        gpus = []
        for cuda_index, found in enumerate(chosen):
            if found is None:
                continue  # a device NVML does not list: no figures for it
            nvml_index, handle, parent = devices[found]
            energy = self._call(nv.nvmlDeviceGetTotalEnergyConsumption,
                                parent if parent is not None else handle)
            gpus.append(Gpu(index=cuda_index, nvml_index=nvml_index, uuid=uuids[found],
                            name=_text(self._call(nv.nvmlDeviceGetName, handle) or "unknown"),
                            handle=handle, has_energy_counter=energy is not None, parent=parent))
        return gpus

    def _mig_slices(self, handle: Any) -> list[Any]:
        """The MIG devices of a physical GPU in MIG mode; none otherwise."""
        nv = self.module
        mode = self._call(getattr(nv, "nvmlDeviceGetMigMode", None), handle)
        if not mode or not mode[0]:  # (current, pending); current 1: MIG enabled
            return []
        count = int(self._call(nv.nvmlDeviceGetMaxMigDeviceCount, handle) or 0)
        slices = [self._call(nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, k) for k in range(count)]
        return [found for found in slices if found is not None]

    @staticmethod
    def _call(function: Any, *args: Any) -> Any:
        if function is None:
            return None
        try:
            return function(*args)
        except Exception:  # NVMLError_NotSupported and friends: the value is missing
            return None

    def sample(self, gpu: Gpu) -> dict[str, float | None]:
        nv = self.module
        util = self._call(nv.nvmlDeviceGetUtilizationRates, gpu.handle)  # None on a MIG slice
        memory = self._call(nv.nvmlDeviceGetMemoryInfo, gpu.handle)
        power_mw = self._call(nv.nvmlDeviceGetPowerUsage, gpu.power_handle)
        energy_mj = (self._call(nv.nvmlDeviceGetTotalEnergyConsumption, gpu.power_handle)
                     if gpu.has_energy_counter else None)
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


def torch_uuids() -> list[str] | None:
    """The visible CUDA devices' UUIDs in CUDA's order, or None; initialises CUDA."""
    import torch

    try:
        uuids = [str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]
    except Exception:  # an old driver: CUDA_VISIBLE_DEVICES decides
        return None
    return uuids or None  # no CUDA here (a test's fake device): the variable decides
