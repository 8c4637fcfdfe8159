"""The `summary` preset: torchinfo's table of layers and parameters at the first batch, in the
run's precision context, with FlopCounterMode's count (docs/presets/summary.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torchinfo
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from harness import private_api
from harness.config.checks import list_of, non_negative_int
from harness.errors import first_line
from harness.profilers.flops import which_to_trust
from harness.profilers.preset import Preset, Report, ReportError
from harness.profilers.summary_inputs import ForwardInput, forward_inputs
from harness.reports.files import write_json, write_text

DOC = "docs/presets/summary.md#output"
COLUMNS = ("input_size", "output_size", "num_params", "params_percent", "kernel_size", "mult_adds",
           "trainable")


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


class SummaryPreset(Preset, Callback):
    """Writes reports/summary.txt and summary.json; totals go to result.json."""

    def __init__(self, depth: int = 4,
                 columns: list[str] | tuple[str, ...] = COLUMNS[:4] + ("mult_adds",)) -> None:
        self.depth = non_negative_int("profiler.summary.depth", depth, 4)
        self.columns = tuple(list_of("profiler.summary.columns", columns, COLUMNS,
                                     "[input_size,output_size,num_params]", allow_empty=True))
        self.done = False
        self.text: str | None = None
        self.totals: dict[str, Any] = {}
        self.context: dict[str, Any] = {}
        self.error: str | None = None
        self.trust: str | None = None  # which of mult-adds and FLOPs to trust, in one line

    def _summarise(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any) -> None:
        if self.done:
            return
        self.done = True
        failed = []
        for candidate in forward_inputs(pl_module, batch):
            try:
                self._take(trainer, pl_module, candidate)
            except Exception as err:  # a summary must not kill the run it describes
                # the cause under torchinfo's "Failed to run torchinfo" wrapper: what the user fixes
                failed.append(f"{candidate.label}: {first_line(err.__cause__ or err)[:300]}")
                continue
            self.context["inputs_that_failed"] = failed
            return
        declared = pl_module.example_input_array is not None
        self.error = (
            f"forward failed on {'example_input_array' if declared else 'every input tried'}"
            f" ({'; '.join(failed)}). Fix: {'correct' if declared else 'set'}"
            f" {type(pl_module).__name__}.example_input_array to forward's input: a tensor,"
            " a tuple of its positional inputs or a dict of its keyword inputs")

    def _take(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
              candidate: ForwardInput) -> None:
        device = pl_module.device
        taken: list[Any] = []

        def summarise() -> None:
            taken.append(torchinfo.summary(
                pl_module, input_data=candidate.torchinfo_data, depth=self.depth,
                col_names=self.columns, device=device,
                mode="train" if pl_module.training else "eval", verbose=0))

        with private_api.uncompiled(pl_module), trainer.precision_plugin.forward_context():
            autocast = torch.is_autocast_enabled(device.type)
            dtype = torch.get_autocast_dtype(device.type) if autocast else None
            flops = int(measure_flops(pl_module, summarise))
        stats = taken[0]
        tensors = candidate.tensors()
        first = next(iter(tensors.values()), None)
        self.context = {
            "device": str(device),
            "precision": trainer.precision,
            "autocast_dtype": str(dtype).removeprefix("torch.") if dtype else None,
            "parameter_dtypes": sorted({_dtype(p) for p in pl_module.parameters()}),
            "input": candidate.label,
            "input_shape": list(first.shape) if first is not None else None,
            "input_dtype": _dtype(first) if first is not None else None,
            "inputs": {name: {"shape": list(t.shape), "dtype": _dtype(t)}
                       for name, t in tensors.items()},
        }
        self.text = str(stats)
        self.totals = {
            "total_params": int(stats.total_params),
            "trainable_params": int(stats.trainable_params),
            "non_trainable_params": int(stats.total_params - stats.trainable_params),
            "total_mult_adds": int(stats.total_mult_adds),
            "forward_flops": flops,
            "param_bytes": int(stats.total_param_bytes),
            "forward_backward_pass_bytes": int(stats.total_output_bytes),
            "input_bytes": int(stats.total_input),
        }
        self.trust = which_to_trust(self.totals["total_mult_adds"], flops)

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             *_: Any) -> None:
        self._summarise(trainer, pl_module, batch)

    @override
    def on_predict_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                               batch: Any, *_: Any) -> None:
        self._summarise(trainer, pl_module, batch)

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        header = [
            "Model summary (torchinfo): layers, output shapes and parameters of the"
            " LightningModule, from one forward pass on the run's first batch.",
            f"Context: {self.context}",
            "Expected overhead: one extra forward pass (no_grad) at the first step, inside the"
            " speed report's warm-up.",
        ]
        if self.trust:
            header.append(f"Forward FLOPs (FlopCounterMode): {self.totals['forward_flops']:,};"
                          f" {self.trust}.")
        error = self.error or (None if self.text else "the run processed no batch")
        body = self.text or f"no summary: {error}"
        write_text(reports_dir / "summary.txt", "\n".join(header) + "\n\n" + body + "\n")
        write_json(reports_dir / "summary.json", {
            "report": "summary",
            "doc": DOC,
            **self.context,
            "error": error,
            "totals": self.totals,
            "which_to_trust": self.trust,
        })
        if error:  # files written, so the reason is on disk too; the run records and says it
            raise ReportError(f"no model summary: {error}")
        t = self.totals
        return Report({f"summary_{key}": value for key, value in t.items()}, tables=[
            f"model summary: {t['total_params']:,} parameters ({t['trainable_params']:,}"
            f" trainable), {t['total_mult_adds']:,} mult-adds (torchinfo) and"
            f" {t['forward_flops']:,} FLOPs (FlopCounterMode) per forward; precision"
            f" {self.context['precision']} -> reports/summary.txt",
            f"model summary: {self.trust}",
        ])
