"""Named sweeps: every `sweeps/*.yaml` becomes an option of the `sweep` config group.

`harness -m sweep=NAME` then composes that file at the global level, so it can
set `hydra.sweeper.params` (the grid) and any other key; command-line overrides
are applied after it and win. Registration only reads small yaml files, so it
is cheap enough to do at every CLI start-up.

Sweeps are looked up in the packaged `sweeps/`, then in `./sweeps/` of the
working directory, then in each directory of $HARNESS_SWEEPS_PATH; a later
file with the same name replaces an earlier one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from harness.config.locations import sweeps_dir

log = logging.getLogger(__name__)
GROUP = "sweep"
PATH_VARIABLE = "HARNESS_SWEEPS_PATH"


def sweep_dirs() -> list[Path]:
    """Directories searched for named sweeps, lowest priority first."""
    dirs = [sweeps_dir(), Path.cwd() / "sweeps"]
    extra = os.environ.get(PATH_VARIABLE, "")
    dirs += [Path(p) for p in extra.split(os.pathsep) if p]
    unique: list[Path] = []
    for d in dirs:
        if d.is_dir() and d.resolve() not in [u.resolve() for u in unique]:
            unique.append(d)
    return unique


def find_sweeps() -> dict[str, Path]:
    """Name -> yaml file of every named sweep."""
    found: dict[str, Path] = {}
    for directory in sweep_dirs():
        for path in sorted(directory.glob("*.yaml")):
            found[path.stem] = path
    return found


def register_sweeps() -> None:
    """Store each named sweep in Hydra's ConfigStore as `sweep=<name>` (package _global_)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    store = ConfigStore.instance()
    for name, path in find_sweeps().items():
        try:
            node = OmegaConf.load(path)
        except Exception as err:  # a broken user file must not break every other command
            log.warning("skipping sweep %r (%s): %s", name, path, err)
            continue
        store.store(group=GROUP, name=name, node=node, package="_global_", provider="harness")
