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
        """Class name -> how many of the modules are of it."""
        return dict(Counter(type(m).__name__ for m in self.modules))


def class_name(module: nn.Module) -> str:
    return type(module).__name__


def _qualified(module: nn.Module) -> str:
    kind = type(module)
    return f"{kind.__module__}.{kind.__qualname__}"


def _outermost(root: nn.Module, wanted: set[int]) -> list[nn.Module]:
    """The modules in `wanted` (ids) below `root` that no other wanted module holds: a block
    inside a checkpointed block is recomputed with it already."""
    found: list[nn.Module] = []

    def visit(parent: nn.Module) -> None:
        for child in parent.children():
            if id(child) in wanted:
                found.append(child)
            else:
                visit(child)

    visit(root)
    return found


def _of_classes(root: nn.Module, matches: set[str]) -> list[nn.Module]:
    """The outermost modules whose class name (or module.qualname) is in `matches`."""
    wanted = {id(m) for m in root.modules()
              if m is not root and (class_name(m) in matches or _qualified(m) in matches)}
    return _outermost(root, wanted)


def named_blocks(root: nn.Module, names: tuple[str, ...]) -> Blocks:
    """activation_checkpointing=[A, B]: every outermost module of those classes; a name no module
    of the model has is a one-line ConfigError (a typo wraps nothing and saves nothing)."""
    present = {name for m in root.modules() if m is not root
               for name in (class_name(m), _qualified(m))}
    missing = [name for name in names if name not in present]
    if missing:
        raise ConfigError(KEY, list(names), (
            f"class names of modules the model has; no module of {class_name(root)} is a"
            f" {missing[0]}"), f"{KEY}=true (its repeated blocks: {_said(repeated_blocks(root))}),"
            f" or a class the model has: {', '.join(_composite_classes(root)[:6])}")
    return Blocks(_of_classes(root, set(names)), f"named by {KEY}")


def _said(blocks: Blocks | None) -> str:
    return "none found" if blocks is None else ", ".join(blocks.classes())


def _composite_classes(root: nn.Module) -> list[str]:
    """The classes of the model's modules that hold modules, most frequent first."""
    counts = Counter(class_name(m) for m in root.modules()
                     if m is not root and next(m.children(), None) is not None)
    return [name for name, _ in counts.most_common()]


def repeated_blocks(root: nn.Module) -> Blocks | None:
    """The model's repeated blocks: the classes a Hugging Face model names in
    `_no_split_modules` (on it or a submodule) that it has, else the members of its largest
    ModuleList or Sequential whose members are all of one class and hold modules themselves
    (a transformer's layers; never Linear or Dropout, however often they occur). None: none."""
    return _hugging_face_blocks(root) or _container_blocks(root)


def _hugging_face_blocks(root: nn.Module) -> Blocks | None:
    named: dict[str, str] = {}  # class name -> the class of the model that names it
    for module in root.modules():
        listed = getattr(module, "_no_split_modules", None)
        if isinstance(listed, (list, tuple, set)):
            named.update({str(name): class_name(module) for name in listed})
    counts = Counter(class_name(m) for m in root.modules() if class_name(m) in named)
    if not counts:
        return None
    # Repeated ones first: _no_split_modules also names one-off parts (ViT's embeddings).
    chosen = {name for name, n in counts.items() if n > 1} or set(counts)
    owners = sorted({named[name] for name in chosen})
    return Blocks(_of_classes(root, chosen), f"named by {', '.join(owners)}._no_split_modules")


def _is_block(module: nn.Module) -> bool:
    """A module that holds modules and runs them: not a leaf (Linear), not a ModuleList (no
    forward of its own, so no wrapper can call it)."""
    return (next(module.children(), None) is not None
            and type(module).forward is not nn.Module.forward)


def _container_blocks(root: nn.Module) -> Blocks | None:
    candidates = []
    for name, container in root.named_modules():
        members = list(container.children()) if isinstance(container, CONTAINERS) else []
        if (len(members) > 1 and len({type(m) for m in members}) == 1
                and _is_block(members[0])):
            size = sum(p.numel() for p in container.parameters())
            candidates.append((size, len(members), name, container))
    if not candidates:
        return None
    _, count, name, container = max(candidates, key=lambda c: c[:2])
    members = list(container.children())
    kind = type(members[0])
    where = f"{class_name(container)} {name or class_name(root)}"
    if kind in CONTAINERS:  # its members are plain containers: those members alone
        return Blocks(members, f"the members of {where}, the largest of one class")
    # Every module of that class: a ResNet's stages each hold their own list of its blocks.
    return Blocks(_of_classes(root, {_qualified(members[0])}),
                  f"the class of the {count} members of {where}, the largest of one class")


def checkpoint_blocks(root: nn.Module, setting: bool | tuple[str, ...]) -> Blocks | None:
    """Wrap the blocks `setting` picks (True: repeated_blocks; names: named_blocks) in place,
    said in one line; None when off, or when the model has no repeated block (the run goes on)."""
    if setting is False:
        return None
    blocks = named_blocks(root, setting) if isinstance(setting, tuple) else repeated_blocks(root)
    if blocks is None or not blocks.modules:
        log.warning("%s", said(None, class_name(root)))
        return None
    _wrap(root, {id(m) for m in blocks.modules})
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
                " class whose members hold modules, no _no_split_modules); it runs without"
                f" checkpointing. Fix: name the classes to wrap, {KEY}=[MyBlock]")
    wrapped = ", ".join(f"{count} {name}" for name, count in blocks.classes().items())
    return (f"{KEY}: wrapped {wrapped} in torch's checkpoint wrapper (non-reentrant);"
            f" {blocks.found_by}")


def _wrap(parent: nn.Module, wanted: set[int]) -> None:
    for name, child in list(parent.named_children()):
        if id(child) in wanted:
            setattr(parent, name, private_api.checkpoint_wrapper(child))
        else:
            _wrap(child, wanted)
