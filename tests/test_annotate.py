"""harness.annotate: a no-op until switched on, then record_function and NVTX ranges by name."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest
import torch

import harness
from harness.instrument import switches
from harness.instrument.annotate import annotate


@pytest.fixture(autouse=True)
def _switches_off():
    switches.reset()
    yield
    switches.reset()


def _profiled(work) -> torch.profiler.profile:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        work()
    return prof


def _keys(prof: torch.profiler.profile) -> dict[str, int]:
    return {e.key: e.count for e in prof.key_averages()}


@annotate("test.decorated")
def _decorated(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _work() -> None:
    with annotate("test.block"):
        torch.ones(4) + 1
    for _ in range(3):
        _decorated(torch.ones(2))


def test_importing_harness_loads_neither_torch_nor_nvtx():
    code = (
        "import sys, harness\n"
        "with harness.annotate('x'): pass\n"
        "f = harness.profile(len)\n"
        "print(f is len, 'torch' in sys.modules, 'nvtx' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "False"]


def test_switched_on_names_show_in_key_averages_and_trace(tmp_path):
    switches.enable("record_function")
    prof = _profiled(_work)
    keys = _keys(prof)
    assert keys["test.block"] == 1
    assert keys["test.decorated"] == 3
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    names = [e.get("name") for e in json.loads(trace.read_text())["traceEvents"]]
    assert names.count("test.decorated") == 3
    assert "test.block" in names


def test_switched_off_opens_no_range_even_under_a_profiler():
    prof = _profiled(_work)
    keys = _keys(prof)
    assert "test.block" not in keys and "test.decorated" not in keys
    assert any(k.startswith("aten::") for k in keys)  # the profiler did record the ops


def test_decorator_keeps_name_result_and_exceptions():
    assert _decorated.__name__ == "_decorated"
    assert torch.equal(_decorated(torch.ones(2)), torch.full((2,), 2.0))

    @annotate("test.raises")
    def boom() -> None:
        raise KeyError("inner")

    switches.enable("record_function")
    with pytest.raises(KeyError):
        boom()
    # The range that raised was closed: a later one still records on its own.
    keys = _keys(_profiled(lambda: _decorated(torch.ones(1))))
    assert keys["test.decorated"] == 1


def test_reused_object_nests_and_closes_in_order():
    switches.enable("record_function")
    outer = annotate("test.reused")
    depth: list[int] = []

    def work() -> None:
        with outer:
            with outer:
                torch.ones(1) + 1
                depth.append(len(outer._opened))
            depth.append(len(outer._opened))

    assert "test.reused" in _keys(_profiled(work))
    assert depth == [2, 1]
    assert outer._opened == []


def test_switches_count_enables_and_disables():
    assert switches.enable("record_function")
    assert switches.enable("record_function")
    switches.disable("record_function")
    assert switches.is_enabled("record_function")  # one enable still holds it on
    switches.disable("record_function")
    assert not switches.is_enabled("record_function")
    assert not switches.STATE.on
    switches.disable("record_function")  # more disables than enables: harmless
    assert switches.STATE.counts["record_function"] == 0
    with pytest.raises(ValueError, match="unknown instrumentation kind"):
        switches.enable("cupti")


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the path without nvtx and without CUDA"
)
def test_nvtx_without_the_package_is_a_true_no_op():
    try:
        import nvtx  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the nvtx package is installed here")
    assert switches.enable("nvtx") is False
    assert not switches.STATE.on  # nothing to open, so annotate stays on its fast path
    with annotate("test.nvtx"):
        value = _decorated(torch.ones(1))
    assert value.item() == 2.0


def test_nvtx_ranges_push_and_pop_through_the_nvtx_package(monkeypatch):
    calls: list[tuple[str, str | None]] = []
    fake = types.ModuleType("nvtx")
    fake.push_range = lambda message=None, **kw: calls.append(("push", message))
    fake.pop_range = lambda **kw: calls.append(("pop", None))
    monkeypatch.setitem(sys.modules, "nvtx", fake)
    assert switches.enable("nvtx") is True
    with annotate("test.outer"):
        _decorated(torch.ones(1))
    assert calls == [
        ("push", "test.outer"),
        ("push", "test.decorated"),
        ("pop", None),
        ("pop", None),
    ]
    switches.disable("nvtx")
    calls.clear()
    _decorated(torch.ones(1))
    assert calls == []


def test_public_names_are_the_instrument_objects():
    from harness.instrument.line_profile import profile

    assert harness.annotate is annotate
    assert harness.profile is profile
    with pytest.raises(AttributeError):
        harness.no_such_name  # noqa: B018
