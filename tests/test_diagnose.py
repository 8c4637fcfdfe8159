"""The diagnose preset against planted truths: a slow loader, a slow step, a slow callback;
FLOPs of the built-in transformer against the analytic count; communication per rank."""

from __future__ import annotations

import pytest
import torch
from conftest import FAST, run_harness

from harness.profilers.diagnose.findings import bound_by, shares
from harness.profilers.diagnose.peak_flops import dense_peak_tflops, matmul_dtype
from harness.profilers.flops import count_flops
from harness.result.schema import RunResult
from harness.workload.model import TransformerModule

PLANTED = ("model._target_=planted.PlantedModule", "~model.dim", "~model.depth",
           "~model.num_heads", "~model.mlp_ratio", "~model.dropout", "~model.lr",
           "data._target_=planted.PlantedData", "~data.seq_len", "~data.dim",
           "~data.train_batches", "~data.val_batches", "~data.predict_batches",
           "~data.generate_on", "~data.num_workers", "~data.pin_memory",
           "batch_size=4", "mode=train", "logger=none", "trainer.enable_progress_bar=false",
           "profiler=[speed,diagnose]", "profiler.speed.warmup_steps=2")


def analytic_training_flops(batch: int, seq: int, dim: int, depth: int) -> int:
    """Forward matmuls of a block: qkv 6BSd^2, proj 2BSd^2, MLP 16BSd^2, attention 4BS^2d;
    backward twice that."""
    return 3 * depth * (24 * batch * seq * dim**2 + 4 * batch * seq**2 * dim)


@pytest.mark.parametrize(("batch", "seq", "dim", "depth"), [(4, 16, 32, 2), (2, 64, 128, 3)])
def test_flops_of_the_builtin_transformer_match_the_analytic_count(batch, seq, dim, depth):
    module = TransformerModule(dim=dim, depth=depth, num_heads=4)
    x, y = torch.randn(batch, seq, dim), torch.randn(batch, seq, dim)

    flops, note = count_flops(module, lambda: torch.nn.functional.mse_loss(module(x), y),
                              lambda loss: loss)  # forward, then backward of the loss
    assert note is None
    assert flops == pytest.approx(analytic_training_flops(batch, seq, dim, depth), rel=0.02)


def test_uncountable_steps_say_so_in_one_line():
    flops, note = count_flops(torch.nn.Identity(), lambda: torch.ones(3).sum())
    assert flops is None and note.startswith("FLOPs not counted: torch saw no matmul")


def test_shares_cap_the_wait_at_what_the_loader_needs():
    # 30 ms of waiting the loader explains: data. The same wait with a 1 ms loader: host.
    assert bound_by(shares(0.033, 0.030, 0.030, 0.003)) == "data"
    host = shares(0.033, 0.030, 0.001, 0.002)
    assert bound_by(host) == "host" and host["host"] == pytest.approx(0.030 / 0.033)
    assert bound_by(shares(0.033, 0.0, 0.0, 0.031)) == "compute"
    assert bound_by(shares(None, 0.0, 0.0, 0.03)) == "unknown"


def test_peak_table_matches_device_names_most_specific_first(monkeypatch):
    def peak(name: str, dtype: str) -> float | None:
        """The peak a CUDA device of that name would get (Lightning's table reads the name)."""
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
        return dense_peak_tflops(torch.device("cuda"), dtype)[0]

    assert peak("NVIDIA H100 80GB HBM3", "bf16") == 989.4
    assert peak("NVIDIA H100 PCIe", "bf16") == 756
    assert peak("NVIDIA L40S", "bf16") == 362  # not the L4's 121
    assert peak("NVIDIA L4", "bf16") == 121
    assert peak("NVIDIA A100-SXM4-80GB", "tf32") == 156
    assert peak("NVIDIA GH200 480GB", "fp16") == 989.4
    assert peak("Tesla T4", "bf16") is None  # no bf16 on Turing
    assert dense_peak_tflops(torch.device("cpu"), "fp32") == (None, None)
    # each figure names its table: Lightning's, or the entries harness adds to it
    assert "get_available_flops" in dense_peak_tflops(torch.device("cuda"), "fp16")[1]
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    assert dense_peak_tflops(torch.device("cuda"), "bf16") == (
        989.4, "dense bf16 peak of NVIDIA H200 (harness.profilers.diagnose.peak_flops)")
    assert matmul_dtype("32-true") == "fp32" and matmul_dtype("32-true", "high") == "tf32"
    assert matmul_dtype("bf16-mixed") == "bf16" and matmul_dtype("16-mixed") == "fp16"


