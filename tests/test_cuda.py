"""The CUDA paths for real: skipped where no CUDA device exists."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_speed_on_cuda_synchronises_and_records_device_memory(harness):
    done = harness("trainer.accelerator=gpu", "precision=fp16", "profiler.speed.warmup_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["device"]["accelerator"] == "cuda"
    assert result["precision_used"] == "16-mixed"  # fp16 autocast is real on CUDA
    assert result["metrics"]["peak_device_allocated_bytes"] > 0
    speed = done.report("speed")
    assert "synchronize" in speed["clock"]
    assert speed["phases"]["train"]["examples_per_second"] > 0
