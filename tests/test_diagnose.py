"""The diagnose preset against planted truths: a slow loader, a slow step, a slow callback;
FLOPs of the built-in transformer against the analytic count; communication per rank (of a
real DDP run: tests/test_scale_out.py's, which reads its per-rank figures too)."""

from __future__ import annotations

import pytest
import torch
from conftest import run_harness

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


def test_peaks_of_pcie_hbm2e_parts_mig_slices_and_tf32_convolutions(monkeypatch):
    """#23: an H800 PCIe or an H100/H800 named by its HBM2e memory is the PCIe card, not the
    SXM; a MIG slice gets its share of the GPU; a conv net under 32-true with cuDNN's TF32
    switch on (torch's default) is divided by the TF32 peak, not the fp32 one."""
    def peak(name: str, dtype: str) -> tuple[float | None, str | None]:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
        return dense_peak_tflops(torch.device("cuda"), dtype)

    assert peak("NVIDIA H800 PCIe", "bf16")[0] == 756
    assert peak("NVIDIA H800 80GB HBM2e", "tf32")[0] == 378
    assert peak("NVIDIA H800", "bf16")[0] == 989.4  # the SXM part
    assert peak("NVIDIA H100 80GB HBM2e", "bf16")[0] == 756  # Lightning's PCIe figure
    assert peak("NVIDIA H100 80GB HBM2e", "fp64")[0] == 51.2  # ours: not the SXM's 66.9
    value, source = peak("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "bf16")
    assert value == pytest.approx(989.4 * 3 / 7) and source.endswith("x 3/7 for the MIG slice")
    assert peak("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "tf32")[0] == pytest.approx(156 / 7)
    assert matmul_dtype("32-true", "highest", convolutions=True) == "tf32"
    assert matmul_dtype("16-mixed", "highest", convolutions=True) == "fp16"


@pytest.mark.parametrize(("allow_tf32", "expected"), [(True, 378.0), (False, 51.2)])
def test_a_conv_nets_fp32_peak_follows_cudnns_tf32_switch(monkeypatch, allow_tf32, expected):
    """Planted: a conv net, 32-true, matmul precision 'highest', on an H100 PCIe (Lightning's
    table: tf32 378, fp32 51.2). With cudnn.allow_tf32 its convolutions run on TF32."""
    from types import SimpleNamespace

    from harness.profilers.diagnose.preset import DiagnosePreset

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", allow_tf32)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: SimpleNamespace(total_memory=80 * 2**30,
                                                                    major=9, minor=0))
    preset = DiagnosePreset()
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cuda", 0)),
                              world_size=1)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten())
    preset.setup(trainer, net, "fit")
    assert preset.convolutions
    assert preset._peak_tflops("32-true")[0] == expected


def _own(verdict: str) -> str:
    """The verdict without the prefix a busy machine puts first ("contended (...), so the
    shares measure the machine as much as the run: "): CI runs tests side by side."""
    return verdict.partition("as much as the run: ")[2] or verdict


def _diagnosis(tmp_path, name: str, *overrides: str) -> tuple[dict, float, bool] | None:
    """The run's diagnosis, its median training step, and whether it ran quiet: only then do its
    shares hold the planted truth (a contended run's verdict says they measure the machine as
    much as the run; beside five CPU hogs a planted 30 ms wait read 0.82 of the step, not 0.75).
    A contended or noisy run is run again (CI runs tests side by side); None when a busy machine
    made it noisy twice, after checking that the verdict then says so instead of naming a bound."""
    for attempt in range(2):
        cwd = tmp_path / f"{name}{attempt}"
        cwd.mkdir()
        done = run_harness(cwd, *PLANTED, *overrides, fast=False)
        assert done.returncode == 0, done.stderr[-3000:]
        result = done.result()
        found = result["diagnosis"]
        # on a busy machine the verdict says so first ("contended (...), so the shares ...: ")
        quiet = "contended:train" not in result["flags"]
        if not quiet:
            assert "as much as the run: " in found["verdict"], found["verdict"]
        found["verdict"] = _own(found["verdict"])
        assert "diagnosis: " in done.stdout
        if "noisy:train" not in result["flags"] or found["verdict"].startswith("bound by"):
            assert found["verdict"].startswith("bound by"), found["verdict"]
            if quiet or attempt:
                return found, result["metrics"]["train_median_step_s"], quiet  # the shares' step
    assert found["verdict"].startswith("no verdict: noisy") and found["bound_by"] == "unknown", (
        found["verdict"])
    return None


