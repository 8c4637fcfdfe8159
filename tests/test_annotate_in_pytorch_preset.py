"""The workload's annotate() names appear in the pytorch preset's trace and key-averages.

The pytorch preset is built in a separate issue; until conf/profiler/pytorch.yaml
exists this test is skipped. The preset must call
`harness.instrument.switches.enable("record_function")` while its profiler runs.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from harness.config.locations import conf_dir

NAMES = ("workload.forward", "workload.backward", "workload.optimizer_step", "workload.make_batch")


def _text(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8", "replace")


@pytest.mark.slow
@pytest.mark.skipif(
    not (conf_dir() / "profiler" / "pytorch.yaml").is_file(),
    reason="conf/profiler/pytorch.yaml (the pytorch preset) is not in this branch yet",
)
def test_workload_names_show_in_pytorch_trace_and_key_averages(harness):
    done = harness("profiler=[pytorch]", "mode=train")
    assert done.returncode == 0, done.stderr[-3000:]
    files = [p for p in (done.run_dir() / "reports").rglob("*") if p.is_file()]
    traces = [p for p in files if "trace" in p.name.lower() and ".json" in p.name]
    tables = [p for p in files if "key" in p.name.lower() and "aver" in p.name.lower()]
    assert traces, f"no trace under reports/: {[p.name for p in files]}"
    assert tables, f"no key-averages table under reports/: {[p.name for p in files]}"
    trace_text = "".join(_text(p) for p in traces)
    table_text = "".join(_text(p) for p in tables)
    for name in NAMES:
        assert f'"{name}"' in trace_text, f"{name} missing from the trace"
        assert name in table_text, f"{name} missing from key-averages"
