"""Named sweeps: every `sweeps/*.yaml` becomes an option of the `sweep` config group, composed
at the global level (`harness -m sweep=NAME`; docs/sweeps.md). Looked up in the packaged
`sweeps/`, `./sweeps/`, then $HARNESS_SWEEPS_PATH; a later file of a name replaces an earlier."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from harness.config.locations import sweeps_dir

log = logging.getLogger(__name__)
GROUP = "sweep"
PATH_VARIABLE = "HARNESS_SWEEPS_PATH"


def register_sweeps() -> None:
    """Store each named sweep in Hydra's ConfigStore as `sweep=<name>` (package _global_)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    extra = [Path(p) for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p]
    # each directory once, where it first comes
    dirs = dict.fromkeys(d.resolve() for d in (sweeps_dir(), Path.cwd() / "sweeps", *extra) if d.is_dir())
    found = {path.stem: path for directory in dirs for path in sorted(directory.glob("*.yaml"))}
    store = ConfigStore.instance()
    for name, path in found.items():  # a later directory's file of a name wins
        try:
            node = OmegaConf.load(path)
        except Exception as err:  # a broken user file must not break every other command
            log.warning("skipping sweep %r (%s): %s", name, path, err)
            continue
        store.store(group=GROUP, name=name, node=node, package="_global_", provider="harness")
