"""`activation_checkpointing`: find the model's repeated blocks and wrap each in torch's checkpoint
wrapper (non-reentrant), so backward recomputes their activations instead of keeping them. Runs
on the built LightningModule before the fit and before compile (docs/own-model.md)."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from torch import nn

from harness import private_api
from harness.errors import ConfigError

log = logging.getLogger(__name__)
KEY = "activation_checkpointing"
CONTAINERS = (nn.ModuleList, nn.Sequential)


@dataclass
class Blocks:
    """The modules to wrap, and how they were chosen (the run's notes say it)."""

    modules: list[nn.Module] = field(default_factory=list)
    found_by: str = ""

    def classes(self) -> dict[str, int]:
        return dict(Counter(type(m).__name__ for m in self.modules))


def class_name(module: nn.Module) -> str:
    return type(module).__name__


def _qualified(module: nn.Module) -> str:
    kind = type(module)
    return f"{kind.__module__}.{kind.__qualname__}"


def _outermost(root: nn.Module, wanted: set[int]) -> list[tuple[nn.Module, str, nn.Module]]:
    """(parent, name, module) of the modules in `wanted` (ids) below `root` that no other wanted
    module holds: a block inside a checkpointed block is recomputed with it already."""
    found: list[tuple[nn.Module, str, nn.Module]] = []

    def visit(parent: nn.Module) -> None:
        for name, child in parent.named_children():
            if id(child) in wanted:
                found.append((parent, name, child))
            else:
                visit(child)

    visit(root)
    return found


def _of_classes(root: nn.Module, matches: set[str]) -> list[nn.Module]:
    """The outermost modules whose class name (or module.qualname) is in `matches`."""
    wanted = {id(m) for m in root.modules()
              if m is not root and (class_name(m) in matches or _qualified(m) in matches)}
    return [module for *_, module in _outermost(root, wanted)]


def named_blocks(root: nn.Module, names: tuple[str, ...]) -> Blocks:
    """activation_checkpointing=[A, B]: every outermost module of those classes; a name no module
    of the model has is a one-line ConfigError (a typo wraps nothing and saves nothing)."""
    below = [m for m in root.modules() if m is not root]
    present = {name for m in below for name in (class_name(m), _qualified(m))}
    missing = [name for name in names if name not in present]
    if missing:
        found = repeated_blocks(root)
        repeated = "none found" if found is None else ", ".join(found.classes())
        # the classes of the model's modules that hold modules, most frequent first
        holders = Counter(class_name(m) for m in below if next(m.children(), None) is not None)
        raise ConfigError(KEY, list(names), (
            f"class names of modules the model has; no module of {class_name(root)} is a"
            f" {missing[0]}"), f"{KEY}=true (its repeated blocks: {repeated}), or a class the model"
            f" has: {', '.join(name for name, _ in holders.most_common(6))}")
    return Blocks(_of_classes(root, set(names)), f"named by {KEY}")


def repeated_blocks(root: nn.Module) -> Blocks | None:
    """The model's repeated blocks: the classes a Hugging Face model names in
    `_no_split_modules` (on it or a submodule) that it has, else the members of every ModuleList
    or Sequential whose members are all blocks of one class (`_of_one_block_class`), outermost;
    None: none."""
    named: dict[str, str] = {}  # class name -> the class of the model that names it
    for module in root.modules():
        listed = getattr(module, "_no_split_modules", None)
        if isinstance(listed, (list, tuple, set)):
            named.update({str(name): class_name(module) for name in listed})
    counts = Counter(class_name(m) for m in root.modules() if class_name(m) in named)
    if not counts:
        return _container_blocks(root)
    # Repeated ones first: _no_split_modules also names one-off parts (ViT's embeddings).
    chosen = {name for name, n in counts.items() if n > 1} or set(counts)
    owners = sorted({named[name] for name in chosen})
    return Blocks(_of_classes(root, chosen), f"named by {', '.join(owners)}._no_split_modules")


def _of_one_block_class(container: nn.Module) -> bool:
    """A ModuleList or Sequential of 2+ members of one class, a block: one a checkpoint wrapper can
    call (a forward of its own, so no ModuleList) and not one of torch's layers (Linear, Dropout: it
    holds no modules); a class the user wrote is a block even when it holds parameters alone."""
    members = list(container.children()) if isinstance(container, CONTAINERS) else []
    if len(members) < 2 or len({type(m) for m in members}) != 1:
        return False
    kind = type(members[0])
    return kind.forward is not nn.Module.forward and (
        kind.__module__.split(".")[0] != "torch" or next(members[0].children(), None) is not None)


def _container_blocks(root: nn.Module) -> Blocks | None:
    lists = [(name, c) for name, c in root.named_modules() if _of_one_block_class(c)]
    members = {id(m) for _, container in lists for m in container.children()}
    modules = [m for *_, m in _outermost(root, members)]
    if not modules:
        return None
    kept = {id(m) for m in modules}
    where = [f"{class_name(container)} {name or class_name(root)}" for name, container in lists
             if any(id(m) in kept for m in container.children())]
    return Blocks(modules, f"the members of {', '.join(where)} (lists of one block class)")


def checkpoint_blocks(root: nn.Module, setting: bool | tuple[str, ...]) -> Blocks | None:
    """Wrap the blocks `setting` picks (True: repeated_blocks; names: named_blocks) in place,
    said in one line; None when off, or when the model has no repeated block (the run goes on)."""
    if setting is False:
        return None
    blocks = named_blocks(root, setting) if isinstance(setting, tuple) else repeated_blocks(root)
    if blocks is None or not blocks.modules:
        log.warning("%s", said(None, class_name(root)))
        return None
    for parent, name, module in _outermost(root, {id(m) for m in blocks.modules}):
        setattr(parent, name, private_api.checkpoint_wrapper(module))
    blocks.found_by += _without_cache(root)
    log.info("%s", said(blocks))
    return blocks


def _without_cache(root: nn.Module) -> str:
    """Turn off a Hugging Face config's `use_cache` (as its own gradient_checkpointing_enable
    does): a key/value cache filled in the forward grows again when a block is recomputed, and
    the recomputed tensors no longer match (torch's CheckpointError). What was turned off."""
    owners: dict[int, str] = {}  # one config is shared by a model's parts: its outermost owner
    for module in root.modules():  # outermost first
        config = getattr(module, "config", None)
        if getattr(config, "use_cache", False) is True or id(config) in owners:
            owners.setdefault(id(config), class_name(module))
            config.use_cache = False
    return f"; use_cache turned off on {', '.join(owners.values())}'s config" if owners else ""


def said(blocks: Blocks | None, model: str = "the model") -> str:
    """The line the terminal and result.json's observed.notes show: what was wrapped, or why not."""
    if blocks is None:
        return (f"{KEY}=true: {model} has no repeated block (no ModuleList or Sequential of one"
                " class of blocks, torch's own layers being none, no _no_split_modules); it runs without"
                f" checkpointing. Fix: name the classes to wrap, {KEY}=[MyBlock]")
    wrapped = ", ".join(f"{count} {name}" for name, count in blocks.classes().items())
    return f"{KEY}: wrapped {wrapped} in torch's checkpoint wrapper (non-reentrant); {blocks.found_by}"
