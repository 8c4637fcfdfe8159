"""The top-level knobs a sweep varies, checked and normalised before a run.

Checks are explicit rather than a structured-config schema because `compile`
is either a bool or a mode string, a union OmegaConf cannot type.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from harness.config.checks import boolean, non_negative_int, positive_int
from harness.config.overrides import ROUND_KEY
from harness.errors import ConfigError

# Our short names and Lightning's own spellings, mapped to Lightning's setting.
PRECISIONS: dict[str, str] = {
    "fp32": "32-true",
    "32": "32-true",
    "32-true": "32-true",
    "fp16": "16-mixed",
    "16": "16-mixed",
    "16-mixed": "16-mixed",
    "bf16": "bf16-mixed",
    "bf16-mixed": "bf16-mixed",
    "16-true": "16-true",
    "bf16-true": "bf16-true",
    "fp64": "64-true",
    "64": "64-true",
    "64-true": "64-true",
}

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
MODES = ("train", "inference", "both")


@dataclass(frozen=True)
class Knobs:
    """The validated knobs of one run."""

    batch_size: int
    precision: str  # as the user asked for it
    lightning_precision: str  # what is passed to Trainer(precision=...)
    compile: str | bool  # torch.compile mode; False when off (result.json records false)
    compile_module: str
    mode: str
    seed: int
    repeat: int  # measurements of this point (see harness.run.repeat)
    check_knobs: bool = True  # what ran must match the knobs the user set (harness.run.observe)

    @property
    def trains(self) -> bool:
        return self.mode in ("train", "both")

    @property
    def infers(self) -> bool:
        return self.mode in ("inference", "both")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_precision(value: Any) -> str:
    """Map a precision knob to Lightning's precision string."""
    key = str(value).strip().lower()
    if key not in PRECISIONS:
        raise ConfigError(
            "precision", value, "one of " + ", ".join(PRECISIONS), "precision=bf16"
        )
    return PRECISIONS[key]


def parse_compile(value: Any) -> str | bool:
    """Map the compile knob to a torch.compile mode, or False when off."""
    if value is None or value is False:
        return False
    if value is True:
        return "default"
    text = str(value).strip().lower()
    if text in ("false", "off", "none", "no"):
        return False
    if text in ("true", "on", "yes"):
        return "default"
    if text in COMPILE_MODES:
        return text
    raise ConfigError(
        "compile", value, "false, true or a torch.compile mode: " + ", ".join(COMPILE_MODES),
        "compile=true",
    )


def read_knobs(cfg: Any) -> Knobs:
    """Validate the top-level knobs of a composed config."""
    batch_size = positive_int("batch_size", cfg.get("batch_size"), 32)
    precision = cfg.get("precision")
    lightning_precision = parse_precision(precision)
    mode = cfg.get("mode")
    if mode not in MODES:
        raise ConfigError("mode", mode, "one of " + ", ".join(MODES), "mode=both")
    seed = cfg.get("seed")
    # numpy's generators take seeds in [0, 2**32): Lightning seeds numpy with it.
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ConfigError("seed", seed, "an integer from 0 to 4294967295", "seed=0")
    compile_module = cfg.get("compile_module")
    if not isinstance(compile_module, str) or not compile_module:
        raise ConfigError(
            "compile_module", compile_module, "the attribute name of the network", "compile_module=net"
        )
    return Knobs(
        batch_size=batch_size,
        precision=str(precision),
        lightning_precision=lightning_precision,
        compile=parse_compile(cfg.get("compile")),
        compile_module=compile_module,
        mode=mode,
        seed=seed,
        repeat=positive_int("repeat", cfg.get("repeat", 1), 3, "a positive integer (runs of each point)"),
        check_knobs=boolean("check_knobs", cfg.get("check_knobs", True)),
    )


# Trainer arguments harness fills in from its own keys: set there, they would be overwritten.
OWNED_TRAINER_KEYS = {
    "precision": "the top-level knob: precision=bf16",
    "logger": "the logger group: logger=mlflow or logger=none",
    "profiler": "the profiler group: profiler=[speed,simple]",
}


def check_trainer_keys(cfg: Any) -> None:
    """Refuse trainer.precision / logger / profiler: harness sets them from its own keys;
    and a strategy whose ranks run where harness cannot measure them (check_strategy)."""
    trainer = cfg.get("trainer")
    if not hasattr(trainer, "keys"):
        return
    for key, instead in OWNED_TRAINER_KEYS.items():
        if key in trainer:
            raise ConfigError(f"trainer.{key}", trainer.get(key),
                              f"nothing: harness sets it from {instead.split(':')[0]}",
                              f"remove trainer.{key} and use {instead}")
    check_strategy(trainer.get("strategy"))
    check_accelerator(trainer.get("accelerator"))


def check_accelerator(accelerator: Any) -> None:
    """Refuse an accelerator this machine does not have (`trainer.accelerator=gpu` on a CPU
    machine) before anything is built: Lightning would say "No supported gpu backend found!"
    once the Trainer is built, without a fix. Names Lightning does not know are left to it."""
    if not isinstance(accelerator, str) or accelerator.lower() in ("auto", "cpu"):
        return
    from lightning.pytorch.accelerators import AcceleratorRegistry

    def has(name: str) -> bool:
        return name in AcceleratorRegistry and bool(
            AcceleratorRegistry[name]["accelerator"].is_available())

    name = accelerator.lower()
    if name not in AcceleratorRegistry and name != "gpu":
        return
    if has("cuda") or has("mps") if name == "gpu" else has(name):
        return
    here = [n for n in AcceleratorRegistry if has(n)]
    raise ConfigError(
        "trainer.accelerator", accelerator,
        f"an accelerator this machine has (here: {', '.join(here) or 'none'})",
        "trainer.accelerator=auto (or cpu), or run on a machine with that device")


# Start methods of Lightning's multiprocessing launcher (ddp_spawn, ddp_fork, ddp_notebook):
# fit and predict run in processes it starts, with copies of the presets, so the presets of
# this process see no step and the run would end `ok` without a figure.
UNMEASURABLE_START_METHODS = ("spawn", "fork", "forkserver")


def check_strategy(strategy: Any) -> None:
    """Refuse a strategy that runs the fit in processes started by multiprocessing: a name
    Lightning registers with such a start_method (its StrategyRegistry, any plugin's names
    included), or a strategy node given one (`start_method: spawn`)."""
    if isinstance(strategy, str):
        from lightning.pytorch.strategies import StrategyRegistry

        # Its items are {"strategy": class, "init_params": {...}}; its get() would build one.
        # Lightning looks the name up in lower case.
        name = strategy.lower()
        entry = StrategyRegistry[name] if name in StrategyRegistry else {}  # noqa: SIM401
        start_method, shown = entry.get("init_params", {}).get("start_method"), strategy
    elif hasattr(strategy, "get"):
        start_method, shown = strategy.get("start_method"), strategy.get("_target_")
    else:
        return
    if start_method in UNMEASURABLE_START_METHODS:
        raise ConfigError(
            "trainer.strategy", shown,
            f"a strategy harness can measure: start_method={start_method} runs the fit in"
            " processes Lightning starts with multiprocessing, whose steps the presets do not"
            " see", "trainer.strategy=ddp (each rank a process of its own; harness gathers"
            " their figures)")


def sweep_round(cfg: Any) -> int | None:
    """The round of a repeated sweep this job belongs to (set by the rounds sweeper), or None."""
    value = cfg.get(ROUND_KEY)
    return None if value is None else non_negative_int(ROUND_KEY, value)
