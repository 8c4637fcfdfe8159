"""What the `harness` command says when an error escapes Hydra: one line and an exit status
(2: the command line's, naming the key and the fix; 1: a failed run, its traceback in a file)."""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

from harness.errors import CONFIG_STATUS, FAILED_STATUS, HarnessError, first_line, output_error

INTERRUPTED_STATUS = 130


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).split("\n") if part.strip())


def _missing_option(text: str) -> str:
    """Hydra's "Could not find 'model/x'... Available options" in one line, with the closest."""
    found = re.search(r"Could not (?:find|load) '([^']+)'", text)
    if not found:
        return _one_line(text)
    group, _, name = found[1].rpartition("/")
    options = re.search(r"Available options in '[^']+':\s*(.*?)(?:\nConfig search path|$)", text, re.S)
    choices = options[1].split() if options else _builtin_options(group)
    line = f"Could not find '{found[1]}'"
    if choices:
        close = difflib.get_close_matches(name, choices, n=1)
        line += (f". Available options in '{group}': {', '.join(choices)}."
                 f" Fix: {_fixed_choice(group, name, close[0] if close else choices[0])}")
    return line


def _fixed_choice(group: str, wrong: str, right: str) -> str:
    """`group=right`, or the user's list with `wrong` replaced: `profiler=[speed,summary]`."""
    for override in _command_line()[1]:
        key, _, value = override.partition("=")
        items = value.strip()
        if key.lstrip("+~") != group or not (items.startswith("[") and items.endswith("]")):
            continue
        names = [item.strip() for item in items[1:-1].split(",")]
        if wrong in names:
            return f"{key}=[{','.join(right if item == wrong else item for item in names)}]"
    return f"{group}={right}"


# Hydra's flags that name a config of the user's (which may set any key, hydra.mode too).
CONFIG_FLAGS = ("-cd", "--config-dir", "-cp", "--config-path", "-cn", "--config-name")
# Hydra's own flags that take a value (`-cd DIR`): the value is not an override.
_VALUE_FLAGS = (*CONFIG_FLAGS, "-c", "--cfg", "-p", "--package")
_INFO_VALUES = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")


def _command_line() -> tuple[dict[str, str], list[str]]:
    """({flag: value} of -cd/-cp/-cn, the overrides) of this process's command line."""
    flags: dict[str, str] = {}
    overrides: list[str] = []
    args = iter(sys.argv[1:])
    for arg in args:
        name, eq, value = arg.partition("=")
        if name in _VALUE_FLAGS:
            flags[name] = value if eq else next(args, "")
        elif arg in ("-i", "--info"):
            continue  # its optional value is one of _INFO_VALUES, never an override
        elif not arg.startswith("-") and arg not in _INFO_VALUES:
            overrides.append(arg)
    return flags, overrides


def _builtin_options(group: str) -> list[str]:
    from harness.config.locations import conf_dir

    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml")) if group else []


def _unknown_key(text: str) -> str | None:
    """Hydra's "Could not override 'batchsize'... Key 'batchsize' is not in struct" in one line."""
    found = re.search(r"Could not override '([^']+)'", text)
    if not found:
        return None
    key = found[1]
    message = f"{key} is not a key of the config."
    close = difflib.get_close_matches(key, _known_keys(key), n=1, cutoff=0.7)
    if close:
        return f"{message} Did you mean {close[0]}? Fix: {close[0]}=..."
    return (f"{message} Fix: check the spelling (`harness --cfg job` lists the keys), or add a new"
            f" key with +{key}=...")


