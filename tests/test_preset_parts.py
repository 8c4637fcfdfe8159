"""The pieces behind the presets, in process: folding, event rows, composition, torchinfo."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from harness.errors import ConfigError, HarnessError
from harness.profilers.preset import check_window, combine_profilers
from harness.profilers.torch_profiler import event_row, memory_rows


def test_concise_time_rows_fold_each_callback_into_one_row():
    from harness.profilers.simple import time_rows

    durations = {
        "run_training_epoch": [2.0],
        "[Callback]SpeedPreset.on_train_batch_start": [0.1, 0.1],
        "[Callback]SpeedPreset.on_train_batch_end": [0.2],
        "[Callback]SummaryPreset.setup": [0.05],
        "[LightningModule]Net.optimizer_step": [0.5, 0.5],
    }
    concise = {r["action"]: r for r in time_rows(durations, run_s=4.0, verbose=False)}
    assert set(concise) == {
        "run_training_epoch",
        "[Callback]SpeedPreset (all hooks)",
        "[Callback]SummaryPreset (all hooks)",
        "[LightningModule]Net.optimizer_step",
    }
    speed = concise["[Callback]SpeedPreset (all hooks)"]
    assert speed["calls"] == 3 and speed["total_s"] == pytest.approx(0.4)
    assert speed["mean_s"] == pytest.approx(0.4 / 3)
    assert speed["share_of_run_pct"] == pytest.approx(10.0)
    verbose = time_rows(durations, run_s=4.0, verbose=True)
    assert len(verbose) == len(durations)
    assert [r["action"] for r in verbose][0] == "run_training_epoch"  # longest first


def _event(**fields):
    base = dict(
        key="aten::mm",
        count=3,
        self_cpu_memory_usage=100,
        cpu_memory_usage=300,
        self_cpu_time_total=1500.0,
        cpu_time_total=3000.0,
        flops=0,
        input_shapes=None,
    )
    return SimpleNamespace(**{**base, **fields})


def test_event_rows_read_device_and_old_cuda_spellings():
    new = event_row(
        _event(
            self_device_memory_usage=10,
            device_memory_usage=20,
            self_device_time_total=500.0,
            device_time_total=700.0,
        )
    )
    old = event_row(
        _event(
            self_cuda_memory_usage=10,
            cuda_memory_usage=20,
            self_cuda_time_total=500.0,
            cuda_time_total=700.0,
        )
    )
    for row in (new, old):
        assert row["self_device_memory_bytes"] == 10 and row["device_memory_bytes"] == 20
        assert row["self_device_time_ms"] == 0.5 and row["device_time_ms"] == 0.7
        assert row["self_cpu_time_ms"] == 1.5 and row["calls"] == 3
    cpu_only = event_row(_event())  # no device attributes at all
    assert cpu_only["device_memory_bytes"] == 0 and cpu_only["device_time_ms"] == 0.0


def test_memory_rows_rank_operators_and_drop_annotations():
    rows = [
        event_row(_event(key=k, cpu_memory_usage=m))
        for k, m in (
            ("aten::empty", 10),
            ("ProfilerStep*", 10_000),
            ("[pl][profile]run_training_batch", 9_000),
            ("torch/nn/modules/module.py(1773): _call_impl", 8_000),
            ("aten::mm", 50),
            ("harness(8): <module>", 7_000),
            ("aten::add", 30),
        )
    ]
    top = memory_rows(rows, limit=2)
    assert [r["name"] for r in top] == ["aten::mm", "aten::add"]
    assert top[0]["total_memory_bytes"] == 50


def test_real_profiler_events_give_memory_rows():
    from torch.profiler import ProfilerActivity, profile

    layer = torch.nn.Linear(16, 16)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        layer(torch.randn(8, 16)).sum().backward()
    rows = memory_rows([event_row(e) for e in prof.key_averages()], limit=5)
    assert rows and rows[0]["cpu_memory_bytes"] > 0
    assert all(r["device_memory_bytes"] == 0 for r in rows)


def test_pytorch_and_memory_merge_into_one_profiler():
    from harness.profilers.torch_profiler import MemoryPreset, PytorchPreset

    ops, memory = PytorchPreset(), MemoryPreset(top=7, extra_plots=True)
    name, merged = combine_profilers("memory", memory, "pytorch", ops)
    assert name == "pytorch" and merged is ops
    assert merged.reports == {"ops", "memory"} and merged.memory_top == 7
    assert merged._profiler_kwargs["profile_memory"] is True
    assert merged._profiler_kwargs["with_stack"] is True  # the memory timeline needs stacks


def test_two_lightning_profilers_are_refused_naming_both():
    from harness.profilers.advanced import AdvancedPreset
    from harness.profilers.simple import SimplePreset

    with pytest.raises(HarnessError, match="'simple' and 'advanced' cannot run together.*Fix:"):
        combine_profilers("simple", SimplePreset(), "advanced", AdvancedPreset())


def test_a_profiler_clash_is_refused_from_the_classes_before_anything_runs():
    """check_job's check on check_targets' classes: the same rule as combine_profilers
    (only pytorch + memory merge, in either order), a ConfigError (exit 2) naming the list."""
    from harness.config.targets import check_one_profiler
    from harness.profilers.advanced import AdvancedPreset
    from harness.profilers.simple import SimplePreset
    from harness.profilers.speed import SpeedPreset
    from harness.profilers.torch_profiler import MemoryPreset, PytorchPreset

    def targets(**presets):
        return [(f"profiler.{name}", cls, None) for name, cls in presets.items()]

    check_one_profiler(targets(speed=SpeedPreset, pytorch=PytorchPreset, memory=MemoryPreset))
    check_one_profiler(targets(memory=MemoryPreset, pytorch=PytorchPreset, speed=SpeedPreset))
    with pytest.raises(ConfigError, match=r"profiler='\[speed,simple,advanced\]' is not valid"
                       r".*'simple' and 'advanced' cannot run together.*Fix:") as refused:
        check_one_profiler(targets(speed=SpeedPreset, simple=SimplePreset,
                                   advanced=AdvancedPreset))
    assert refused.value.exit_status == 2
    with pytest.raises(ConfigError, match="'memory' and 'simple'"):
        check_one_profiler(targets(memory=MemoryPreset, simple=SimplePreset))


def test_window_check_names_the_keys():
    trainer = SimpleNamespace(
        num_training_batches=4, max_epochs=1, max_steps=-1, accumulate_grad_batches=1
    )
    check_window("memory", trainer, warmup=1, steps=3)  # fits exactly
    with pytest.raises(HarnessError, match=r"warmup \+ steps = 5 training steps.*4 training.*Fix: lower"
                       r" profiler\.memory\.warmup / profiler\.memory\.steps, or raise"):
        check_window("memory", trainer, warmup=2, steps=3)


@pytest.mark.parametrize(("preset", "values", "says"), [
    ("system", {"interval_s": -1}, "profiler.system.interval_s=-1 is not valid: expected a value > 0."
     " Fix: profiler.system.interval_s=1"),
    ("memory", {"steps": 0}, "profiler.memory.steps=0 is not valid: expected a value >= 1."),
    ("pytorch", {"sort_by": "bogus"}, "profiler.pytorch.sort_by='bogus' is not valid: expected"
     " 'self_cpu_time_total', "),
    ("pytorch", {"wait": -1}, "profiler.pytorch.wait=-1 is not valid: expected a value >= 0."),
    ("pytorch", {"phases": ["train", "eval"]}, "profiler.pytorch.phases=['train', 'eval'] is not"
     " valid: expected 'train', 'validation', 'test' or 'inference'. Fix: profiler.pytorch.phases=[train]"),
    ("simple", {"console_rows": -1}, "profiler.simple.console_rows=-1 is not valid"),
    ("simple", {"verbose": "yes"}, "expected a valid boolean. Fix: profiler.simple.verbose=false"),
    ("advanced", {"lines": 0}, "profiler.advanced.lines=0 is not valid: expected a value >= 1 or a"
     " value > 0."),
    ("advanced", {"lines": 1.5}, "expected a valid integer or a value <= 1."),
    ("pyspy", {"formats": "svg"}, "expected 'flamegraph', 'speedscope', 'chrometrace' or 'raw'."),
    ("pyspy", {"formats": []}, "expected 'flamegraph', 'speedscope', 'chrometrace' or 'raw' or a list"
     " of at least 1 item(s)."),
    ("summary", {"columns": ["num_params", "nope"]}, "profiler.summary.columns="),
    ("diagnose", {"when": "later"}, "expected 'end' or 'start'. Fix: profiler.diagnose.when=end"),
    ("diagnose", {"peak_tflops": "fast"}, "profiler.diagnose.peak_tflops='fast' is not valid"),
])
def test_bad_options_are_refused_before_a_preset_is_built(preset, values, says):
    """The presets' constructors trust their arguments: their hints are checked before a build
    (config.arguments, the job's and ProfileSession's one check), in one line naming the key."""
    from hydra.utils import get_object
    from omegaconf import OmegaConf

    from harness.config.arguments import check_node
    from harness.config.locations import conf_dir

    node = OmegaConf.load(conf_dir() / "profiler" / f"{preset}.yaml")
    node.merge_with(values)
    with pytest.raises(ConfigError) as refused:
        check_node(f"profiler.{preset}", get_object(node._target_), node)
    assert says in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    assert refused.value.key == f"profiler.{preset}.{next(iter(values))}"


def test_summary_of_a_compiled_network_uses_the_original_module():
    import torchinfo

    from harness.private_api import uncompiled

    holder = torch.nn.Module()
    holder.net = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()))
    compiled = holder.net
    with uncompiled(holder):
        assert isinstance(holder.net, torch.nn.Sequential)
        stats = torchinfo.summary(holder.net, input_data=[torch.randn(2, 8)], verbose=0)
    assert holder.net is compiled  # restored, never called: nothing was compiled
    assert stats.total_params == 8 * 4 + 4


def test_system_table_gives_bytes_in_binary_units_and_every_row_its_unit():
    from harness.profilers.system import SystemPreset, SystemSampler
    from harness.terminal import plain_text

    preset = SystemPreset(interval_s=1.0, gpus=False)
    preset.sampler = SystemSampler(1.0, with_gpus=False)
    sample = {"segment": 1, "t_s": 0.0, "process_cpu_pct": 150.0, "system_cpu_pct": 40.0,
              "rss_bytes": 704_698_368, "children_rss_bytes": 3 * 2**30,
              "disk_read_bytes_per_s": 512.0, "disk_write_bytes_per_s": 2.5 * 2**20}
    preset.sampler.samples = [sample, {**sample, "rss_bytes": 600 * 2**20}]
    table = preset.table(preset.summary())
    text = plain_text(table)
    assert "704,698,368" not in text
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:4]]
            for line in text.splitlines() if line.count("│") == 4}
    assert rows["process memory (resident set)"] == ["636.0 MiB", "672.1 MiB"]
    assert rows["child processes' memory (dataloader workers)"] == ["3.0 GiB", "3.0 GiB"]
    assert rows["disk read (all disks)"] == ["512 bytes/s", "512 bytes/s"]
    assert rows["disk write (all disks)"] == ["2.5 MiB/s", "2.5 MiB/s"]
    assert rows["process CPU, % of one core"] == ["150.00", "150.00"]


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces
    to hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_reports_doc_link_names_a_section_that_exists():
    # The report JSONs carry a link to the page that explains their fields instead of prose.
    root = Path(__file__).resolve().parent.parent
    source = "\n".join(p.read_text() for p in (root / "src/harness/profilers").rglob("*.py"))
    links = set(re.findall(r"(docs/[\w/{}.-]+\.md)#([\w-]+)", source))
    links = {(page.format(report=report), anchor) for page, anchor in links
             for report in ("pytorch", "memory")}  # torch_profiler's f-string, else unchanged
    assert len(links) >= 12, links  # every preset that writes a json
    for page, anchor in sorted(links):
        assert (root / page).is_file(), page
        assert anchor in _anchors(root / page), (page, anchor)


class _CachingAllocator:
    """torch.cuda's memory figures as its caching allocator keeps them: a freed block stays
    reserved until empty_cache; a peak reset starts both peaks from what is held now."""

    def __init__(self) -> None:
        self.allocated = self.reserved = self.max_allocated = self.max_reserved = 0

    def alloc(self, n: int) -> None:
        self.allocated += n
        self.reserved = max(self.reserved, self.allocated)
        self.max_allocated = max(self.max_allocated, self.allocated)
        self.max_reserved = max(self.max_reserved, self.reserved)

    def free(self, n: int) -> None:
        self.allocated -= n  # the block goes to the cache, still reserved

    def empty_cache(self) -> None:
        self.reserved = self.allocated

    def reset_peak_memory_stats(self, device=None) -> None:
        self.max_allocated, self.max_reserved = self.allocated, self.reserved

    def patch(self, monkeypatch) -> None:
        for name in ("empty_cache", "reset_peak_memory_stats"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: self.max_allocated)
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d=None: self.max_reserved)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: self.allocated)


def test_an_excluded_pass_leaves_no_cache_under_the_runs_reserved_peak(monkeypatch):
    """Planted: the run holds 1 GiB (its peak 2 GiB); the pass allocates 8 GiB and frees it.
    Before #23 the 8 GiB stayed in torch's cache across the peak reset, the floor of the
    run's peak_device_reserved_bytes; now the cache goes back first (#23)."""
    from harness import memory_peaks

    gib = 2**30
    fake = _CachingAllocator()
    fake.patch(monkeypatch)
    device = torch.device("cuda", 0)
    memory_peaks.reset(device)
    fake.alloc(2 * gib)
    fake.free(gib)
    fake.empty_cache()
    with memory_peaks.excluded(device):
        fake.alloc(8 * gib)
        fake.free(8 * gib)
    fake.alloc(gib // 2)  # the run goes on, below its earlier peak
    figures = memory_peaks.read(device)
    assert figures["peak_device_allocated_bytes"] == 2 * gib
    assert figures["peak_device_reserved_bytes"] == 2 * gib


def test_the_mlflow_tracker_child_is_not_counted_as_loader_workers():
    """The job's MLflow tracker is a child process of the job: the system preset's children's
    memory (its data loader workers) leaves it out and counts any other child."""
    import time

    import psutil

    from harness.profilers.system import TRACKER_COMMAND, _children_rss

    me = psutil.Process()
    before = _children_rss(me)  # the test session's own children (a fork server), if any
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    tracker = subprocess.Popen([*sleep, TRACKER_COMMAND])
    worker = subprocess.Popen(sleep)
    try:
        time.sleep(0.5)  # both interpreters up
        tracker_rss = psutil.Process(tracker.pid).memory_info().rss
        worker_rss = psutil.Process(worker.pid).memory_info().rss
        counted = _children_rss(me) - before
        assert abs(counted - worker_rss) < tracker_rss / 2, (counted, worker_rss, tracker_rss)
    finally:
        for child in (tracker, worker):
            child.kill()
            child.wait()


def test_the_machines_cpu_share_holds_at_least_this_process_share_in_every_sample():
    """Planted: this process keeps one core busy. Every sample after the first (which has no
    previous reading) reads the machine at least as busy as this process makes it: the
    sampler thread's first sample and the stage's tail (taken on the caller's thread) too."""
    import os
    import time

    from harness.profilers.system import SystemSampler

    sampler = SystemSampler(interval_s=0.25, devices=[])
    sampler.start("fit")
    end = time.perf_counter() + 1.2
    while time.perf_counter() < end:
        pass  # one core busy
    sampler.stop()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    first, *rest = sampler.samples
    assert first["system_cpu_pct"] is None and len(rest) >= 2  # the thread's, the tail
    for before, sample in zip(sampler.samples, rest, strict=False):
        if sample["system_cpu_pct"] is None:  # no clock tick (10 ms) since the last: no reading
            assert sample["t_s"] - before["t_s"] < 0.05, (before, sample)
            continue
        own_share = sample["process_cpu_pct"] / (cpus or 1)
        assert sample["system_cpu_pct"] >= 0.8 * own_share - 5, (sample, cpus)
