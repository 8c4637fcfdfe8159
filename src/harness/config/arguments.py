"""The arguments of every `_target_` checked against its constructor before anything is built:
each key a parameter (a class whose `**kwargs` reach no base class takes any key), each leaf
value fitting its type hint as pydantic's lax mode judges it (loaded here, never for --help)."""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from harness.config.checks import typed
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
        signature = _signature(function)
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
    import dis

    try:
        instructions = list(dis.get_instructions(inspect.unwrap(function)))
    except TypeError:
        return True
    return any(i.opname.startswith(("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE")) and (
        name == i.argval or (isinstance(i.argval, tuple) and name in i.argval)) for i in instructions)


def _signature(function: Any) -> inspect.Signature | None:
    for eval_str in (True, False):  # a hint that does not evaluate: keep the names
        with contextlib.suppress(NameError, TypeError, SyntaxError, ValueError):
            return inspect.signature(function, eval_str=eval_str)
    return None


@functools.lru_cache(maxsize=256)
def _adapter(annotation: Any) -> Any:
    from pydantic import ConfigDict, TypeAdapter

    try:
        # YAML reads `name: 2024` as a number; a str parameter takes it all the same.
        return TypeAdapter(annotation, config=ConfigDict(coerce_numbers_to_str=True))
    except Exception:  # PydanticSchemaGenerationError and kin: an arbitrary class
        try:
            return TypeAdapter(annotation)  # a type with a config of its own
        except Exception:
            return None


def type_text(annotation: Any) -> str:
    """A type hint as a reader says it: `int or None`, `one of 'a', 'b'`."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_text(arg) for arg in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, args))
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def check_node(key: str, target: Any, node: DictConfig, interpolated: bool = False) -> None:
    """Raise a ConfigError naming `key.<argument>` for the first argument `target` refuses."""
    from pydantic import ValidationError

    params, open_ended = parameters(target)
    names = ", ".join(params) if len(params) <= 10 else f"{len(params)} arguments"
    name_of = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', target)}"
    for name in node:
        name = str(name)
        if name.startswith("_"):  # _target_, _partial_, _convert_, _recursive_, _args_
            continue
        if OmegaConf.is_interpolation(node, name) != interpolated:
            continue
        if name not in params:
            if open_ended:
                continue
            close = difflib.get_close_matches(name, list(params), n=1)
            fix = f"{key}.{close[0]}={node.get(name)}" if close else f"remove {key}.{name}"
            raise ConfigError(f"{key}.{name}", node.get(name),
                              f"an argument of {name_of} ({names})", fix)
        value, annotation, default = node.get(name), params[name].annotation, params[name].default
        if (isinstance(value, (DictConfig, ListConfig))  # nested targets, containers: the constructor's
                or annotation in (inspect.Parameter.empty, Any)
                or (value is None and default is None)):  # `lr: float = None`: None is the default
            continue
        try:
            adapter = _adapter(annotation)
        except TypeError:  # an unhashable hint
            adapter = _adapter.__wrapped__(annotation)
        if adapter is None:
            continue
        try:
            adapter.validate_python(value)
        except ValidationError as err:
            example = (typed(default) if default not in (inspect.Parameter.empty, None)
                       else f"<{type_text(annotation)}>")
            raise ConfigError(f"{key}.{name}", value,
                              f"{type_text(annotation)} ({name_of}: {err.errors()[0]['msg']})",
                              f"{key}.{name}={example}") from None


def check_arguments(targets: list[tuple[str, Any, DictConfig]]) -> None:
    """Every node of check_targets' list against its constructor, interpolations last."""
    for interpolated in (False, True):
        for key, target, node in targets:
            check_node(key, target, node, interpolated)
