"""compile=true on a user's module (issue 34, item 6): `model.net` where the module has one,
else the LightningModule itself as Lightning compiles one; `compile_module=<name>` that
attribute, a wrong name one line naming the key; and a whole run compiled on a module without
`net` (tests/user_module_workload.py)."""

from __future__ import annotations

import pytest
import torch
from user_module_workload import USER, NoNetModule

from harness.errors import HarnessError
from harness.run.compile import compile_network
from harness.workload.model import TransformerModule


def test_a_module_without_net_gets_its_forward_compiled():
    module = NoNetModule(blocks=False)
    said = compile_network(module, "net", "default")
    assert said is not None and said.startswith(
        "compile: NoNetModule has no nn.Module attribute 'net': compiled the LightningModule's"
        " forward (each self(...) of its steps)")
    assert "forward" in vars(module) and "training_step" not in vars(module)  # self.log stays out
    assert type(module.layers).__name__ == "Sequential"
    x = torch.randn(4, 8)
    assert torch.allclose(module(x), NoNetModule.forward(module, x))


def test_net_and_a_named_attribute_are_compiled_alone():
    module = TransformerModule(dim=16, depth=1, num_heads=2)
    assert compile_network(module, "net", "default") is None
    assert type(module.net).__name__ == "OptimizedModule" and "forward" not in vars(module)
    module = NoNetModule(blocks=False)
    assert compile_network(module, "layers", "default") is None
    assert type(module.layers).__name__ == "OptimizedModule" and "forward" not in vars(module)


def test_a_wrong_compile_module_is_one_line_naming_the_key():
    with pytest.raises(HarnessError) as caught:
        compile_network(NoNetModule(), "layerz", "default")
    line = str(caught.value)
    assert "no nn.Module attribute 'layerz'" in line and "compile_module=" in line
    assert "\n" not in line


@pytest.mark.slow
def test_a_run_on_a_module_without_net_is_compiled(harness):
    """Linear layers under `layers`, no `net`: the run compiles its forward and says so once;
    activation_checkpointing=true finds no block there: one warning line, and the run goes on."""
    shortened = [o for o in USER if not o.startswith("profiler=")]
    done = harness(*shortened, "profiler=[speed,summary]", "+model.blocks=false", "compile=true",
                   "activation_checkpointing=true")  # summary: its hooks see the uncompiled forward
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "ok", result["reason"]
    assert result["observed"]["compiled_graphs"] > 0
    assert result["observed"]["checkpointed"] is None
    said = [line for line in done.stderr.splitlines() if "compiled the LightningModule's" in line]
    assert len(said) == 1 and said[0].startswith("harness: compile: NoNetModule has no")
    assert said[0].removeprefix("harness: ") in result["observed"]["notes"]
    warned = [line for line in done.stderr.splitlines() if "has no repeated block" in line]
    assert len(warned) == 1 and warned[0].startswith("harness: warning: activation_checkpointing=true")
