"""Dense peak FLOP/s of common NVIDIA GPUs per data type, the denominator of MFU.

Figures are the vendors' *dense* rates (no 2:4 sparsity; datasheets print the sparse ones
with an asterisk, twice as high), in TFLOP/s per GPU at boost clock, tensor cores with
FP32 accumulation, which is what PyTorch's fp16/bf16 matmuls use. Sources and pitfalls:
docs/presets/diagnose.md. Names are matched most specific first, on word boundaries, so
`NVIDIA L40S` is not taken for an L4, nor `NVIDIA A100` for an A10.

`fp32` is the plain (SIMT) rate that fp32 matmuls use under PyTorch's default
`float32_matmul_precision='highest'`; with 'high' or 'medium' they run on TF32 tensor cores.
"""

from __future__ import annotations

import re

# (name pattern, {dtype: dense TFLOP/s}); the first match wins.
_PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    (r"\bGB200\b", {"fp64": 40, "fp32": 80, "tf32": 1250, "bf16": 2500, "fp16": 2500, "fp8": 5000}),
    (r"\bB200\b", {"fp64": 37, "fp32": 75, "tf32": 1100, "bf16": 2250, "fp16": 2250, "fp8": 4500}),
    (r"\bGH200\b", {"fp64": 66.9, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4,
                    "fp8": 1978.9}),
    (r"\bH200 NVL\b", {"fp64": 60, "fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5,
                       "fp8": 1670.5}),
    (r"\bH200\b", {"fp64": 66.9, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4,
                   "fp8": 1978.9}),
    (r"\bH100 NVL\b", {"fp64": 60, "fp32": 60, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5,
                       "fp8": 1670.5}),
    (r"\bH100 PCIe\b", {"fp64": 51.2, "fp32": 51.2, "tf32": 378, "bf16": 756, "fp16": 756,
                        "fp8": 1513}),
    (r"\bH[18]00\b", {"fp64": 66.9, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4,
                      "fp8": 1978.9}),  # SXM: torch names it "NVIDIA H100 80GB HBM3"
    (r"\bA[18]00\b", {"fp64": 19.5, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}),
    (r"\bA30\b", {"fp64": 10.3, "fp32": 10.3, "tf32": 82, "bf16": 165, "fp16": 165}),
    (r"\bA10\b", {"fp32": 31.2, "tf32": 62.5, "bf16": 125, "fp16": 125}),
    (r"\bA40\b", {"fp32": 37.4, "tf32": 74.8, "bf16": 149.7, "fp16": 149.7}),
    (r"\bRTX A6000\b", {"fp32": 38.7, "tf32": 77.4, "bf16": 154.8, "fp16": 154.8}),
    (r"\bL40S\b", {"fp32": 91.6, "tf32": 183, "bf16": 362, "fp16": 362, "fp8": 733}),
    (r"\bL40\b", {"fp32": 90.5, "tf32": 90.5, "bf16": 181, "fp16": 181, "fp8": 362}),
    (r"\bL4\b", {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242.5}),
    (r"\bRTX 6000 Ada\b", {"fp32": 91.1, "tf32": 182.1, "bf16": 364.2, "fp16": 364.2,
                           "fp8": 728.5}),
    (r"\bRTX 4090\b", {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2, "fp8": 330.3}),
    (r"\bRTX 3090\b", {"fp32": 35.6, "tf32": 35.6, "bf16": 71, "fp16": 71}),
    (r"\bV100S\b", {"fp64": 8.2, "fp32": 16.4, "fp16": 130}),
    (r"\bV100-PCIE\b", {"fp64": 7, "fp32": 14, "fp16": 112}),
    (r"\bV100\b", {"fp64": 7.8, "fp32": 15.7, "fp16": 125}),
    (r"\bT4\b", {"fp32": 8.1, "fp16": 65}),
)
# Lightning's precision -> the data type its matmuls run in.
DTYPE_OF_PRECISION = {
    "64-true": "fp64", "32-true": "fp32", "32": "fp32",
    "16-mixed": "fp16", "16-true": "fp16", "bf16-mixed": "bf16", "bf16-true": "bf16",
    "transformer-engine": "fp8",
}


def matmul_dtype(precision: str | None, float32_matmul_precision: str = "highest") -> str | None:
    """The data type a run's matmuls use: its precision, and TF32 for fp32 when allowed."""
    dtype = DTYPE_OF_PRECISION.get(str(precision))
    if dtype == "fp32" and float32_matmul_precision in ("high", "medium"):
        return "tf32"
    return dtype


def dense_peak_tflops(device_name: str, dtype: str | None) -> float | None:
    """The device's dense peak for `dtype` in TFLOP/s, or None when it is not in the table."""
    if dtype is None:
        return None
    for pattern, peaks in _PEAKS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return peaks.get(dtype)
    return None