@pytest.mark.slow
def test_planted_bottlenecks_are_named(tmp_path):
    # the truth: each step waits the planted 30 ms for its batch, out of the measured step
    measured = _diagnosis(tmp_path, "data", "+data.fetch_s=0.03", "+model.step_s=0.003")
    if measured:
        data, step_s, quiet = measured
        assert data["bound_by"] == "data"
        assert data["findings"][0]["kind"] == "data-bound"
        assert "num_workers" in data["findings"][0]["next_step"]
        assert data["verdict"].startswith("bound by data loading:")
        if quiet:
            assert data["train_data_share"] == pytest.approx(0.030 / step_s, abs=0.05)

    measured = _diagnosis(tmp_path, "compute", "+model.step_s=0.03")
    if measured:
        compute, _, quiet = measured
        assert compute["bound_by"] == "compute"
        low, high = compute["train_compute_share_range"]  # over the model pass's steps
        assert low <= compute["train_compute_share"] <= high
        assert compute["train_compute_share"] > (0.8 if quiet else 0.5)

    # 4 workers at 80 ms a batch: the pipeline delivers one per 20 ms, the step needs 2 ms.
    # Its prefetch buffer empties at once; the loader pass must time the steady state.
    measured = _diagnosis(tmp_path, "workers", "+data.fetch_s=0.08", "+data.num_workers=4",
                          "+model.step_s=0.002")
    if measured:
        workers, _, quiet = measured
        assert workers["bound_by"] == "data", workers["verdict"]
        assert "num_workers" not in workers["findings"][0]["next_step"]  # it has them
        if quiet:
            assert workers["train_loader_step_s"] == pytest.approx(0.020, rel=0.35)
            assert workers["train_data_share"] > 0.7

    measured = _diagnosis(tmp_path, "host", "+profiler.slow._target_=planted.SlowCallback",
                          "+profiler.slow.callback_s=0.03")
    if measured:
        host, _, quiet = measured
        assert host["bound_by"] == "host"
        assert host["train_host_share"] > (0.8 if quiet else 0.5)
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


def test_a_fit_that_fails_says_so_instead_of_naming_the_inference_step(harness):
    """mode=train failing at its first training step: the passes (run at training's end)
    never ran, and the verdict says training failed, not that inference was not measured."""
    done = harness("mode=train", "model._target_=failing_module.FailAtBatchSize",
                   "+model.fail_at=4")
    assert done.returncode == 1
    verdict = _own(done.result()["diagnosis"]["verdict"])
    assert verdict.startswith("no verdict: training failed (RuntimeError: deliberate failure"), (
        verdict)
    assert "inference" not in verdict and verdict in done.stdout


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


def _fake_trainer():
    """What the loader pass reads of a Trainer: no precision conversion, no hooks."""
    from types import SimpleNamespace

    from lightning.pytorch.plugins.precision import Precision

    return SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device("cpu"),
                                 batch_to_device=lambda batch, dataloader_idx=0: batch),
        precision_plugin=Precision(), datamodule=None, lightning_module=None)


def test_the_loader_pass_leaves_the_rng_as_it_found_it():
    from harness.profilers.diagnose.speed_of_light import loader_alone, rng_restored

    trainer = _fake_trainer()
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
    from harness.profilers.diagnose.speed_of_light import loader_alone

    trainer = _fake_trainer()
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


# -- #23: the passes prepare and step a batch as Lightning's own loop does -------------------
def _quiet_trainer(**kwargs):
    import lightning.pytorch as pl

    return pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, **kwargs)