def _diagnosis(tmp_path, name: str, *overrides: str) -> tuple[dict, float]:
    """The run's diagnosis and its median training step."""
    cwd = tmp_path / name
    cwd.mkdir()
    done = run_harness(cwd, *PLANTED, *overrides, fast=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    found = result["diagnosis"]
    # on a busy machine the verdict says so first ("contended (...), so the shares ...: ")
    said = found["verdict"].partition("as much as the run: ")
    if "contended:train" in result["flags"]:
        assert said[1], found["verdict"]
        found["verdict"] = said[2]
    assert "diagnosis: " in done.stdout and found["verdict"].startswith("bound by"), (
        found["verdict"])
    return found, result["metrics"]["train_median_step_s"]  # the step the shares are of


@pytest.mark.slow
def test_planted_bottlenecks_are_named(tmp_path):
    # the truth: each step waits the planted 30 ms for its batch, out of the measured step
    data, step_s = _diagnosis(tmp_path, "data", "+data.fetch_s=0.03", "+model.step_s=0.003")
    assert data["bound_by"] == "data"
    assert data["train_data_share"] == pytest.approx(0.030 / step_s, abs=0.05)
    assert data["findings"][0]["kind"] == "data-bound"
    assert "num_workers" in data["findings"][0]["next_step"]
    assert data["verdict"].startswith("bound by data loading:")

    compute, _ = _diagnosis(tmp_path, "compute", "+model.step_s=0.03")
    assert compute["bound_by"] == "compute"
    assert compute["train_compute_share"] > 0.8
    low, high = compute["train_compute_share_range"]  # over the model pass's steps
    assert low <= compute["train_compute_share"] <= high

    # 4 workers at 80 ms a batch: the pipeline delivers one per 20 ms, the step needs 2 ms.
    # Its prefetch buffer empties at once; the loader pass must time the steady state.
    workers, step_s = _diagnosis(tmp_path, "workers", "+data.fetch_s=0.08",
                                 "+data.num_workers=4", "+model.step_s=0.002")
    assert workers["bound_by"] == "data", workers["verdict"]
    assert workers["train_loader_step_s"] == pytest.approx(0.020, rel=0.35)
    assert workers["train_data_share"] > 0.7
    assert "num_workers" not in workers["findings"][0]["next_step"]  # it has them

    host, _ = _diagnosis(tmp_path, "host", "+profiler.slow._target_=planted.SlowCallback",
                      "+profiler.slow.callback_s=0.03")
    assert host["bound_by"] == "host"
    assert host["train_host_share"] > 0.8
    assert host["passes"]["cost_s"] > 0 and "restored" in host["passes"]["state"]


@pytest.mark.slow
def test_builtin_run_reports_flops_and_flop_rate(harness):
    done = harness("profiler=[speed,diagnose]", "mode=train")
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    found = result["diagnosis"]
    assert found["train_flops_per_step"] == pytest.approx(analytic_training_flops(4, 16, 32, 2),
                                                          rel=0.02)
    step = result["metrics"]["train_median_step_s"]  # the median iteration, as the shares'
    assert found["train_flop_per_s"] == pytest.approx(found["train_flops_per_step"] / step)
    assert found["train_mfu"] is None  # a CPU: no peak unless profiler.diagnose.peak_tflops
    # each figure in one place: the diagnosis's are not copied into metrics, and readers
    # (the sweep table, MLflow) get them from RunResult.figures()
    assert not any(key in result["metrics"] for key in
                   ("train_flop_per_s", "train_flops_per_step", "train_compute_share",
                    "train_step_s", "diagnose_cost_s"))
    assert RunResult.model_validate(result).figures()["train_flop_per_s"] == (
        found["train_flop_per_s"])
    assert "train_step_s" not in found  # the speed preset's train_seconds_per_iteration
    report = done.report("diagnosis")
    assert report["flop_convention"].startswith("2 FLOPs per multiply-add")
    assert report["doc"] == "docs/presets/diagnose.md#output"
    assert {k: v for k, v in report.items() if k not in ("report", "doc")} == found
    assert (done.run_dir() / "reports" / "diagnosis.md").read_text().startswith("# Diagnosis")
    given = harness("profiler=[speed,diagnose]", "mode=train",
                    "profiler.diagnose.peak_tflops=1.0", fast=True)
    assert given.returncode == 0


@pytest.mark.slow
def test_ddp_splits_communication_from_compute_per_rank(tmp_path):
    done = run_harness(tmp_path, *FAST, "trainer.strategy=ddp", "trainer.devices=2",
                       "trainer.accelerator=cpu", "mode=train", "profiler=[speed,diagnose]",
                       "profiler.speed.warmup_steps=1", fast=False)
    assert done.returncode == 0, done.stderr[-3000:]
    diagnosis = done.result()["diagnosis"]
    ranks = diagnosis["communication_by_rank"]
    assert len(ranks) == 2
    # warm-up 1 cannot hold the window: said, not hidden
    assert any("warmup_steps >=" in note for note in diagnosis["passes"]["notes"])
    for rank in ranks:
        assert rank["communication_s"] > 0 and rank["compute_s"] > 0
        assert rank["window_s"] >= max(rank["communication_s"], rank["compute_s"])
        assert 0 <= rank["overlap_s"] <= min(rank["communication_s"], rank["compute_s"])


def test_every_step_finding_names_the_bound_and_ranks_by_share():
    from harness.profilers.diagnose.findings import phase_findings, ranked, run_findings

    # A compute bound below 50% still gets its finding, ahead of the smaller host share.
    figures = {"shares": {"data": 0.17, "compute": 0.46, "communication": 0.0, "host": 0.37}}
    step = phase_findings("train", figures, {"accelerator": "cpu"})
    run = run_findings({"precision_note": "asked for fp16, Lightning used bf16-mixed"})
    kinds = [f.kind for f in ranked(step, run)]
    assert kinds == ["compute-bound", "host-bound", "precision"]
    assert [f.score for f in step] == [0.37, 0.46] and run[0].score is None


def test_the_verdict_names_the_phase_it_describes():
    from harness.profilers.diagnose.findings import verdict

    figures = {"shares": {"data": 0.0, "compute": 0.9, "communication": 0.0, "host": 0.1}}
    assert "of each inference step is the forward of predict_step" in verdict(
        "compute", figures, "inference")
    assert "of each training step is forward, backward and optimizer" in verdict(
        "compute", figures, "train")


def test_the_verdict_says_how_noisy_its_share_is():
    from harness.profilers.diagnose.findings import phase_findings, verdict

    figures = {"shares": {"data": 0.0, "compute": 0.82, "communication": 0.0, "host": 0.18},
               "share_ranges": {"compute": [0.76, 0.88], "host": [0.12, 0.24]}}
    said = "82% (76%-88% over the model pass's steps) of each training step"
    assert said in verdict("compute", figures, "train")
    assert phase_findings("train", figures, {})[0].message.startswith(said)
    figures["share_ranges"]["compute"] = [0.818, 0.822]  # within a percent: not worth saying
    assert "82% of each training step" in verdict("compute", figures, "train")


def test_the_loader_pass_leaves_the_rng_as_it_found_it():
    from types import SimpleNamespace

    from harness.profilers.diagnose.speed_of_light import loader_alone, rng_restored

    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu"),
                                                       batch_to_device=lambda batch: batch))
    loader = torch.utils.data.DataLoader(torch.arange(40.0), batch_size=4, shuffle=True)
    before = torch.random.get_rng_state()
    loader_alone(trainer, loader, 3, 0)  # a shuffled loader draws its order from the RNG
    assert not torch.equal(before, torch.random.get_rng_state())
    import random

    import numpy

    before = torch.random.get_rng_state()
    python_next, numpy_next = random.Random(), numpy.random.get_state()
    python_next.setstate(random.getstate())
    with rng_restored():
        found, batch = loader_alone(trainer, loader, 3, 0)
        random.random(), numpy.random.rand()  # an augmentation drawing from the others
    assert torch.equal(before, torch.random.get_rng_state())
    assert random.random() == python_next.random()
    assert numpy.random.get_state()[2] == numpy_next[2]
    assert (numpy.random.get_state()[1] == numpy_next[1]).all()
    assert found.steps == 3 and found.examples == 4 and batch.shape == (4,)


