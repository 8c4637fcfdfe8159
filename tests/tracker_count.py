"""Test helper: a Hydra callback that counts the MLflow tracker processes its process starts
(harness.tracking.tracker.Tracker) and writes the count to a file as the process exits
(tests/test_tracker_process.py). Hydra builds every callback before it calls any, so the count
starts before the parent run's tracker.

Use: `+hydra.callbacks.count._target_=tracker_count.CountTrackers
+hydra.callbacks.count.path=/abs/file`
"""

from __future__ import annotations

import atexit
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from harness.tracking import tracker


class CountTrackers(Callback):
    def __init__(self, path: str) -> None:
        started: list[str] = []
        original = tracker.Tracker.__init__

        def counted(self: tracker.Tracker, uri: str, *args: Any) -> None:
            started.append(uri)
            original(self, uri, *args)

        tracker.Tracker.__init__ = counted  # type: ignore[method-assign]
        atexit.register(lambda: Path(path).write_text(str(len(started))))
