"""Errors that reach the user as one line instead of a traceback."""

from __future__ import annotations

import errno
import os

CONFIG_STATUS, FAILED_STATUS = 2, 1
# A full disk or quota is not the command line's fault: the run failed.
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class HarnessError(Exception):
    """A problem the user can fix: the message names the key, the bad value and the fix."""

    exit_status = FAILED_STATUS


class ConfigError(HarnessError):
    """A config value is wrong. Raised before any heavy work starts."""

    exit_status = CONFIG_STATUS

    def __init__(self, key: str, value: object, expected: str, fix: str | None = None) -> None:
        self.key = key  # the config key at fault
        super().__init__(f"{key}={value!r} is not valid: expected {expected}."
                         + (f" Fix: {fix}" if fix else ""))


def first_line(err: BaseException, with_type: bool = True) -> str:
    """The first non-empty line of an exception's message, prefixed by its class `with_type`."""
    text = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    if not with_type:
        return text
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class OutputError(HarnessError):
    """A file or directory harness has to write cannot be: read-only, under a file, disk full."""

    # What a `harness` run can do instead; other commands name their own option.
    INSTEAD = "write elsewhere: hydra.run.dir=DIR (a sweep: hydra.sweep.dir=DIR)"

    def __init__(self, err: OSError, path: object = None, instead: str = INSTEAD) -> None:
        name = path if path is not None else err.filename
        full = err.errno in _NO_SPACE
        self.exit_status = FAILED_STATUS if full else CONFIG_STATUS
        if full:
            fix = f"free space on that disk (or raise the quota), or {instead}"
        elif err.errno in (errno.ENOTDIR, errno.EEXIST):
            fix = f"a part of that path is a file, not a directory; {instead}"
        else:
            fix = f"make it writable, or {instead}"
        super().__init__(f"cannot write {os.path.abspath(str(name)) if name else 'a file'}:"
                         f" {err.strerror or err}. Fix: {fix}")


_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST, errno.EISDIR)


def output_error(err: BaseException, path: object = None,
                 instead: str = OutputError.INSTEAD) -> OutputError | None:
    """The OutputError for an OSError in `err` or its causes that says a path cannot be
    written (`path`: when the error does not name it), else None."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OutputError):
            return seen
        if isinstance(seen, OSError) and (
                seen.errno in _NO_SPACE or (seen.errno in _UNWRITABLE and (seen.filename or path))):
            return OutputError(seen, path, instead)
        seen = seen.__cause__ or seen.__context__
    return None
