"""Process-wide torch settings (docs/running.md#torch-settings): `capture` at a job's start,
`read` after its measurement (result.json's `torch_settings`), `restore` at its end, so every
job of a sweep run in one process starts alike. Since torch 2.9 the TF32 switches have a
legacy and a per-backend API; `restore` sets the legacy ones first: the order that round-trips."""

from __future__ import annotations

import os
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from harness.launch.job_scope import put_back_environment

# Environment variables torch reads that Lightning sets in a job: OMP_NUM_THREADS (DDP's
# thread count), CUBLAS_WORKSPACE_CONFIG (trainer.deterministic=true).
ENVIRONMENT = ("OMP_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG")
# torch >= 2.9: torch.backends.<path>.fp32_precision, generic ("") first: restore's order.
_FP32_PATHS = ("", "cuda.matmul", "cudnn", "cudnn.conv", "cudnn.rnn", "mkldnn",
               "mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn")
# Set twice by restore: setting a legacy TF32 flag moves the matmul precision with it.
_LEGACY_TF32 = ("float32_matmul_precision", "cuda_matmul_allow_tf32", "cudnn_allow_tf32",
                "float32_matmul_precision")

Setting = tuple[Callable[[], Any], Callable[[Any], None]]


def _attribute(path: str, name: str) -> Setting:
    """torch.backends.<path>.<name>, looked up at each call."""
    import torch

    def node() -> Any:
        return attrgetter(path)(torch.backends) if path else torch.backends

    return (lambda: getattr(node(), name), lambda value: setattr(node(), name, value))


def _settings() -> dict[str, Setting]:
    """name -> (read, set); restore sets them in this order, after _LEGACY_TF32."""
    import torch

    def deterministic(value: bool) -> None:
        torch.use_deterministic_algorithms(
            value, warn_only=torch.is_deterministic_algorithms_warn_only_enabled())

    def warn_only(value: bool) -> None:
        torch.use_deterministic_algorithms(torch.are_deterministic_algorithms_enabled(), warn_only=value)

    cuda = torch.backends.cuda
    found: dict[str, Setting] = {
        "float32_matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        "cuda_matmul_allow_tf32": _attribute("cuda.matmul", "allow_tf32"),
        "cudnn_allow_tf32": _attribute("cudnn", "allow_tf32"),
        "cuda_matmul_allow_fp16_reduced_precision_reduction": _attribute(
            "cuda.matmul", "allow_fp16_reduced_precision_reduction"),
        "cuda_matmul_allow_bf16_reduced_precision_reduction": _attribute(
            "cuda.matmul", "allow_bf16_reduced_precision_reduction"),
        "cudnn_enabled": _attribute("cudnn", "enabled"),
        "cudnn_benchmark": _attribute("cudnn", "benchmark"),
        "cudnn_deterministic": _attribute("cudnn", "deterministic"),
        "deterministic_algorithms": (torch.are_deterministic_algorithms_enabled, deterministic),
        "deterministic_warn_only": (torch.is_deterministic_algorithms_warn_only_enabled, warn_only),
        "sdp_flash": (cuda.flash_sdp_enabled, cuda.enable_flash_sdp),
        "sdp_mem_efficient": (cuda.mem_efficient_sdp_enabled, cuda.enable_mem_efficient_sdp),
        "sdp_math": (cuda.math_sdp_enabled, cuda.enable_math_sdp),
        "num_threads": (torch.get_num_threads, torch.set_num_threads),
        "default_dtype": (lambda: str(torch.get_default_dtype()).removeprefix("torch."),
                          lambda name: torch.set_default_dtype(getattr(torch, name))),
    }
    if hasattr(cuda, "cudnn_sdp_enabled"):
        found["sdp_cudnn"] = (cuda.cudnn_sdp_enabled, cuda.enable_cudnn_sdp)
    if hasattr(torch.backends, "fp32_precision"):  # torch >= 2.9
        for path in _FP32_PATHS:
            name = "fp32_precision_" + (path.replace(".", "_") or "generic")
            found[name] = _attribute(path, "fp32_precision")
    return found


def set_threads(threads: int | None) -> int | None:
    """torch's intra-op threads set to `threads` (None: left as they are); what was set."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    return threads


def read() -> dict[str, Any]:
    """Every setting's current value (None: unreadable, e.g. the two TF32 APIs mixed)."""
    values: dict[str, Any] = {}
    for name, (get, _) in _settings().items():
        try:
            values[name] = get()
        except (RuntimeError, AttributeError):
            values[name] = None
    return values


def capture() -> dict[str, Any]:
    """The settings and the environment variables now (a job's start), for restore."""
    return {"torch": read(), "environment": {name: os.environ.get(name) for name in ENVIRONMENT}}


def restore(captured: dict[str, Any]) -> list[str]:
    """Put back every setting that differs from `captured`; their names (`env:<NAME>`)."""
    before, now = captured["torch"], read()
    changed = [name for name, value in before.items() if now.get(name) != value]
    if changed:
        settings = _settings()
        rest = [name for name in settings if name not in _LEGACY_TF32]
        for name in (*_LEGACY_TF32, *rest):
            if before.get(name) is not None:
                settings[name][1](before[name])
    return changed + [f"env:{name}" for name in put_back_environment(captured["environment"])]
