"""The workload's annotate() names appear in the pytorch preset's trace and key-averages.

The pytorch preset switches `record_function` ranges on while its profiler
runs (`harness.instrument.switches`), so annotate() names reach its trace and its
key-averages table (reports/pytorch.csv, built from key_averages()).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

NAMES = ("workload.forward", "workload.backward", "workload.optimizer_step", "workload.make_batch")


def _text(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8", "replace")


@pytest.mark.slow
def test_workload_names_show_in_pytorch_trace_and_key_averages(harness):
    done = harness("profiler=[pytorch]", "profiler.pytorch.row_limit=-1", "mode=train")
    assert done.returncode == 0, done.stderr[-3000:]
    files = [p for p in (done.run_dir() / "reports").rglob("*") if p.is_file()]
    traces = [p for p in files if "trace" in p.name.lower() and ".json" in p.name]
    tables = [p for p in files if p.name == "pytorch.csv"]
    assert traces, f"no trace under reports/: {[p.name for p in files]}"
    assert tables, f"no key-averages table under reports/: {[p.name for p in files]}"
    trace_text = "".join(_text(p) for p in traces)
    table_text = "".join(_text(p) for p in tables)
    for name in NAMES:
        assert f'"{name}"' in trace_text, f"{name} missing from the trace"
        assert name in table_text, f"{name} missing from key-averages"
