"""activation_checkpointing (issue 27, item 2; issue 34, item 4): which blocks it finds on planted
models (a user's blocks that hold parameters alone, Lightning's demo Transformer), what it wraps,
that the wrapped model computes the same and recomputes, and whole runs."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from user_module_workload import FORWARDS_FILE, USER, NoNetModule, ParamBlock

from harness.errors import ConfigError
from harness.run.checkpointing import checkpoint_blocks, repeated_blocks
from harness.workload.model import TransformerModule

WRAPPER = "CheckpointWrapper"


class Block(nn.Module):
    """A block of three Linear layers and a Dropout: Linear is the model's most common class."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.drop = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.c(self.drop(torch.relu(self.b(torch.relu(self.a(x))))))


class Stack(nn.Module):
    """Embedding-like head, a ModuleList of 3 Blocks, an output head."""

    def __init__(self, dim: int = 8, depth: int = 3) -> None:
        super().__init__()
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.Linear(dim, dim))  # one class, leaves
        self.layers = nn.ModuleList(Block(dim) for _ in range(depth))
        self.out = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(x)
        for layer in self.layers:
            x = layer(x)
        return self.out(x)


class Layer(Block):
    """The class a Hugging Face-style model names in _no_split_modules."""


class Stage(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.first, self.second = Layer(dim), Layer(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


class PreTrained(nn.Module):
    """A stand-in for a transformers PreTrainedModel: its stages' container would make Stage the
    block, but the model names Layer (as GPT2 names GPT2Block)."""

    _no_split_modules = ["Layer", "NotInThisModel"]

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.stages = nn.ModuleList([Stage(dim), Stage(dim)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stage in self.stages:
            x = stage(x)
        return x


class UserModule(nn.Module):
    """A user's module holding the pretrained model (the LightningModule's place)."""

    def __init__(self) -> None:
        super().__init__()
        self.model = PreTrained()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


def wrapped_classes(root: nn.Module) -> list[str]:
    """The class of each module inside a checkpoint wrapper, in order."""
    return [type(m._checkpoint_wrapped_module).__name__ for m in root.modules()
            if type(m).__name__ == WRAPPER]


def test_true_finds_the_module_list_block_class_not_the_most_common_class(capsys):
    model = Stack()
    found = repeated_blocks(model)
    assert found is not None and found.classes() == {"Block": 3}  # Linear: 10 of them, no block
    blocks = checkpoint_blocks(model, True)
    assert blocks is not None and blocks.classes() == {"Block": 3}
    assert wrapped_classes(model) == ["Block"] * 3
    assert "ModuleList layers" in blocks.found_by
    err = capsys.readouterr().err
    assert "activation_checkpointing: wrapped 3 Block in torch's checkpoint wrapper" in err


def test_a_no_split_modules_model_names_its_blocks_itself():
    model = UserModule()
    blocks = checkpoint_blocks(model, True)
    assert blocks is not None and blocks.classes() == {"Layer": 4}  # not Stage, the container's
    assert blocks.found_by == "named by PreTrained._no_split_modules"
    assert wrapped_classes(model) == ["Layer"] * 4


def test_blocks_that_hold_parameters_alone_are_wrapped_and_recomputed(capsys):
    """Issue 34: a ModuleList of 4 blocks the user wrote, each doing its matmul in forward with
    its own parameters (no child module): all 4 wrapped; backward runs each forward again."""
    plain, model = NoNetModule(), NoNetModule()
    blocks = checkpoint_blocks(model, True)
    assert blocks is not None and blocks.classes() == {"ParamBlock": 4}
    assert wrapped_classes(model) == ["ParamBlock"] * 4 and "ModuleList layers" in blocks.found_by
    assert "activation_checkpointing: wrapped 4 ParamBlock" in capsys.readouterr().err
    x = torch.randn(5, 8)
    for module, forwards in ((plain, 1), (model, 2)):  # one training step each
        module(x).sum().backward()
        assert [m.calls for m in module.modules() if isinstance(m, ParamBlock)] == [forwards] * 4


def test_every_repeated_block_class_is_wrapped_in_lightnings_demo_transformer():
    """An nn.Transformer of 2 encoder and 2 decoder layers: both lists' layers, not the larger's."""
    from lightning.pytorch.demos import Transformer

    torch.manual_seed(0)
    plain = Transformer(vocab_size=33, ninp=16, nhead=2, nhid=16, nlayers=2, dropout=0.0)
    model = copy.deepcopy(plain)
    blocks = checkpoint_blocks(model, True)
    assert blocks is not None and blocks.classes() == {"TransformerEncoderLayer": 2,
                                                       "TransformerDecoderLayer": 2}
    assert wrapped_classes(model) == ["TransformerEncoderLayer"] * 2 + ["TransformerDecoderLayer"] * 2
    tokens, targets = torch.randint(0, 33, (4, 6)), torch.randint(0, 33, (4, 6))
    for module in (plain, model):
        module(tokens, targets).sum().backward()
    for (name, a), (_, b) in zip(plain.named_parameters(), model.named_parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-5), name


def test_a_model_without_a_repeated_block_says_so_and_runs_unwrapped(capsys):
    """Linear layers only, in a Sequential of one class: torch's own layers are no blocks."""
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8))
    before = copy.deepcopy(model)
    assert checkpoint_blocks(model, True) is None
    assert wrapped_classes(model) == []
    assert str(model) == str(before)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0].startswith("harness: warning: activation_checkpointing=true: Sequential has"
                               " no repeated block")
    assert "activation_checkpointing=[MyBlock]" in lines[0]


def test_members_without_a_forward_of_their_own_are_no_blocks():
    """A ModuleList of ModuleLists: no wrapper could call its members."""
    model = nn.Module()
    model.groups = nn.ModuleList(nn.ModuleList([Block(), Block()]) for _ in range(2))
    found = repeated_blocks(model)
    assert found is not None and found.classes() == {"Block": 4}  # the inner lists' Blocks


def test_a_list_names_the_classes_to_wrap():
    module = TransformerModule(dim=16, depth=3, num_heads=2)
    blocks = checkpoint_blocks(module, ("Attention",))
    assert blocks is not None and blocks.classes() == {"Attention": 3}
    assert blocks.found_by == "named by activation_checkpointing"
    assert wrapped_classes(module) == ["Attention"] * 3
    # qualified names too; a block inside a wrapped block is not wrapped again
    module = TransformerModule(dim=16, depth=2, num_heads=2)
    blocks = checkpoint_blocks(module, ("harness.workload.model.Block", "Attention"))
    assert wrapped_classes(module) == ["Block", "Block"]


def test_a_name_found_nowhere_is_refused_in_one_line():
    with pytest.raises(ConfigError) as caught:
        checkpoint_blocks(TransformerModule(dim=16, depth=2, num_heads=2), ("Blok",))
    line = str(caught.value)
    assert line.startswith("activation_checkpointing=['Blok'] is not valid")
    assert "no module of TransformerModule is a Blok" in line
    assert "its repeated blocks: Block" in line and "\n" not in line


def test_a_list_of_sequentials_wraps_its_members_alone():
    """Members that are plain containers: only that list's members, not every Sequential."""
    model = nn.Module()
    model.blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
                                 for _ in range(3))
    model.head = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
    blocks = checkpoint_blocks(model, True)
    assert blocks is not None and blocks.classes() == {"Sequential": 3}
    assert type(model.head).__name__ == "Sequential"