def _hooked_data():
    """A DataModule whose on_before_batch_transfer doubles x (planted: Lightning calls it
    before the transfer)."""
    import lightning.pytorch as pl

    class Data(pl.LightningDataModule):
        def train_dataloader(self):
            g = torch.Generator().manual_seed(0)
            data = [(torch.rand(4, 8, generator=g), torch.rand(4, 1, generator=g))
                    for _ in range(2)]
            return torch.utils.data.DataLoader(data, batch_size=None)

        def on_before_batch_transfer(self, batch, dataloader_idx):
            return (batch[0] * 2, batch[1])

    return Data()


def _linear_module(seen: list):
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Linear(8, 1)

        def on_after_batch_transfer(self, batch, dataloader_idx):
            return (batch[0] + 1, batch[1])  # planted: after the transfer

        def training_step(self, batch, batch_idx):
            seen.append(batch)
            return torch.nn.functional.mse_loss(self.net(batch[0]).float(), batch[1].float())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

    return Module()


def test_the_loader_pass_prepares_a_batch_as_lightnings_loop_does():
    """Truth: the batch Lightning's training loop hands training_step under bf16-true, with a
    DataModule's on_before_batch_transfer and the module's on_after_batch_transfer."""
    import lightning.pytorch as pl

    from harness.profilers.diagnose.speed_of_light import to_device

    seen: list = []
    ours: list = []

    class Prepare(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            raw = next(iter(trainer.train_dataloader))
            ours.append(to_device(trainer, raw))

    _quiet_trainer(precision="bf16-true", max_steps=1, callbacks=[Prepare()]).fit(
        _linear_module(seen), datamodule=_hooked_data())
    (x, y), (lx, ly) = ours[0], seen[0]
    assert x.dtype == lx.dtype == torch.bfloat16
    assert torch.equal(x, lx) and torch.equal(y, ly)


@pytest.mark.parametrize(("clip", "init_scale"), [
    pytest.param(None, 1024.0, id="plain"),
    pytest.param(1e-3, 1024.0, id="clipped"),
    pytest.param(None, 2.0**40, id="overflow"),  # fp16 grads overflow: the scaler skips
])
def test_the_model_pass_steps_as_lightning_does_with_a_grad_scaler_and_clipping(clip,
                                                                                init_scale):
    """Truth: Lightning's own first step (16-mixed with a GradScaler on CPU, gradient
    clipping by norm; with a huge initial scale the scaled fp16 gradients overflow, so the
    scaler skips the step and halves its scale). The pass's step from the same state gives
    the same parameters and scaler state; state_restored then puts everything back, so
    Lightning's step is unchanged by the pass that ran before it."""
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.precision import MixedPrecision

    from harness.profilers.diagnose.speed_of_light import (
        state_restored,
        to_device,
        training_step_fn,
    )

    found: dict = {}

    class Pass(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            batch = to_device(trainer, next(iter(trainer.train_dataloader)))
            precision = trainer.precision_plugin
            with state_restored(pl_module, trainer.optimizers, precision):
                training_step_fn(trainer, pl_module, batch)()
                found["pass"] = [p.detach().clone() for p in pl_module.parameters()]
                found["pass_scale"] = precision.scaler.get_scale()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            found["lightning"] = [p.detach().clone() for p in pl_module.parameters()]
            found["lightning_scale"] = trainer.precision_plugin.scaler.get_scale()

    # a real GradScaler on CPU (precision="16-mixed" alone becomes bf16 without one there)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    trainer = _quiet_trainer(plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)],
                             gradient_clip_val=clip, max_steps=1, callbacks=[Pass()])
    start = [p.detach().clone() for p in _linear_module([]).parameters()]
    trainer.fit(_linear_module([]), datamodule=_hooked_data())
    overflow = init_scale > 2.0**20
    for ours, theirs, before in zip(found["pass"], found["lightning"], start, strict=True):
        assert torch.equal(theirs, before) == overflow  # the step moved the weights, or skipped
        torch.testing.assert_close(ours, theirs)
    assert found["pass_scale"] == found["lightning_scale"] == (
        init_scale / 2 if overflow else init_scale)
    if clip:  # the planted clip bites: the update is at most `clip` long (SGD, lr 0.5)
        moved = torch.cat([(t - b).flatten() for t, b in zip(found["lightning"], start,
                                                                  strict=True)])
        assert moved.norm() <= 0.5 * clip * 1.001


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16-true", "16-true", "64-true"])
def test_true_precisions_get_a_verdict(harness, precision):
    """Under *-true the module's parameters are bf16/fp16/fp64 and Lightning converts each
    float batch to match (precision_plugin.convert_input) before the transfer; the passes did
    not, and the model pass failed ('mixed dtype (CPU)'): no verdict."""
    done = harness(f"precision={precision}", "mode=train", "profiler=[speed,diagnose]")
    assert done.returncode == 0, done.stderr[-3000:]
    diagnosis = done.report("diagnosis")
    # the passes ran (a busy machine may still leave "no verdict: noisy", which is honest)
    verdict = _own(diagnosis["verdict"])
    assert "failed" not in verdict, verdict
    assert verdict.startswith("bound by") or verdict.startswith("no verdict: noisy"), verdict
    assert diagnosis["train_model_step_s"] > 0 and diagnosis["train_note"] is None


# -- #23: a failed pass costs the verdict, never the run, and leaves no second state copy ----
def _adam_module():
    torch.manual_seed(0)
    module = torch.nn.Linear(8, 4)
    optimizer = torch.optim.Adam(module.parameters(), lr=0.1)
    return module, optimizer


def _adam_step(module, optimizer, x, fail_on=None):
    calls = {"n": 0}

    def step():
        calls["n"] += 1
        module(x).square().mean().backward()
        optimizer.step()  # moves weights and Adam's moments before a planted failure
        optimizer.zero_grad(set_to_none=True)
        if calls["n"] == fail_on:
            raise RuntimeError("planted failure mid-pass")

    return step


def _pass_trainer(module, optimizer):
    from types import SimpleNamespace

    from lightning.pytorch.plugins.precision import Precision

    return SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu"), model=module),
                           optimizers=[optimizer], precision_plugin=Precision())


