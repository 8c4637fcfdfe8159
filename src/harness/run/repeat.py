"""`repeat=N`: what result.json says about N measurements of the same point in one job.

Each repetition builds a fresh model, data module and trainer from the same
config and seed, after `isolation.start_clean` (see harness.run.job). result.json
then holds one consistent summary in `metrics` (harness.measured.summarize: medians,
each phase's examples/s derived from its median s/it), and every repetition's metrics
plus their min and max under `repeats`. In a sweep, repeats run as rounds of jobs
instead (hydra_plugins.harness_launcher.rounds_sweeper).
"""

from __future__ import annotations

from typing import Any

from harness.measured import summarize
from harness.result.schema import Repeats


def repeats_record(requested: int, runs: list[dict[str, Any]]) -> tuple[dict[str, Any], Repeats]:
    """(metrics for result.json, its `repeats` block) from each repeat's metrics."""
    median, low, high = summarize(runs)
    return median, Repeats(
        requested=requested,
        completed=len(runs),
        what="metrics: medians over the runs, each phase's examples_per_second = its examples"
        " per iteration / its median seconds_per_iteration; min and max: their range;"
        " diagnosis: from those medians and the last run's passes; reports/: the last run's",
        min=low,
        max=high,
        per_repeat=runs,
    )
