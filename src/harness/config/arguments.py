"""Check the arguments of every `_target_` against its constructor before anything is built.

What LightningCLI does through jsonargparse, for a Hydra config: each key of a `_target_`
node must be a parameter of the class (or reach one through `**kwargs` passed on to a base
class), and each value must fit the parameter's type hint. pydantic (a dependency already,
for result.json) checks the value, in its lax mode: `lr=abc` for a float, `max_epochs=abc`
for an int, `log_rates=maybe` for a bool are refused; 1 for a float, "1e-3" (an environment
variable's value), a number for a str, or None where None is the default are not.

Only leaves are checked: nested `_target_` nodes, lists and mappings are left to the
constructor, and so are annotations pydantic cannot turn into a check (a torch.device, a
Lightning Strategy, a name that does not resolve).

This is the one check of the types, for every class alike, the user's included (they have
no checks of their own). What a type hint cannot say stays with harness's own constructors
(harness.config.checks: `warmup_steps >= 0`, one of a list of modes), since ProfileSession
and tests build presets without a config; it runs when Hydra builds them, before the run.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from harness.errors import ConfigError

_KEYWORDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def callback_nodes(node: Any, key: str = "trainer.callbacks") -> Iterator[tuple[str, DictConfig]]:
    """(key, `_target_` node) of each callback in trainer.callbacks: one node, a list of them,
    or a dict of named ones (lightning-hydra-template's `callbacks` group); null entries skipped."""
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
    """(key, node) of each `_target_` node harness builds: model, data, trainer, logger,
    the user's trainer callbacks and each profiler preset."""
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
    """(name -> parameter, whether any other keyword is accepted) of what calling `target`
    takes. A class's `**kwargs` are followed into its base classes, as they usually reach
    `super().__init__`; the search ends at the first __init__ without them."""
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
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return found, False
    return found, True


def _signature(function: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(function, eval_str=True)
    except (NameError, TypeError, SyntaxError):  # a hint that does not evaluate: keep the names
        try:
            return inspect.signature(function)
        except (TypeError, ValueError):
            return None
    except ValueError:
        return None


def _adapter(annotation: Any) -> Any:
    """pydantic's validator for a type hint, or None when pydantic cannot check it."""
    try:
        return _cached_adapter(annotation)
    except TypeError:  # an unhashable hint
        return _new_adapter(annotation)


def _new_adapter(annotation: Any) -> Any:
    from pydantic import ConfigDict, TypeAdapter

    try:
        # YAML reads `name: 2024` as a number; a str parameter takes it all the same.
        return TypeAdapter(annotation, config=ConfigDict(coerce_numbers_to_str=True))
    except Exception:  # PydanticSchemaGenerationError and kin: an arbitrary class
        try:
            return TypeAdapter(annotation)  # a type with a config of its own
        except Exception:
            return None


_cached_adapter = functools.lru_cache(maxsize=256)(_new_adapter)


def _as_override(value: Any) -> str:
    """A value as it is typed on the command line (true, null, 0.001)."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return str(value)


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


def _names(params: dict[str, inspect.Parameter]) -> str:
    names = list(params)
    return ", ".join(names) if len(names) <= 10 else f"{len(names)} arguments"


def check_node(key: str, target: Any, node: DictConfig, interpolated: bool = False) -> None:
    """Raise a ConfigError naming `key.<argument>` for the first argument `target` refuses.
    Values written as interpolations (`dim: ${data.dim}`) are checked only with
    `interpolated`, so that a bad value is first named where it is written."""
    from pydantic import ValidationError

    params, open_ended = parameters(target)
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
                              f"an argument of {name_of} ({_names(params)})", fix)
        value = node.get(name)
        if isinstance(value, (DictConfig, ListConfig)):
            continue  # only leaves: nested targets and containers are the constructor's
        annotation = params[name].annotation
        if annotation in (inspect.Parameter.empty, Any):
            continue
        if value is None and params[name].default is None:
            continue  # `lr: float = None`: None is what the parameter defaults to anyway
        adapter = _adapter(annotation)
        if adapter is None:
            continue
        try:
            adapter.validate_python(value)
        except ValidationError as err:
            default = params[name].default
            example = (_as_override(default) if default not in (inspect.Parameter.empty, None)
                       else f"<{type_text(annotation)}>")
            raise ConfigError(f"{key}.{name}", value,
                              f"{type_text(annotation)} ({name_of}: {err.errors()[0]['msg']})",
                              f"{key}.{name}={example}") from None


def check_arguments(targets: list[tuple[str, Any, DictConfig]]) -> None:
    """Every `_target_` node's arguments against its constructor: `targets` as
    harness.config.targets.check_targets imported them. Values written as interpolations go
    last, so a bad value is first named where it is written."""
    for interpolated in (False, True):
        for key, target, node in targets:
            check_node(key, target, node, interpolated)
