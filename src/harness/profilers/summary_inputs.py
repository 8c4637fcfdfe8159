"""What the summary feeds `forward`: `example_input_array`, else the run's batch taken apart the
ways users write `forward`, most likely first (docs/presets/summary.md, "What `forward` gets")."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class ForwardInput:
    """One way to call forward: `label` says which part of the batch it is."""

    label: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)  # of the args (forward's parameter names)

    @property
    def torchinfo_data(self) -> list[Any] | dict[str, Any]:
        """torchinfo's `input_data`: a list is forward's positional inputs, a dict its keywords."""
        return self.kwargs if self.kwargs else self.args

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


def _declared(example: Any, names: list[str]) -> ForwardInput:
    if isinstance(example, tuple):
        return ForwardInput("example_input_array", args=list(example), names=names)
    if isinstance(example, Mapping):
        return ForwardInput("example_input_array", kwargs=dict(example))
    return ForwardInput("example_input_array", args=[example])


def forward_inputs(module: Any, batch: Any) -> list[ForwardInput]:
    parameters = _parameters(module)
    if module.example_input_array is not None:
        return [_declared(module.example_input_array, [p.name for p in parameters])]
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
