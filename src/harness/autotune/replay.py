"""A sweep directory read back into a Search: autotune_space.json's search, its job directories
answering the waves again, so the same decisions follow; where they stop, it stops, interrupted.
`drive` is the one loop of waves, for the sweeper (jobs launched) and the replay (jobs read back)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.autotune.knowledge import Wave
from harness.autotune.reading import elapsed, outcome_of
from harness.autotune.search import Search
from harness.autotune.settings import Settings
from harness.autotune.space import ABSENT, Candidate, GlobalBatch, Key, Space
from harness.config.overrides import AUTOTUNE_STAGE, ROUND_KEY, parse_overrides
from harness.errors import HarnessError
from harness.reports.files import write_json
from harness.result.jobs import JobResult, read_job
from harness.result.store import job_dirs

SPACE_FILE = "autotune_space.json"  # written when the sweep starts
SUMMARY_FILE = "autotune.json"  # written after every wave, and rebuilt at the end
SPACE_SCHEMA = 1


@dataclass
class Setup:
    """What the sweep searched and how: autotune_space.json."""

    space: Space
    settings: Settings
    fixed: list[str] = field(default_factory=list)  # the command's other overrides
    started_at: float = 0.0  # seconds since the epoch
    notes: list[str] = field(default_factory=list)
    launcher: str | None = None

    def write(self, sweep_dir: Path) -> Path:
        return write_json(Path(sweep_dir) / SPACE_FILE, {
            "schema_version": SPACE_SCHEMA, "space": [k.as_dict() for k in self.space.keys],
            "global_batch": self.space.global_batch.as_dict() if self.space.global_batch else None,
            "settings": self.settings.as_dict(), "fixed": self.fixed,
            "started_at": self.started_at, "notes": self.notes, "launcher": self.launcher})

    @classmethod
    def read(cls, sweep_dir: Path) -> Setup:
        path = Path(sweep_dir) / SPACE_FILE
        try:
            raw = json.loads(path.read_text())
            return cls(Space(tuple(Key.from_dict(k) for k in raw["space"]),
                             GlobalBatch.from_dict(raw.get("global_batch"))),
                       Settings.from_mapping(raw["settings"]),
                       list(raw.get("fixed") or []), float(raw.get("started_at") or 0.0),
                       list(raw.get("notes") or []), raw.get("launcher"))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise HarnessError(f"{path}: not an autotune space ({err}). Fix: harness-report"
                               " rebuilds the table without it; the verdict needs it") from None


def drive(search: Search, setup: Setup, answer: Callable[[Wave], Sequence[Path | JobResult] | None],
          after_wave: Callable[[], None] = lambda: None) -> None:
    """The search from its start, each wave answered by `answer` with its jobs in the wave's order
    (launched, or read back), until it ends or `answer` has none (None); `after_wave` after each."""
    wave = search.start()
    while wave is not None and (done := answer(wave)) is not None:
        outcomes = [outcome_of(d, setup.settings.objective) for d in done]
        ended = [*(r.outcome for r in search.records), *outcomes]
        wave = search.advance(outcomes, elapsed(setup.started_at, ended), [d.name for d in done])
        after_wave()


def replay(sweep_dir: Path) -> tuple[Search, Setup]:
    """The sweep's search, its waves answered by its job directories (by candidate, stage, round)."""
    setup = Setup.read(sweep_dir)
    jobs: dict[tuple[Candidate, str, int], list[JobResult]] = {}
    for ran in (read_job(job_dir)[0] for job_dir in job_dirs(sweep_dir)):
        typed = parse_overrides(ran.overrides)  # as harness.autotune.job.overrides wrote them
        if (stage := typed.get(AUTOTUNE_STAGE)) is not None:  # else a job of another sweep
            candidate = Candidate(tuple((k.name, typed.get(k.name.lstrip("+~"), ABSENT))
                                        for k in setup.space.keys))
            jobs.setdefault((candidate, stage, int(typed.get(ROUND_KEY, "0"))), []).append(ran)
    search = Search(setup.space, setup.settings)

    def on_disk(wave: Wave) -> list[JobResult] | None:  # a wave's jobs differ in (candidate, stage, round)
        keys = [(job.candidate, job.stage, job.round) for job in wave.jobs]
        if all(jobs.get(key) for key in keys):
            return [jobs[key].pop(0) for key in keys]
        search.interrupt(f"the jobs on disk end at stage {wave.stage} (the sweep was"
                         " interrupted, or is still running)")
        return None

    drive(search, setup, on_disk)
    return search, setup
