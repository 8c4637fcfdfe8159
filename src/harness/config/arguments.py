"""The arguments of every `_target_` checked against its constructor before anything is built:
each key a parameter (a class whose `**kwargs` reach no base class takes any key), each leaf
value fitting its type hint (config.checks: pydantic, loaded on the first check, never for --help)."""

from __future__ import annotations

import contextlib
import difflib
import dis
import inspect
import logging
import types
import typing
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from harness.config.checks import check, typed
from harness.errors import ConfigError

_KEYWORDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def callback_nodes(node: Any, key: str = "trainer.callbacks") -> Iterator[tuple[str, DictConfig]]:
    """(key, `_target_` node) of each callback in trainer.callbacks: one node, a list or a dict."""
    if isinstance(node, DictConfig) and "_target_" in node:
        yield key, node
    elif isinstance(node, DictConfig):
        for name, child in node.items():
            yield from callback_nodes(child, f"{key}.{name}")
    elif isinstance(node, ListConfig):
        for index, child in enumerate(node):
            yield from callback_nodes(child, f"{key}[{index}]")
    elif node is not None:
        raise ConfigError(key, node, "a callback node with a _target_, a list or a dict of them",
                          f"{key}=[{{_target_: lightning.pytorch.callbacks.LearningRateMonitor}}]")


def target_nodes(cfg: DictConfig) -> Iterator[tuple[str, DictConfig]]:
    """(key, node) of each `_target_` node harness builds, callbacks and presets included."""
    for group in ("model", "data", "trainer", "logger"):
        node = cfg.get(group)
        if isinstance(node, DictConfig) and "_target_" in node:
            yield group, node
    trainer = cfg.get("trainer")
    if isinstance(trainer, DictConfig):
        yield from callback_nodes(trainer.get("callbacks"))
    presets = cfg.get("profiler")
    if isinstance(presets, DictConfig):
        for name, node in presets.items():
            if isinstance(node, DictConfig) and "_target_" in node:
                yield f"profiler.{name}", node


def parameters(target: Any) -> tuple[dict[str, inspect.Parameter], bool]:
    """(name -> parameter, whether any other keyword is accepted) of calling `target`."""
    found: dict[str, inspect.Parameter] = {}
    callables = ([k.__dict__["__init__"] for k in inspect.getmro(target) if "__init__" in k.__dict__]
                 if inspect.isclass(target) else [target])
    for function in callables:
        signature = None
        for eval_str in (True, False):  # a hint that does not evaluate: keep the names
            with contextlib.suppress(NameError, TypeError, SyntaxError, ValueError):
                signature = inspect.signature(function, eval_str=eval_str)
                break
        if signature is None:
            return found, True  # a builtin or C extension: nothing to check against
        params = list(signature.parameters.values())
        if inspect.isclass(target) and params and params[0].name == "self":
            params = params[1:]
        for param in params:
            if param.kind in _KEYWORDS:
                found.setdefault(param.name, param)
        var_keyword = next((p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD), None)
        if var_keyword is None:
            return found, False
        if not _passes_on(function, var_keyword):
            return found, True  # `**_`: the constructor takes any key and ignores it
    return found, True


def _passes_on(function: Any, name: str) -> bool:
    """Whether `function`'s body reads its `**name` (one without code is taken to)."""
    try:
        instructions = list(dis.get_instructions(inspect.unwrap(function)))
    except TypeError:
        return True
    return any(i.opname.startswith(("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE")) and (
        name == i.argval or (isinstance(i.argval, tuple) and name in i.argval)) for i in instructions)


def type_text(annotation: Any) -> str:
    """A type hint as a reader says it: `int or None`, `one of 'a', 'b'`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_text(arg) for arg in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, args))
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _builds(value: Any) -> bool:
    """Whether a container holds a `_target_` node: what Hydra builds is the constructor's."""
    if isinstance(value, dict):
        return "_target_" in value or any(map(_builds, value.values()))
    return isinstance(value, list) and any(map(_builds, value))


def check_node(key: str, target: Any, node: DictConfig, interpolated: bool = False) -> None:
    """Raise a ConfigError naming `key.<argument>` for the first argument `target` refuses:
    harness's own constructors strictly (config.checks), others as pydantic's lax mode judges."""
    params, open_ended = parameters(target)
    names = ", ".join(params) if len(params) <= 10 else f"{len(params)} arguments"
    name_of = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', target)}"
    lax = not name_of.startswith("harness.")
    for name in map(str, node):
        if name.startswith("_"):  # _target_, _partial_, _convert_, _recursive_, _args_
            continue
        if OmegaConf.is_interpolation(node, name) != interpolated:
            continue
        if name not in params:
            if open_ended:
                continue
            close = difflib.get_close_matches(name, list(params), n=1)
            fix = f"{key}.{close[0]}={node.get(name)}" if close else f"remove {key}.{name}"
            raise ConfigError(f"{key}.{name}", node.get(name), f"an argument of {name_of} ({names})", fix)
        value, annotation, default = node.get(name), params[name].annotation, params[name].default
        if isinstance(value, (DictConfig, ListConfig)):
            value = OmegaConf.to_container(value, resolve=True)
        if (_builds(value) or annotation in (inspect.Parameter.empty, Any)
                or (value is None and default is None)):  # `lr: float = None`: None is the default
            continue
        example = (typed(default) if default not in (inspect.Parameter.empty, None)
                   else f"<{type_text(annotation)}>")
        check(f"{key}.{name}", value, annotation, example, lax=lax)
    if interpolated and hasattr(target, "argument_rules"):
        _check_rules(key, target, node, params)


def _check_rules(key: str, target: Any, node: DictConfig, params: dict[str, inspect.Parameter]) -> None:
    """A constructor's rules across its arguments: `target.argument_rules(**arguments)` gives
    {argument: (hint, example)} for the arguments whose hint depends on others' values."""
    arguments = {name: p.default for name, p in params.items() if p.default is not p.empty}
    arguments.update((str(name), node.get(name)) for name in node if not str(name).startswith("_"))
    for name, (hint, example) in target.argument_rules(**arguments).items():
        if name in arguments:  # else a subclass fixes it
            check(f"{key}.{name}", arguments[name], hint, example)


def check_arguments(targets: list[tuple[str, Any, DictConfig]]) -> None:
    """Every node of check_targets' list against its constructor, interpolations last."""
    for interpolated in (False, True):
        for key, target, node in targets:
            check_node(key, target, node, interpolated)


def drop_replaced_arguments(targets: list[tuple[str, Any, DictConfig]], overrides: list[str]) -> None:
    """`model._target_=mypkg.Model` (or `data._target_=`) typed: the replaced class's arguments the new
    one does not take are dropped, said in one line; those typed stay and are checked (docs/own-model.md)."""
    typed = [o.lstrip("+") for o in map(str, overrides)]
    for key, target, node in targets:
        if key not in ("model", "data") or not any(o.startswith(f"{key}._target_=") for o in typed):
            continue
        params, open_ended = parameters(target)
        given = {o.partition("=")[0].split(".", 2)[1] for o in typed if o.startswith(f"{key}.")}
        dropped = [name for name in map(str, node) if not name.startswith("_")
                   and name not in params and name not in given and not open_ended]
        if dropped:
            with open_dict(node):
                for name in dropped:
                    del node[name]
            logging.getLogger(__name__).info("%s._target_=%s: the arguments of the %s it replaced that it"
                                             " does not take are left out: %s", key, node._target_, key,
                                             ", ".join(dropped))