def test_stages_of_one_block_class_are_all_wrapped():
    """A ResNet: each stage a Sequential of its blocks; the class of the largest, everywhere."""

    class Basic(Block):
        pass

    model = nn.Module()
    model.layer1 = nn.Sequential(Basic(4), Basic(4))
    model.layer2 = nn.Sequential(Basic(8), Basic(8))
    blocks = checkpoint_blocks(model, True)
    assert blocks is not None and blocks.classes() == {"Basic": 4}


def test_the_wrapped_model_computes_the_same_loss_and_gradients():
    torch.manual_seed(0)
    plain = TransformerModule(dim=16, depth=2, num_heads=2, dropout=0.0)
    wrapped = copy.deepcopy(plain)
    checkpoint_blocks(wrapped, True)
    assert list(plain.state_dict()) == list(wrapped.state_dict())  # checkpoints still load
    x, y = torch.randn(3, 5, 16), torch.randn(3, 5, 16)
    for module in (plain, wrapped):
        module._loss((x, y)).backward()
    for (name, a), (_, b) in zip(plain.named_parameters(), wrapped.named_parameters(),
                                 strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name


@pytest.mark.slow
def test_the_built_in_workload_runs_with_its_blocks_wrapped(harness):
    done = harness("activation_checkpointing=true", "mode=train", "profiler=[speed]")
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "ok"
    assert result["knobs"]["activation_checkpointing"] is True
    assert result["observed"]["checkpointed"] == {"Block": 2}
    note = ("activation_checkpointing: wrapped 2 Block in torch's checkpoint wrapper"
            " (non-reentrant); the members of Sequential net (lists of one block class)")
    assert any(n.startswith(note) for n in result["observed"]["notes"])
    assert f"harness: {note}" in done.stderr


@pytest.mark.slow
def test_a_run_recomputes_a_users_blocks_that_hold_parameters_alone(harness):
    """Issue 34: 4 ParamBlocks under `layers`; each runs its forward twice a training step."""
    done = harness(*USER, "activation_checkpointing=true")
    assert done.returncode == 0, done.stderr[-3000:]
    result = done.result()
    assert result["status"] == "ok" and result["observed"]["checkpointed"] == {"ParamBlock": 4}
    assert json.loads((done.cwd / FORWARDS_FILE).read_text()) == [2.0] * 4


@pytest.mark.slow
def test_checkpointing_lowers_the_training_peak_where_activations_dominate(harness):
    """Planted: 8 blocks at 32 examples x 64 tokens hold ~150 MB of activations and ~2M
    parameters; wrapped, backward keeps each block's input alone."""
    shape = ("batch_size=32", "model.depth=8", "data.seq_len=64", "data.dim=128",
             "data.train_batches=4", "profiler.speed.warmup_steps=1", "mode=train",
             "profiler=[speed]", "trainer.limit_val_batches=0")
    peaks = {}
    for setting in ("false", "true"):
        done = harness(*shape, f"activation_checkpointing={setting}")
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads((done.run_dirs()[-1] / "result.json").read_text())
        peaks[setting] = result["metrics"]["train_peak_rss_increase_bytes"]
    assert peaks["true"] < 0.8 * peaks["false"], peaks


@pytest.mark.slow
def test_checkpointing_works_under_compile(harness):
    done = harness("activation_checkpointing=true", "compile=true", "mode=train",
                   "profiler=[speed]", "data.train_batches=6", "model.depth=2")
    assert done.returncode == 0, done.stderr[-3000:]
    observed = done.result()["observed"]
    assert observed["checkpointed"] == {"Block": 2}
    assert observed["compiled_graphs"] >= 1


class CachingBlock(nn.Module):
    """A Hugging Face-style attention block: with config.use_cache its key/value cache grows on
    every forward, the checkpoint's recompute included."""

    def __init__(self, config: SimpleNamespace, dim: int = 8) -> None:
        super().__init__()
        self.config, self.linear, self.past = config, nn.Linear(dim, dim), []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = self.linear(x)
        if self.config.use_cache:
            self.past.append(keys)
            keys = torch.cat(self.past)
        return (x @ keys.T) @ keys


class CachedModel(nn.Module):
    _no_split_modules = ["CachingBlock"]

    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(use_cache=True)  # one config, shared as in transformers
        self.blocks = nn.ModuleList([CachingBlock(self.config), CachingBlock(self.config)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def test_a_key_value_cache_is_turned_off_or_the_recompute_would_not_match():
    from torch.utils.checkpoint import CheckpointError

    from harness import private_api

    planted = CachedModel()  # the failure it avoids, seen on a real GPT-2: a grown cache
    planted.blocks[0] = private_api.checkpoint_wrapper(planted.blocks[0])
    with pytest.raises(CheckpointError):
        planted(torch.randn(4, 8, requires_grad=True)).sum().backward()
    model = CachedModel()
    blocks = checkpoint_blocks(model, True)
    assert blocks is not None and blocks.classes() == {"CachingBlock": 2}
    assert "use_cache turned off on CachedModel's config" in blocks.found_by
    assert model.config.use_cache is False
    model(torch.randn(4, 8, requires_grad=True)).sum().backward()  # recomputes, matches
