"""Run and sweep directories that stay unique when runs start in the same second.

Hydra names them after the start time (`outputs/DATE/HH-MM-SS`), so two runs started in
the same second would share one directory and overwrite each other's files. conf/config.yaml
wraps the name in `${unique_dir:...}`: the directory is created exclusively (mkdir without
exist_ok, atomic on every POSIX filesystem), so of two processes asking for the same name
one gets it and the other takes the next free one, `HH-MM-SS_2`, `_3`, ...

The value is resolved once per process and name, and OmegaConf caches it in the config
(`use_cache`), a cache Hydra copies into each job's config and that travels with the
pickled config to submitit's job processes: a sweep and its jobs agree on the directory.
The resolver must be registered wherever such a config is resolved: `harness.cli` before
Hydra starts, and the launcher plugin for submitit's job processes.
"""

from __future__ import annotations

from pathlib import Path

RESOLVER = "unique_dir"
_claimed: dict[str, str] = {}  # name asked for -> directory this process created for it


def unique_dir(path: str) -> str:
    """`path`, or `path_2`, `path_3`, ...: the first that this process could create."""
    if path not in _claimed:
        _claimed[path] = _claim(Path(path))
    return _claimed[path]


def new_dir(path: str | Path) -> Path:
    """A directory created now for this caller alone: `path`, or `path_2`, ... (each call
    claims another; `unique_dir` gives one directory per name and process)."""
    return Path(_claim(Path(path)))


def _claim(base: Path) -> str:
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return str(base)  # unwritable: Hydra's own mkdir fails next, and says where
    candidate, number = base, 1
    while True:
        try:
            candidate.mkdir()
        except FileExistsError:  # another run started in the same second: the next name
            number += 1
            candidate = base.with_name(f"{base.name}_{number}")
            continue
        except OSError:
            pass  # as above: left to Hydra, whose error harness reports in one line
        return str(candidate)


def register_resolver() -> None:
    """Make `${unique_dir:...}` known to OmegaConf (once per process)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, unique_dir, use_cache=True)
