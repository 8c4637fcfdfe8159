"""profiler=summary on real models: which part of the batch reaches forward (two inputs, dict
and list batches, example_input_array), FlopCounterMode's FLOPs beside torchinfo's mult-adds,
and a failure that is said, not swallowed. In-process: a Trainer with the preset, one step."""

from __future__ import annotations

import json
import logging

import lightning.pytorch as pl
import pytest
import torch
from omegaconf import OmegaConf, open_dict
from test_config_compose import composed
from torch import nn
from torch.utils.data import DataLoader

from harness.profilers.preset import ReportError
from harness.profilers.summary import SummaryPreset, forward_inputs
from harness.run.job import run_job


class _Steps(pl.LightningModule):
    """A training step that feeds the layer itself, whatever forward wants."""

    def __init__(self, features: int = 8, out: int = 16) -> None:
        super().__init__()
        self.layer = nn.Linear(features, out)

    def training_step(self, batch, batch_idx):
        tensor = next(t for t in (batch.values() if isinstance(batch, dict) else batch)
                      if t.is_floating_point())
        return self.layer(tensor).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class TwoInputs(_Steps):
    def forward(self, x, scale):
        return self.layer(x) * scale


class DictInput(_Steps):
    def forward(self, image):
        return self.layer(image)


class TensorForward(_Steps):
    """MNIST's pattern: `forward(x: Tensor)` on `(x, y)` batches."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class PlainForward(_Steps):
    """The same, without the annotation: the whole batch is tried first, and fails."""

    def forward(self, x):
        return self.layer(x)


class Attention(_Steps):
    """q @ k^T and attn @ v written in forward: no layer torchinfo counts."""

    def __init__(self) -> None:
        super().__init__(8, 24)

    def forward(self, x):
        q, k, v = self.layer(x).split(8, dim=-1)
        return (q @ k.transpose(-2, -1)).softmax(-1) @ v


def _summary(module: pl.LightningModule, batch, tmp_path, **options) -> SummaryPreset:
    preset = SummaryPreset(**options)
    trainer = pl.Trainer(max_steps=1, accelerator="cpu", logger=False, callbacks=[preset],
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(module, train_dataloaders=DataLoader([batch], batch_size=None))
    return preset


def _written(preset: SummaryPreset, tmp_path) -> dict:
    metrics = preset.write_reports(tmp_path).metrics
    report = json.loads((tmp_path / "summary.json").read_text())
    assert report["error"] is None
    assert metrics["summary_total_params"] == report["totals"]["total_params"]
    return report


def test_a_forward_with_two_inputs_gets_the_batchs_first_two(tmp_path):
    batch = (torch.randn(4, 8), torch.full((4, 1), 2.0), torch.zeros(4))
    report = _written(_summary(TwoInputs(), batch, tmp_path), tmp_path)
    assert report["input"] == "batch[:2] as x, scale"
    assert report["inputs"] == {"x": {"shape": [4, 8], "dtype": "float32"},
                                "scale": {"shape": [4, 1], "dtype": "float32"}}
    assert report["totals"]["total_params"] == 8 * 16 + 16


def test_a_dict_batch_goes_in_by_forwards_parameter_names(tmp_path):
    batch = {"image": torch.randn(3, 8), "label": torch.zeros(3)}
    report = _written(_summary(DictInput(), batch, tmp_path), tmp_path)
    assert report["input"] == "batch['image'] as keywords"
    assert report["input_shape"] == [3, 8] and report["inputs_that_failed"] == []


def test_a_list_batch_gives_a_tensor_forward_its_first_item(tmp_path):
    batch = [torch.randn(5, 8), torch.zeros(5, dtype=torch.long)]
    report = _written(_summary(TensorForward(), batch, tmp_path), tmp_path)
    assert report["input"] == "batch[0]" and report["inputs_that_failed"] == []
    # Unannotated, Lightning's convention (the whole batch) is tried first; its error is kept.
    plain = _written(_summary(PlainForward(), batch, tmp_path), tmp_path)
    assert plain["input"] == "batch[0]"
    assert plain["inputs_that_failed"] == [
        "batch: TypeError: linear(): argument 'input' (position 1) must be Tensor, not list"]


def test_example_input_array_is_used_instead_of_the_batch(tmp_path):
    module = TwoInputs()
    module.example_input_array = (torch.randn(2, 8), torch.ones(2, 1))
    report = _written(_summary(module, (torch.randn(6, 8), torch.ones(6, 1)), tmp_path), tmp_path)
    assert report["input"] == "example_input_array" and report["input_shape"] == [2, 8]


def test_flops_beside_mult_adds_say_which_to_trust(tmp_path):
    # Attention on [2, 10, 8]: the qkv Linear 2*2*10*8*24 = 7680 FLOPs, q @ k^T and
    # attn @ v 2*2*10*10*8 = 3200 each. torchinfo: 216 parameters x batch 2 = 432 mult-adds.
    report = _written(_summary(Attention(), torch.randn(2, 10, 8), tmp_path), tmp_path)
    assert report["totals"]["forward_flops"] == 7680 + 2 * 3200
    assert report["totals"]["total_mult_adds"] == (8 * 24 + 24) * 2
    assert report["which_to_trust"].startswith("trust forward_flops, 16.3x torchinfo's")
    text = (tmp_path / "summary.txt").read_text()
    assert "Forward FLOPs (FlopCounterMode): 14,080; trust forward_flops" in text
    # A Linear on [4, 8]: 2*4*8*16 = 1024 FLOPs, torchinfo (128 + 16) x 4 = 576 mult-adds.
    mlp = _written(_summary(TensorForward(), [torch.randn(4, 8)], tmp_path), tmp_path)
    assert mlp["totals"]["forward_flops"] == 1024
    assert mlp["which_to_trust"].startswith("forward_flops = 0.89 x 2 x torchinfo's mult-adds:"
                                            " the two agree")


def test_a_summary_that_cannot_run_forward_says_why(tmp_path):
    class Broken(_Steps):
        def forward(self, x):
            raise ValueError("forward wants a mask")

    preset = _summary(Broken(), (torch.randn(2, 8),), tmp_path)
    with pytest.raises(ReportError) as raised:
        preset.write_reports(tmp_path)
    message = str(raised.value)
    assert message.startswith("no model summary: forward failed on every input tried (batch:")
    assert "batch[0]: ValueError: forward wants a mask" in message
    assert "See above" not in message and "\n" not in message
    assert "Fix: set Broken.example_input_array to forward's input" in message
    assert json.loads((tmp_path / "summary.json").read_text())["error"] in message


def test_the_runs_report_errors_and_one_warning_line_carry_it(tmp_path, caplog):
    cfg = composed("data=none", "logger=none", "trainer.enable_progress_bar=false",
                   "profiler=[summary]", "mode=train", "batch_size=4", tmp_path=tmp_path)
    with open_dict(cfg):
        cfg.model = OmegaConf.create({"_target_": "own_loaders.NeedsAMask"})
    with caplog.at_level(logging.WARNING, logger="harness"):
        result = run_job(cfg, tmp_path, [])
    assert result.status == "ok"  # the run it describes is not stopped
    expected = ("no model summary: forward failed on every input tried (batch: TypeError:"
                " NeedsAMask.forward() missing 1 required positional argument: 'mask').")
    assert result.report_errors["summary"].startswith(expected)
    written = json.loads((tmp_path / "result.json").read_text())
    assert written["report_errors"] == result.report_errors
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"summary report: {result.report_errors['summary']}"]


def test_inputs_tried_for_a_dict_whose_keys_are_not_forwards_parameters():
    batch = {"pixels": torch.ones(2, 3), "label": torch.zeros(2)}
    labels = [c.label for c in forward_inputs(DictInput(), batch)]
    assert labels == ["batch", "batch['pixels']"]
