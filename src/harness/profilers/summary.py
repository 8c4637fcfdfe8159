"""The `summary` preset: torchinfo's table of layers and parameters at the first batch, in the
run's precision context, with FlopCounterMode's count (docs/presets/summary.md)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torchinfo
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from harness import private_api
from harness.config.checks import NonNegativeInt, one_or_more
from harness.errors import first_line
from harness.profilers.flops import which_to_trust
from harness.profilers.preset import Preset, Report, ReportError
from harness.reports.files import write_json, write_text

DOC = "docs/presets/summary.md#output"
COLUMNS = ("input_size", "output_size", "num_params", "params_percent", "kernel_size", "mult_adds",
           "trainable")
Columns = one_or_more(COLUMNS, least=0)


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


# What the summary feeds `forward`: `example_input_array`, else the run's batch taken apart the
# ways users write `forward`, most likely first (docs/presets/summary.md, "What `forward` gets").
@dataclass
class ForwardInput:
    """One way to call forward: `label` says which part of the batch it is."""

    label: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)  # of the args (forward's parameter names)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Name -> each tensor input (a collection's tensors named by their place in it)."""
        names = self.names or ([self.label] if len(self.args) == 1 else [])
        named = {names[i] if i < len(names) else f"arg{i}": value
                 for i, value in enumerate(self.args)} | self.kwargs
        found: dict[str, torch.Tensor] = {}

        def visit(name: str, value: Any) -> None:
            if isinstance(value, torch.Tensor):
                found[name] = value
            elif isinstance(value, Mapping):
                for key, item in value.items():
                    visit(f"{name}[{key!r}]", item)
            elif isinstance(value, (list, tuple)):
                for index, item in enumerate(value):
                    visit(f"{name}[{index}]", item)

        for name, value in named.items():
            visit(name, value)
        return found


def _parameters(module: torch.nn.Module) -> list[inspect.Parameter]:
    """forward's named parameters (no *args / **kwargs); [] when it has no signature."""
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
             inspect.Parameter.KEYWORD_ONLY)
    return [p for p in signature.parameters.values() if p.kind in kinds]


def _takes_a_tensor(parameter: inspect.Parameter) -> bool:
    annotation = parameter.annotation
    if isinstance(annotation, str):  # `from __future__ import annotations`
        return annotation.split(".")[-1] == "Tensor"
    return annotation is torch.Tensor


def forward_inputs(module: Any, batch: Any) -> list[ForwardInput]:
    parameters, example = _parameters(module), module.example_input_array
    if isinstance(example, tuple):
        return [ForwardInput("example_input_array", args=list(example), names=[p.name for p in parameters])]
    if isinstance(example, Mapping):
        return [ForwardInput("example_input_array", kwargs=dict(example))]
    if example is not None:
        return [ForwardInput("example_input_array", args=[example])]
    required = [p for p in parameters if p.default is inspect.Parameter.empty
                and p.kind is not inspect.Parameter.KEYWORD_ONLY]
    tried: list[ForwardInput] = []
    if isinstance(batch, Mapping):
        names = [p.name for p in parameters if p.name in batch]
        if names and all(p.name in batch for p in required):
            tried.append(ForwardInput(f"batch[{', '.join(map(repr, names))}] as keywords",
                                      kwargs={name: batch[name] for name in names}))
        tried.append(ForwardInput("batch", args=[batch]))
        first = next(((k, v) for k, v in batch.items() if isinstance(v, torch.Tensor)), None)
        if first is not None:
            tried.append(ForwardInput(f"batch[{first[0]!r}]", args=[first[1]]))
    elif isinstance(batch, (list, tuple)) and batch:
        n = len(required)
        if 1 < n <= len(batch):
            names = [p.name for p in required]
            tried.append(ForwardInput(f"batch[:{n}] as {', '.join(names)}", args=list(batch[:n]),
                                      names=names))
        first = ForwardInput("batch[0]", args=[batch[0]])
        tensor_first = (bool(required) and _takes_a_tensor(required[0])
                        and isinstance(batch[0], torch.Tensor))
        tried += [first, ForwardInput("batch", args=[batch])] if tensor_first else [
            ForwardInput("batch", args=[batch]), first]
    else:
        tried.append(ForwardInput("batch", args=[batch]))
    return tried