def _known_keys(key: str) -> list[str]:
    """The keys beside `key` in the config the command line composes; [] where nothing composes."""
    from hydra import compose, initialize_config_dir

    from harness.config.locations import conf_dir

    flags, overrides = _command_line()
    others = [o for o in overrides if o.partition("=")[0].lstrip("+~") != key]
    choices = [o for o in others if re.fullmatch(r"[\w/]+=[\w\-.]+", o)]
    extra = [d for flag, d in flags.items() if flag in ("-cd", "--config-dir") and d]
    search = ([f"hydra.searchpath=[{','.join(f'file://{Path(d).resolve()}' for d in extra)}]"]
              if extra else [])
    name = flags.get("-cn") or flags.get("--config-name") or "config"
    parent, _, _ = key.rpartition(".")
    for attempt in (others, choices):
        try:
            with initialize_config_dir(str(conf_dir()), version_base="1.3"):
                cfg = compose(name, overrides=[*attempt, *search])
        except Exception:  # the hint is a nicety: no hint rather than a second error
            continue
        node = cfg.get(parent) if parent else cfg
        return [f"{parent}.{k}" if parent else str(k) for k in node] if hasattr(node, "keys") else []
    return []


def _omegaconf(err: BaseException) -> str:
    key, text = getattr(err, "full_key", None), first_line(err, with_type=False)
    return (f"{key}: {text}. Fix: give {key} a value, or an interpolation (${{...}}) that resolves"
            if key else text)


def _null_group() -> str:
    """Hydra's "Config group override must be a string" for `data=null`: say `data=none`."""
    from harness.config.overrides import parse_overrides

    nulls = [k for k, v in parse_overrides(_command_line()[1]).items() if v in ("null", "None")]
    group = nulls[0] if nulls else "a group"
    line = f"{group}=null: a config group takes an option name, not null."
    options = _builtin_options(group) if nulls else []
    if "none" in options:
        meaning = {"data": " (the LightningModule's own dataloaders)"}.get(group, "")
        return f"{line} Fix: {group}=none{meaning}"
    return line + (f" Available options in '{group}': {', '.join(options)}" if options else "")


def describe(err: BaseException) -> tuple[int, str]:
    """(exit status, one line) for an exception that ended the `harness` command."""
    from hydra.errors import HydraException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(err, KeyboardInterrupt):
        return INTERRUPTED_STATUS, "interrupted (Ctrl-C)"
    if isinstance(err, HarnessError):
        return err.exit_status, str(err)
    if isinstance(err.__cause__, HarnessError):
        return describe(err.__cause__)
    if (unwritable := output_error(err)) is not None:  # the run or sweep directory, .hydra/
        return unwritable.exit_status, str(unwritable)
    if isinstance(err, MissingConfigException):
        return CONFIG_STATUS, _missing_option(str(err))
    if isinstance(err, OverrideParseException):
        override = getattr(err, "override", None)
        where = f"cannot read the override {override!r}: " if override else ""
        return CONFIG_STATUS, f"{where}{_one_line(err)}. Fix: quote the value, e.g. key='a b'"
    if isinstance(err, HydraException) and (
            found := re.search(r"Additional config directory '([^']+)' not found", str(err))):
        return CONFIG_STATUS, (f"--config-dir {found[1]} does not exist. Fix: pass the folder that holds your"
                               " config groups (DIR/model/*.yaml, DIR/data/*.yaml), relative to the start"
                               " directory or absolute")
    if isinstance(err, HydraException):  # ConfigCompositionException included
        inner = err.__cause__
        return CONFIG_STATUS, _unknown_key(str(err)) or (
            _omegaconf(inner) if isinstance(inner, OmegaConfBaseException) else _one_line(err))
    if isinstance(err, OmegaConfBaseException):
        return CONFIG_STATUS, _omegaconf(err)
    if isinstance(err, ValueError) and "Config group override must be a string" in str(err):
        return CONFIG_STATUS, _null_group()
    if isinstance(err, ValueError) and "Only one of --run, --multirun" in str(err):
        return CONFIG_STATUS, (f"{_one_line(err)}. Fix: print one job's config without -m, e.g."
                               " harness --cfg job batch_size=1")
    from harness.run.record import saved_traceback

    return FAILED_STATUS, f"{first_line(err)} ({saved_traceback(err)})"
