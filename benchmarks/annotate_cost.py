"""Cost per call of `harness.annotate`, switched off and switched on.

Every variant runs the same empty body; the figures are nanoseconds per call
(median over interleaved rounds) and ratios to calling an empty function,
measured in the same process:

    python benchmarks/annotate_cost.py [--rounds 15] [--number 200000]

`with contextlib.nullcontext()` is the floor for any with-block that does
nothing. "off" is the cost a user pays for leaving the marks in; "on" is what a range
costs while a preset has switched record_function ranges on, with no torch
profiler recording and with one recording (the cost inside a pytorch preset).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import timeit

import torch

from harness.instrument import switches
from harness.instrument.annotate import annotate
from harness.instrument.switches import STATE


def empty() -> None:
    pass


@annotate("bench.decorated")
def decorated() -> None:
    pass


VARIANTS = {
    "empty function call (baseline)": "empty()",
    "attribute check (if STATE.on)": "if STATE.on: pass",
    "with nullcontext(): (floor)": "with contextlib.nullcontext(): pass",
    "with annotate(name): (block)": "with annotate('bench.block'): pass",
    "@annotate function call": "decorated()",
}


def measure(number: int, rounds: int) -> dict[str, float]:
    """Median ns per call of every variant, rounds interleaved so drift hits all alike."""
    names = {**globals(), "STATE": STATE, "contextlib": contextlib, "annotate": annotate}
    timers = {label: timeit.Timer(stmt, globals=names) for label, stmt in VARIANTS.items()}
    samples: dict[str, list[float]] = {label: [] for label in VARIANTS}
    for _ in range(rounds):
        for label, timer in timers.items():
            samples[label].append(timer.timeit(number) / number * 1e9)
    return {label: statistics.median(values) for label, values in samples.items()}


def show(title: str, figures: dict[str, float]) -> None:
    baseline = figures["empty function call (baseline)"]  # measured in the same rounds
    print(f"\n{title}")
    print(f"  {'variant':34s} {'ns/call':>10s} {'x empty call':>13s}")
    for label, ns in figures.items():
        print(f"  {label:34s} {ns:10.1f} {ns / baseline:13.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (median taken)")
    parser.add_argument("--number", type=int, default=200_000, help="calls per round, switched off")
    args = parser.parse_args()
    print(f"torch {torch.__version__}; {args.rounds} interleaved rounds, median ns per call")

    switches.reset()
    off = measure(args.number, args.rounds)
    show("switched off (the default; what leaving the marks in costs)", off)

    on_number = max(args.number // 20, 1000)  # ranges cost microseconds: fewer calls suffice
    with switches.enabled("record_function"):
        on_idle = measure(on_number, args.rounds)
        show("switched on, no torch profiler recording", on_idle)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            on_recording = measure(on_number // 4, args.rounds)
        show("switched on, torch.profiler recording (CPU activity)", on_recording)


if __name__ == "__main__":
    main()
