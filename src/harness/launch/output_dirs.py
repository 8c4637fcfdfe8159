"""Run and sweep directories unique when runs start in the same second: conf/config.yaml wraps
Hydra's `outputs/DATE/HH-MM-SS` in `${unique_dir:...}`. OmegaConf caches the value in the config,
which carries it to the jobs (submitit's too); register the resolver wherever one is resolved."""

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
    """A directory created now for this call alone: `path`, or `path_2`, ..."""
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
            return str(candidate)
        except FileExistsError:  # another run started in the same second: the next name
            number += 1
            candidate = base.with_name(f"{base.name}_{number}")
        except OSError:  # as above: left to Hydra, whose error harness reports in one line
            return str(candidate)


def register_resolver() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, unique_dir, use_cache=True)