def _held_state(module, optimizer) -> dict:
    return {(i, k): v for i, p in enumerate(module.parameters())
            for k, v in optimizer.state.get(p, {}).items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("fail_on", [None, 2])
@pytest.mark.parametrize("had_state", [True, False])
def test_the_model_pass_restores_the_optimizer_into_its_own_tensors(fail_on, had_state):
    """Truth: the weights and Adam's moments before the pass. They come back equal, in the
    very tensors the optimizer held (torch's load_state_dict would build a second copy on
    the device, then drop the first), and a state the pass created (Adam before its first
    step: when=start) is dropped. A step that fails mid-pass is the pass's note."""
    from harness.profilers.diagnose.speed_of_light import model_alone

    module, optimizer = _adam_module()
    x = torch.randn(16, 8)
    if had_state:
        _adam_step(module, optimizer, x)()
    weights = [p.detach().clone() for p in module.parameters()]
    held = _held_state(module, optimizer)
    values = {key: t.clone() for key, t in held.items()}
    found = model_alone(_pass_trainer(module, optimizer), module,
                        _adam_step(module, optimizer, x, fail_on), x, 3, 0, training=True)
    if fail_on:
        assert found.step_s is None and "planted failure mid-pass" in found.note
    else:
        assert found.steps == 3
    for before, now in zip(weights, module.parameters(), strict=True):
        assert torch.equal(before, now)
    now_held = _held_state(module, optimizer)
    assert now_held.keys() == held.keys()  # none left behind when there was none
    for key, tensor in now_held.items():
        assert tensor is held[key]  # in place: no second copy
        assert torch.equal(tensor, values[key])


def test_the_model_pass_puts_back_what_a_step_keeps_on_its_modules():
    """Truth: the attributes before the pass. A step that appends its loss to a list, counts in a
    metric's tensor in place (torchmetrics' way), keeps its last output and sets a new attribute
    leaves none of it, nor does one counting in a non-persistent buffer, drawing from a Generator
    it keeps or calling its logger itself: the run's first real step finds them as they were."""
    from types import SimpleNamespace

    from harness.profilers.diagnose.speed_of_light import model_alone

    module, optimizer = _adam_module()
    module.outputs, module.last, module.seen = [], None, torch.zeros(())
    module.register_buffer("examples", torch.zeros(()), persistent=False)  # in no state_dict
    module.noise = torch.Generator().manual_seed(0)
    counts, logged = module.seen, []
    module.loggers = [SimpleNamespace(log_metrics=lambda *args, **kwargs: logged.append(args))]
    x = torch.randn(16, 8)
    adam_step = _adam_step(module, optimizer, x)

    def step() -> None:
        adam_step()
        module.outputs.append(torch.ones(()))
        module.seen += x.shape[0]
        module.examples += x.shape[0]
        module.last, module.extra = torch.rand((), generator=module.noise), 1
        module.loggers[0].log_metrics({"loss": 1.0})  # a direct call, past self.log

    assert model_alone(_pass_trainer(module, optimizer), module, step, x, 2, 0, training=True).steps == 2
    assert module.outputs == [] and module.last is None and not hasattr(module, "extra")
    assert module.seen is counts and counts.item() == 0 and module.examples.item() == 0
    assert torch.equal(module.noise.get_state(), torch.Generator().manual_seed(0).get_state())
    assert logged == []


def test_a_pass_that_raises_anywhere_is_the_diagnosis_note_not_the_runs_error():
    """Planted: the loader pass's first batch fails to reach the device (a fake strategy
    whose transfer raises, as an OOM would). The preset's hook returns; both passes carry
    the failure, which the notes say, and the verdict has no shares to stand on."""
    from types import SimpleNamespace

    from lightning.pytorch.plugins.precision import Precision

    from harness.profilers.diagnose.preset import DiagnosePreset

    def transfer(batch, dataloader_idx=0):
        raise torch.OutOfMemoryError("CUDA out of memory (planted)")

    trainer = SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device("cpu"), batch_to_device=transfer),
        precision_plugin=Precision(), datamodule=None, lightning_module=None,
        train_dataloader=torch.utils.data.DataLoader(torch.zeros(8, 2), batch_size=2))
    preset = DiagnosePreset(when="end")
    preset.on_train_end(trainer, None)  # no exception leaves the hook
    why = "the train passes failed: OutOfMemoryError: CUDA out of memory (planted)"
    assert preset.passes["train"]["loader"].note == why
    assert preset.passes["train"]["model"].note == why
    assert preset.notes[-1] == why + "; the run's own figures stand"
    figures = preset.phase_figures("train", {"train_median_step_s": 0.01}, None)
    assert figures["shares"] is None and why in figures["note"]


