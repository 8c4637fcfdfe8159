"""Versions and hardware of the run, recorded in result.json."""

from __future__ import annotations

import platform
import resource
import socket
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch


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
    if device.type == "cuda":
        return {
            "accelerator": "cuda",
            "device_name": torch.cuda.get_device_name(device),
            "device_count": torch.cuda.device_count(),
        }
    return {"accelerator": device.type, "device_name": cpu_name(), "device_count": 1}


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
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> dict[str, int | None]:
    """Peak device memory of this run (CUDA) and the process's peak resident set (CPU).

    The resident peak is the kernel's high-water mark (VmHWM); on Linux each job resets
    it at its start (harness.run.isolation, /proc/self/clear_refs), so it is this
    job's peak even when the jobs of a sweep share one process.
    """
    from harness.run.isolation import peak_rss_bytes

    rss = peak_rss_bytes()
    if rss is None:  # no /proc: ru_maxrss is bytes on macOS, KiB elsewhere
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        rss = maxrss if sys.platform == "darwin" else maxrss * 1024
    figures: dict[str, int | None] = {"peak_rss_bytes": rss, "peak_device_allocated_bytes": None,
                                      "peak_device_reserved_bytes": None}
    if device.type == "cuda":
        figures["peak_device_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        figures["peak_device_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
    return figures