def test_the_communication_window_ends_inside_the_speed_warmup():
    from harness.profilers.diagnose.preset import DiagnosePreset
    from harness.profilers.preset import Presets
    from harness.profilers.speed import SpeedPreset

    def start(warmup: int) -> tuple[int, list[str]]:
        diagnose = DiagnosePreset(communication_steps=3)
        # the speed preset offers its warm-up through the run's RunShared, in either order
        Presets.of({"diagnose": diagnose, "speed": SpeedPreset(warmup_steps=warmup)})
        return diagnose.comm_start(diagnose.shared.timed_from_step), diagnose.notes

    # Steps [start, start+3) recorded; stopping lands in step start+3, which must be warm-up.
    assert start(10) == (2, [])
    first, notes = start(5)  # earlier than the third step: DDP's bucket rebuild may be in it
    assert first == 1 and notes == [
        "the communication window starts at step 1: DDP rebuilds its gradient buckets in the"
        " second step, which may be in it"]
    first, notes = start(4)  # the least warm-up that keeps the window out
    assert first == 0 and not any("warmup_steps >=" in n for n in notes)
    first, notes = start(3)
    assert first == 0 and "profiler.speed.warmup_steps >= 4" in notes[-1]
    assert DiagnosePreset().communication_steps == 2  # the default fits the default warm-up
    default = DiagnosePreset()
    Presets.of({"speed": SpeedPreset(), "diagnose": default})
    default.comm_start(default.shared.timed_from_step)
    assert default.notes == []
    assert DiagnosePreset().comm_start(None) == 2  # no speed preset: no warm-up to keep out of