def test_a_failed_loader_pass_costs_the_verdict_not_the_run(tmp_path):
    """Planted: the training loader raises when iterated a second time, which only the
    diagnose preset's loader pass does. The run is ok; the diagnosis says why it has none."""
    done = run_harness(tmp_path, *PLANTED, "data._target_=planted.PassBreakingData",
                       fast=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "ok" and result["metrics"]["train_examples_per_second"] > 0
    diagnosis = done.report("diagnosis")
    assert _own(diagnosis["verdict"]).startswith("no verdict"), diagnosis["verdict"]
    assert "the train passes failed: RuntimeError: planted" in diagnosis["train_note"]


@pytest.mark.slow
def test_a_pass_that_fails_on_one_rank_hangs_no_rank_and_costs_no_run(tmp_path):
    """Planted: rank 1's diagnose loader pass raises (its loader fails when iterated again).
    Rank 1 must still reach the collectives of on_train_end (the speed and diagnose presets'
    all_gather_object) that rank 0 waits in: the run ends ok, well within the group's
    timeout. Before #23 rank 1's exception left on_train_end and the run failed (gloo) or
    hung (NCCL)."""
    done = run_harness(tmp_path, *PLANTED, "data._target_=planted.PassBreakingData",
                       "+data.break_rank=1", "trainer.strategy=ddp", "trainer.devices=2",
                       "trainer.accelerator=cpu", fast=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "ok" and result["device"]["world_size"] == 2
    assert result["duration_s"] < 300
    assert done.report("speed")["phases"]["train"]["ranks_measured"] == 2
