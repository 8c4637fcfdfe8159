"""The device's dense peak FLOP/s for the data type its matmuls run in: the denominator of MFU.

Lightning's `get_available_flops` table, and here only what it lacks or gives otherwise: the
vendors' dense rates (no 2:4 sparsity), at boost clock, FP32 accumulation."""

from __future__ import annotations

import re
import warnings

import torch
from lightning.fabric.utilities.throughput import get_available_flops

# (name pattern, {dtype: dense TFLOP/s}), in TFLOP/s per GPU; the first match wins.
_NOT_IN_LIGHTNING: tuple[tuple[str, dict[str, float]], ...] = (
    # Blackwell, not in Lightning. NVIDIA DGX B200 / GB200 NVL72 datasheets, sparse halved.
    (r"\bGB200\b", {"fp64": 40, "fp32": 80, "tf32": 1250, "bf16": 2500, "fp16": 2500, "fp8": 5000}),
    (r"\bB200\b", {"fp64": 37, "fp32": 75, "tf32": 1100, "bf16": 2250, "fp16": 2250, "fp8": 4500}),
    # Lightning matches an H200 only by "sxm1"/"nvl1", which torch's names lack, and gives
    # sparse figures: NVIDIA H200 and GH200 Grace Hopper datasheets, sparse halved.
    (r"\bGH200\b", {"fp64": 66.9, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}),
    (r"\bH200 NVL\b", {"fp64": 60, "fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}),
    (r"\bH200\b", {"fp64": 66.9, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}),
    # Lightning's "h100 nvl" is a card pair's: NVIDIA H100 NVL brief, one card, sparse halved.
    (r"\bH100 NVL\b", {"fp64": 60, "fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}),
    # Lightning has no fp8 and lists FP64 without tensor cores: NVIDIA H100 datasheet, FP64
    # Tensor Core and FP8 (sparse halved). An H100 named by its HBM2e memory is the PCIe card.
    (r"\bH100\b.*\b(PCIe|HBM2e)\b", {"fp64": 51.2, "fp8": 1513}),
    (r"\bH100\b", {"fp64": 66.9, "fp8": 1978.9}),
    # H800 PCIe: an H100 PCIe, not in Lightning (NVIDIA H800 PCIe datasheet, sparse halved).
    (r"\bH800\b.*\b(PCIe|HBM2e)\b", {"fp64": 51.2, "fp32": 51.2, "tf32": 378,
                                      "bf16": 756, "fp16": 756, "fp8": 1513}),
    # H800: an H100 SXM with slower NVLink, not in Lightning (NVIDIA H800 datasheet).
    (r"\bH800\b", {"fp64": 66.9, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}),
    # NVIDIA A100 datasheet, FP64 Tensor Core; A800 (not in Lightning): A800 datasheet.
    (r"\bA100\b", {"fp64": 19.5}),
    (r"\bA800\b", {"fp64": 19.5, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}),
    # Not in Lightning (it knows the A10G only): NVIDIA A30 and A10 datasheets.
    (r"\bA30\b", {"fp64": 10.3, "fp32": 10.3, "tf32": 82, "bf16": 165, "fp16": 165}),
    (r"\bA10\b", {"fp32": 31.2, "tf32": 62.5, "bf16": 125, "fp16": 125}),
    # Lightning gives bf16/fp16 at the FP32 rate: NVIDIA A40, RTX A6000 datasheets, sparse halved.
    (r"\bA40\b", {"bf16": 149.7, "fp16": 149.7}),
    (r"\bRTX A6000\b", {"bf16": 154.8, "fp16": 154.8}),
    # Lightning takes every name with "l4" in it for an L4 (an L40 only with "tesla" in its
    # name): NVIDIA L40S and L40 datasheets, sparse halved; the L4's fp8 (NVIDIA L4 datasheet).
    (r"\bL40S\b", {"fp32": 91.6, "tf32": 183, "bf16": 362, "fp16": 362, "fp8": 733}),
    (r"\bL40\b", {"fp32": 90.5, "tf32": 90.5, "bf16": 181, "fp16": 181, "fp8": 362}),
    (r"\bL4\b", {"fp8": 242.5}),
    # Not in Lightning: NVIDIA RTX 6000 Ada Generation datasheet, sparse halved.
    (r"\bRTX 6000 Ada\b", {"fp32": 91.1, "tf32": 182.1, "bf16": 364.2, "fp16": 364.2, "fp8": 728.5}),
    # Lightning gives bf16/fp16 at the FP32 rate: Ada and GA102 whitepapers, FP32 accumulation.
    (r"\bRTX 4090\b", {"bf16": 165.2, "fp16": 165.2, "fp8": 330.3}),
    (r"\bRTX 3090\b", {"bf16": 71, "fp16": 71}),
)
# Lightning's precision -> the data type its matmuls run in.
DTYPE_OF_PRECISION = {
    "64-true": "fp64", "32-true": "fp32", "32": "fp32", "16-mixed": "fp16", "16-true": "fp16",
    "bf16-mixed": "bf16", "bf16-true": "bf16", "transformer-engine": "fp8"}
# The same data types as Lightning's table keys them (it has no fp8).
_LIGHTNING_KEY: dict[str, torch.dtype | str] = {
    "fp64": torch.float64, "fp32": torch.float32, "tf32": "tfloat32", "bf16": torch.bfloat16,
    "fp16": torch.float16}
MIG_SLICES = 7  # compute slices of a MIG-capable GPU (A100, H100, H200, B200)


def matmul_dtype(precision: str | None, float32_matmul_precision: str = "highest",
                 convolutions: bool = False) -> str | None:
    """The matmuls' data type: the precision's, TF32 for fp32 where allowed (or by cuDNN)."""
    dtype = DTYPE_OF_PRECISION.get(str(precision))
    if dtype == "fp32" and (float32_matmul_precision in ("high", "medium") or convolutions):
        return "tf32"
    return dtype


def mig_share(name: str) -> float | None:
    """A MIG slice's share of the GPU's compute ("MIG 3g.40gb": 3/7); None for a whole GPU."""
    found = re.search(r"\bMIG\b.*?\b(\d)g\.\d+gb\b", name, flags=re.IGNORECASE)
    return int(found.group(1)) / MIG_SLICES if found else None


def dense_peak_tflops(device: torch.device, dtype: str | None) -> tuple[float | None, str | None]:
    """(Dense peak TFLOP/s for `dtype`, its source), or (None, None) where no table has it."""
    if dtype is None or device.type != "cuda":
        return None, None
    name = torch.cuda.get_device_name(device)
    peak, source = _whole_gpu_peak(device, name, dtype)
    share = mig_share(name)
    if peak is None or share is None:
        return peak, source
    return peak * share, f"{source}, x {share * MIG_SLICES:.0f}/{MIG_SLICES} for the MIG slice"


def _whole_gpu_peak(device: torch.device, name: str, dtype: str) -> tuple[float | None, str | None]:
    ours = next((peaks for pattern, peaks in _NOT_IN_LIGHTNING
                 if re.search(pattern, name, flags=re.IGNORECASE)), {})
    if dtype in ours:
        return ours[dtype], f"dense {dtype} peak of {name} (harness.profilers.diagnose.peak_flops)"
    if dtype not in _LIGHTNING_KEY:
        return None, None
    # fp32 goes to Lightning only under 'highest' (matmul_dtype), where it keeps the fp32 rate.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "FLOPs not found for ...": None says it
        peak = get_available_flops(device, _LIGHTNING_KEY[dtype])
    if not peak:
        return None, None
    return peak / 1e12, (f"dense {dtype} peak of {name}"
                         " (lightning.fabric.utilities.throughput.get_available_flops)")
