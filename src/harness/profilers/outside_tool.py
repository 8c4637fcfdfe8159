"""What the presets that drive an outside tool (py-spy, nsys) do when the tool cannot run."""

from __future__ import annotations

import sys

from harness.errors import HarnessError

ON_MISSING = ("warn", "error")  # the choices of profiler.<preset>.on_missing


def tool_unavailable(preset: str, tool: str, message: str, on_missing: str) -> None:
    """Stop the run (`on_missing: error`) or say in one line that it goes on without `tool`."""
    if on_missing == "error":
        raise HarnessError(f"profiler={preset}: {message}")
    print(
        f"harness: warning: profiler={preset}: {message}; the run goes on without {tool}"
        f" (profiler.{preset}.on_missing=error stops it instead)",
        file=sys.stderr,
        flush=True,
    )
