"""The speed preset's cautions (`warmup_swallowed`, `thin`, `contended`, `noisy`), each a
result.json flag said in one line with what to do (docs/presets/speed.md)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from harness.measured import MAD_TO_SD

log = logging.getLogger("harness.profilers.speed")
NOISY_FIX = ("a quieter machine or more steps; repeat=3 shows the spread, reports/"
             "speed_steps.csv the slow steps (the first ones: more profiler.speed.warmup_steps)")
CONTENDED_FIX = "rerun on a quiet machine (top shows who else runs)"


def phase_word(phase: str) -> str:
    return "training" if phase == "train" else phase


def robust_cv(figures: dict[str, Any]) -> float | None:
    """1.4826 x MAD / median of the steps; None without the figures."""
    mad, median = figures.get("mad_step_s"), figures.get("median_step_s")
    if mad is None or not median:
        return None
    return MAD_TO_SD * mad / median


@dataclass(frozen=True)
class Cautions:
    """The thresholds in force (conf/profiler/speed.yaml)."""

    warmup_steps: int
    min_measured_steps: int
    contended_above: float
    noisy_above: float
    noisy_mean_over_median: float

    def noise(self, figures: dict[str, Any]) -> dict[str, Any]:
        """The phase's step spread and `noisy` (None where steps were not timed: sync=window)."""
        cv = robust_cv(figures)
        mean, median = figures.get("seconds_per_iteration"), figures.get("median_step_s")
        skew = mean / median if mean is not None and median else None
        noisy = None if cv is None or skew is None else (
            cv > self.noisy_above or skew > self.noisy_mean_over_median)
        return {"robust_cv": cv, "mean_over_median": skew, "noisy": noisy}

    def flags(self, phases: dict[str, dict[str, Any]]) -> list[str]:
        """result.json's flags for the phases' figures, each said in one line."""
        found: list[str] = []
        for phase, figures in phases.items():
            if figures["measured_steps"] == 0:
                found.append(f"warmup_swallowed:{phase}")
                log.warning("speed: all %d %s steps were warm-up (profiler.speed.warmup_steps=%d):"
                            " no %s figures. Fix: lower warmup_steps or run more %s batches",
                            figures["warmup_steps"], phase, self.warmup_steps, phase, phase)
                continue
            if figures["thin"]:
                found.append(f"thin:{phase}")
                log.info("speed: %s figures rest on %d measured steps, fewer than"
                         " profiler.speed.min_measured_steps=%d: read them as rough (thin)",
                         phase, figures["measured_steps"], self.min_measured_steps)
            if (figures.get("contention") or {}).get("contended"):
                found.append(f"contended:{phase}")
                log.info("%s", self.contended_line(phase, figures["contention"]))
            if figures.get("noisy"):
                found.append(f"noisy:{phase}")
                log.info("speed: %s steps vary: %s: read its figures as rough (result.json flags: noisy:%s)."
                         " Fix: %s", phase, " and ".join(self.noise_said(figures)), phase, NOISY_FIX)
        # counters this system lacks: said once, never read as a quiet machine
        missing = sorted({path for figures in phases.values()
                          for path in (figures.get("contention") or {}).get("unknown", [])})
        if missing:
            log.info("speed: contention not fully measured: this system has no %s, so the"
                     " shares that need it are null and a phase is flagged contended only"
                     " where the counters it has show it", " and no ".join(missing))
        return found

    def contended_line(self, phase: str, c: dict[str, Any]) -> str:
        seen = []
        if c.get("other_cpu_share") is not None and c.get("basis") != "run_delay":
            seen.append(f"other processes used {c['other_cpu_share']:.0%} of the {c['cpus']:g}"
                        " CPU(s) this run may use")
        if c.get("run_delay_share") is not None:
            quota = f" under a quota of {c['cpus']:g} CPU(s)" if c.get("basis") == "run_delay" else ""
            seen.append(f"its threads waited for a CPU {c['run_delay_share']:.0%} of their"
                        f" runnable time{quota}")
        if c.get("gpu_contended"):
            seen.append(f"other processes used {c['gpu_other_sm_share']:.0%} of the GPU's SM time")
        return (f"speed: {phase} was contended: {' and '.join(seen)} ({c['window_s']:.1f} s measured;"
                f" contended_above={self.contended_above:g}), so its figures measure the machine as much as"
                f" the run (result.json flags: contended:{phase}). Fix: {CONTENDED_FIX}")

    def noise_said(self, figures: dict[str, Any]) -> list[str]:
        """What made the phase noisy, in words (for the speed line and diagnose's finding)."""
        said = []
        cv, skew = figures.get("robust_cv"), figures.get("mean_over_median")
        if cv is not None and cv > self.noisy_above:
            said.append(f"they spread {cv:.0%} around the median (1.4826 x MAD / median;"
                        f" noisy_above={self.noisy_above:g})")
        if skew is not None and skew > self.noisy_mean_over_median:
            said.append(f"the mean is {skew:.1f}x the median: a few slow steps hold much of"
                        f" the time (noisy_mean_over_median={self.noisy_mean_over_median:g})")
        return said
