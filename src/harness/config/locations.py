"""conf/ and sweeps/: in the installed wheel (`harness/conf`), else at the repository root."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def _data_dir(name: str) -> Path:
    inside_package = _PACKAGE_DIR / name
    return inside_package if inside_package.is_dir() else _PACKAGE_DIR.parent.parent / name


def conf_dir() -> Path:
    """The directory holding config.yaml and the config groups."""
    return _data_dir("conf")


def sweeps_dir() -> Path:
    """The directory holding the named sweeps (`harness -m sweep=NAME`)."""
    return _data_dir("sweeps")
