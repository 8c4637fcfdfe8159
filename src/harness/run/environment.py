"""Versions and hardware of the run, recorded in result.json."""

from __future__ import annotations

import platform
import socket
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from harness import memory_peaks


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def cpu_name() -> str:
    """The CPU model as /proc/cpuinfo names it, or what platform knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def device_info(device: torch.device) -> dict[str, Any]:
    """What the run ran on; `memory_bytes` is the GPU's memory (CUDA), else the machine's RAM:
    what the peak memory figures are held against."""
    if device.type == "cuda":
        return {
            "accelerator": "cuda",
            "device_name": torch.cuda.get_device_name(device),
            "device_count": torch.cuda.device_count(),
            "memory_bytes": torch.cuda.get_device_properties(device).total_memory,
        }
    import psutil

    return {"accelerator": device.type, "device_name": cpu_name(), "device_count": 1,
            "memory_bytes": psutil.virtual_memory().total}


def versions() -> dict[str, str | None]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "lightning": _version("lightning"),
        "hydra-core": _version("hydra-core"),
        "harness": _version("lightning-harness"),
    }


def compile_seconds() -> float:
    """Seconds spent compiling in this process so far (harness.private_api)."""
    from harness import private_api

    return private_api.compile_seconds()


def host() -> str:
    return socket.gethostname()


def reset_peak_memory(device: torch.device) -> None:
    """The measurement's peaks start now (harness.memory_peaks)."""
    memory_peaks.reset(device)


def peak_memory(device: torch.device) -> dict[str, int | None]:
    """Peak device memory of this measurement (CUDA) and the process's peak resident set.

    The resident peak is the kernel's high-water mark (VmHWM), reset at the start of each
    measurement, so it is this job's peak even when the jobs of a sweep share one process;
    passes harness adds (the diagnose preset's) are left out (harness.memory_peaks).
    """
    return memory_peaks.read(device)
