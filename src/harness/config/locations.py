"""Find conf/ and sweeps/ both in a source checkout and in an installed wheel.

The wheel carries them as `harness/conf` and `harness/sweeps` (see
pyproject.toml); an editable install reads them from the repository root.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def _data_dir(name: str) -> Path:
    inside_package = _PACKAGE_DIR / name
    if inside_package.is_dir():
        return inside_package
    return _PACKAGE_DIR.parent.parent / name


def conf_dir() -> Path:
    """The directory holding config.yaml and the config groups."""
    return _data_dir("conf")


def sweeps_dir() -> Path:
    """The directory holding the named sweeps (`harness -m sweep=NAME`)."""
    return _data_dir("sweeps")