class SummaryPreset(Preset, Callback):
    """Writes reports/summary.txt and summary.json; totals go to result.json."""

    def __init__(self, depth: NonNegativeInt = 4, columns: Columns = COLUMNS[:4] + ("mult_adds",)) -> None:
        self.depth = depth
        self.columns = (columns,) if isinstance(columns, str) else tuple(columns)
        self.done = False
        self.text: str | None = None
        self.totals: dict[str, Any] = {}
        self.context: dict[str, Any] = {}
        self.error: str | None = None
        self.trust: str | None = None  # which of mult-adds and FLOPs to trust, in one line

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             *_: Any) -> None:
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

    on_predict_batch_start = on_train_batch_start

    def _take(self, trainer: pl.Trainer, pl_module: pl.LightningModule, candidate: ForwardInput) -> None:
        device = pl_module.device
        taken: list[Any] = []

        def summarise() -> None:
            taken.append(torchinfo.summary(  # input_data: a list is forward's args, a dict its keywords
                pl_module, input_data=candidate.kwargs or candidate.args, depth=self.depth,
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
            "device": str(device), "precision": trainer.precision,
            "autocast_dtype": str(dtype).removeprefix("torch.") if dtype else None,
            "parameter_dtypes": sorted({_dtype(p) for p in pl_module.parameters()}),
            "input": candidate.label, "input_shape": list(first.shape) if first is not None else None,
            "input_dtype": _dtype(first) if first is not None else None,
            "inputs": {name: {"shape": list(t.shape), "dtype": _dtype(t)} for name, t in tensors.items()},
        }
        self.text = str(stats)
        self.totals = {
            "total_params": int(stats.total_params), "trainable_params": int(stats.trainable_params),
            "non_trainable_params": int(stats.total_params - stats.trainable_params),
            "total_mult_adds": int(stats.total_mult_adds), "forward_flops": flops,
            "param_bytes": int(stats.total_param_bytes),
            "forward_backward_pass_bytes": int(stats.total_output_bytes),
            "input_bytes": int(stats.total_input),
        }
        self.trust = which_to_trust(self.totals["total_mult_adds"], flops)

    @override
    def write_reports(self, reports_dir: Path) -> Report:
        header = [
            "Model summary (torchinfo): layers, output shapes and parameters of the LightningModule, from one"
            " forward pass on the run's first batch.", f"Context: {self.context}",
            "Expected overhead: one extra forward pass (no_grad) at the first step, inside the speed report's"
            " warm-up.",
        ]
        if self.trust:
            header.append(f"Forward FLOPs (FlopCounterMode): {self.totals['forward_flops']:,}; {self.trust}.")
        error = self.error or (None if self.text else "the run processed no batch")
        body = self.text or f"no summary: {error}"
        write_text(reports_dir / "summary.txt", "\n".join(header) + "\n\n" + body + "\n")
        write_json(reports_dir / "summary.json", {"report": "summary", "doc": DOC, **self.context,
                                                  "error": error, "totals": self.totals,
                                                  "which_to_trust": self.trust})
        if error:  # files written, so the reason is on disk too; the run records and says it
            raise ReportError(f"no model summary: {error}")
        t = self.totals
        return Report({f"summary_{key}": value for key, value in t.items()}, tables=[
            f"model summary: {t['total_params']:,} parameters ({t['trainable_params']:,} trainable),"
            f" {t['total_mult_adds']:,} mult-adds (torchinfo) and {t['forward_flops']:,} FLOPs"
            f" (FlopCounterMode) per forward; precision {self.context['precision']} -> reports/summary.txt",
            f"model summary: {self.trust}",
        ])
