"""The `summary` preset: torchinfo's table of layers and parameters, in the run's real precision.

It is taken at the first batch the run sees, with that batch, on the run's
device, inside Lightning's precision context (autocast at the run's dtype), so
shapes, dtypes and sizes are those of the real run. torchinfo cannot hook into
compiled modules, so any torch.compile'd child is swapped back to its original
module for the summary and restored afterwards (harness.private_api.uncompiled). The forward pass
it needs runs under no_grad and is left out of the speed report's figures
(it falls in the first, warm-up, step).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from harness import private_api
from harness.config.checks import list_of, non_negative_int
from harness.reports.files import write_json, write_text

COLUMNS = (
    "input_size",
    "output_size",
    "num_params",
    "params_percent",
    "kernel_size",
    "mult_adds",
    "trainable",
)


def example_input(pl_module: pl.LightningModule, batch: Any) -> Any:
    """The module's forward input: example_input_array if set, else the batch's first tensor."""
    if pl_module.example_input_array is not None:
        return pl_module.example_input_array
    if isinstance(batch, (list, tuple)) and batch:
        return batch[0]
    return batch


class SummaryPreset(Callback):
    """Writes reports/summary.txt and summary.json; totals go to result.json."""

    def __init__(
        self, depth: int = 4, columns: list[str] | tuple[str, ...] = COLUMNS[:4] + ("mult_adds",)
    ) -> None:
        non_negative_int("profiler.summary.depth", depth, 4)
        columns = list_of("profiler.summary.columns", columns, COLUMNS,
                          "[input_size,output_size,num_params]", allow_empty=True)
        self.depth = depth
        self.columns = tuple(columns)
        self.done = False
        self.text: str | None = None
        self.totals: dict[str, Any] = {}
        self.context: dict[str, Any] = {}
        self.error: str | None = None

    def _summarise(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any) -> None:
        if self.done:
            return
        self.done = True
        import torchinfo

        device = pl_module.device
        data = example_input(pl_module, batch)
        data = data.to(device) if isinstance(data, torch.Tensor) else data
        try:
            with private_api.uncompiled(pl_module), trainer.precision_plugin.forward_context():
                autocast = torch.is_autocast_enabled(device.type)
                dtype = torch.get_autocast_dtype(device.type) if autocast else None
                stats = torchinfo.summary(
                    pl_module,
                    input_data=[data],
                    depth=self.depth,
                    col_names=self.columns,
                    device=device,
                    mode="train" if pl_module.training else "eval",
                    verbose=0,
                )
        except Exception as err:  # a summary must not kill the run it describes
            self.error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            return
        param_dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in pl_module.parameters()})
        self.context = {
            "device": str(device),
            "precision": trainer.precision,
            "autocast_dtype": str(dtype).removeprefix("torch.") if dtype else None,
            "parameter_dtypes": param_dtypes,
            "input_shape": list(data.shape) if isinstance(data, torch.Tensor) else None,
            "input_dtype": str(data.dtype).removeprefix("torch.")
            if isinstance(data, torch.Tensor)
            else None,
        }
        self.text = str(stats)
        self.totals = {
            "total_params": int(stats.total_params),
            "trainable_params": int(stats.trainable_params),
            "non_trainable_params": int(stats.total_params - stats.trainable_params),
            "total_mult_adds": int(stats.total_mult_adds),
            "param_bytes": int(stats.total_param_bytes),
            "forward_backward_pass_bytes": int(stats.total_output_bytes),
            "input_bytes": int(stats.total_input),
        }

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._summarise(trainer, pl_module, batch)

    @override
    def on_predict_batch_start(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._summarise(trainer, pl_module, batch)

    def write_reports(self, reports_dir: Path) -> dict[str, Any]:
        header = [
            "Model summary (torchinfo): layers, output shapes and parameters of the"
            " LightningModule,"
            " from one forward pass on the run's first batch.",
            f"Context: {self.context}",
            "Expected overhead: one extra forward pass (no_grad) at the first step, inside the"
            " speed report's warm-up.",
        ]
        body = self.text or f"no summary: {self.error or 'the run processed no batch'}"
        write_text(reports_dir / "summary.txt", "\n".join(header) + "\n\n" + body + "\n")
        write_json(
            reports_dir / "summary.json",
            {
                "report": "summary",
                "what": header[0],
                "expected_overhead": header[2],
                **self.context,
                "error": self.error,
                "totals": self.totals,
                "units": "counts; bytes (param_bytes at the parameters' dtype, pass sizes at the"
                " output dtype seen in the forward pass)",
            },
        )
        return {f"summary_{key}": value for key, value in self.totals.items()}

    def console_tables(self) -> list[Any]:
        if not self.totals:
            return [f"model summary: not taken ({self.error or 'no batch'})"]
        t = self.totals
        return [
            f"model summary: {t['total_params']:,} parameters ({t['trainable_params']:,}"
            f" trainable), {t['total_mult_adds']:,} mult-adds per forward;"
            f" precision {self.context['precision']} -> reports/summary.txt"
        ]