def test_the_model_pass_copies_no_sharded_or_oversized_state():
    from lightning.pytorch.strategies import FSDPStrategy, SingleDeviceStrategy

    from harness.profilers.diagnose.speed_of_light import copy_refused

    model = torch.nn.Linear(256, 256)  # 257 x 256 float32 = 263,168 bytes
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 256)).sum().backward()
    optimizer.step()  # Adam's two moments: the copy is now about 3x the parameters
    single = SingleDeviceStrategy(torch.device("cpu"))
    assert copy_refused(single, model, [optimizer], 10 * 2**20) is None
    assert "more than half" in copy_refused(single, model, [optimizer], 1_500_000)
    assert copy_refused(single, model, [], 1_500_000) is None
    assert "FSDPStrategy" in copy_refused(FSDPStrategy(), model, [], 10 * 2**30)


def test_a_short_loader_is_still_timed_and_the_model_gets_a_full_batch():
    from types import SimpleNamespace

    from harness.profilers.diagnose.speed_of_light import loader_alone

    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu"),
                                                       batch_to_device=lambda batch: batch))
    # 4 batches (the last holds 4 of 100 examples), 2 workers prefetching 4: a drain of the
    # whole buffer would leave nothing to time
    loader = torch.utils.data.DataLoader(torch.zeros(100, 4), batch_size=32, num_workers=2)
    found, batch = loader_alone(trainer, loader, 2, 0)
    assert found.steps == 2 and found.step_s is not None
    assert "rate is optimistic" in found.note
    assert batch.shape == (32, 4) and found.examples == 32
    few = torch.utils.data.DataLoader(torch.zeros(12, 4), batch_size=4)  # 3 batches, 5 wanted
    found, batch = loader_alone(trainer, few, 5, 0)
    assert found.steps == 3 and "ran out after 3 of 5 timed batches" in found.note


def test_without_the_model_pass_the_step_is_not_split():
    from harness.profilers.diagnose.findings import bound_by, phase_findings, verdict
    from harness.profilers.diagnose.preset import DiagnosePreset
    from harness.profilers.diagnose.speed_of_light import PassResult

    diagnose = DiagnosePreset()
    diagnose.passes["train"] = {
        "loader": PassResult(0.004, 3, 32),
        "model": PassResult(None, 0, None, "model-alone pass skipped: under FSDPStrategy ...")}
    figures = diagnose.phase_figures(
        "train", {"train_seconds_per_iteration": 0.1, "train_between_steps_share": 0.05}, None)
    assert figures["shares"] is None and bound_by(figures["shares"]) == "unknown"
    assert phase_findings("train", figures, {}) == []  # no 96% "host-bound" from a gap
    assert verdict("unknown", figures).startswith("no verdict: model-alone pass skipped")


def test_a_few_slow_steps_the_p90_misses_make_the_run_noisy():
    from harness.profilers.diagnose.findings import run_findings
    from harness.profilers.speed_flags import Cautions

    # 45 steps of 4.7 ms and one of 181 ms (a user's module warming up late): p90 1.3x,
    # mean 8.6 ms, 1.8x the median: the rates all carry that one step
    steps = [0.0047] * 44 + [0.181]
    mean, median = sum(steps) / len(steps), sorted(steps)[len(steps) // 2]
    # the speed preset decides (its own step records, one rule), the diagnosis words it
    cautions = Cautions(5, 10, 0.1, 0.25, 1.5)
    verdict = cautions.noise(
        {"seconds_per_iteration": mean, "median_step_s": median, "mad_step_s": 0.0})
    assert verdict["noisy"] is True
    noise = {"train": cautions.noise_said(verdict)}
    (noisy,) = run_findings({"flags": ["noisy:train"], "noise_said": noise})
    assert noisy.kind == "noisy"
    assert "the mean is 1.8x the median: a few slow steps" in noisy.message
    assert "speed_steps.csv" in noisy.next_step and "p90" not in noisy.message
    assert run_findings({"flags": [], "noise_said": noise}) == []  # not flagged: no finding


def test_a_verdict_within_the_model_pass_noise_of_another_says_so():
    from harness.profilers.diagnose.findings import verdict

    figures = {"shares": {"data": 0.01, "compute": 0.51, "communication": 0.0, "host": 0.48},
               "share_ranges": {"compute": [0.46, 0.58], "host": [0.41, 0.53],
                                "data": [0.01, 0.01], "communication": [0.0, 0.0]}}
    line = verdict("compute", figures, "train")
    assert line.endswith("; too close to call against host (41%-53% over the model pass's"
                         " steps)")
    figures["share_ranges"]["host"] = [0.30, 0.40]  # apart: the verdict stands alone
    assert "too close" not in verdict("compute", figures, "train")
