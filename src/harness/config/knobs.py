"""The top-level knobs, checked and normalised; what the trainer keys and the machine allow."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from annotated_types import Ge, Lt, MinLen
from omegaconf import DictConfig, OmegaConf

from harness.config.checks import NonNegativeInt, PositiveInt, PositiveNumber, Share, check, read_fields
from harness.config.global_batch import accumulation, world_size
from harness.config.overrides import ROUND_KEY
from harness.errors import ConfigError
from harness.judge import TOLERANCE

# Lightning's precision setting for each spelling: its own (16-mixed, 16) and ours (fp16).
PRECISIONS: dict[str, str] = {name: setting for setting, names in {
    "32-true": ("fp32", "32"), "16-mixed": ("fp16", "16"), "bf16-mixed": ("bf16",), "16-true": (),
    "bf16-true": (), "64-true": ("fp64", "64")}.items() for name in (*names, setting)}
FP16 = ("fp16", "16", "16-mixed")  # Lightning runs these as bf16-mixed on a CPU
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
OFF, ON = ("false", "off", "none", "no"), ("true", "on", "yes")  # None, False, True as typed
MODES = ("train", "inference", "both")
AUTO = "auto"  # repeat=auto: rounds of a sweep until decided; sweep.threads=auto
MIN_ROUNDS = 6  # the pairs a paired 95 % interval needs (harness.judge.signed_rank_cut)


@dataclass(frozen=True)
class SweepSettings:
    """The `sweep:` settings of conf/config.yaml (docs/sweeps.md), each checked against its hint."""

    max_rounds: Annotated[int, Ge(MIN_ROUNDS)] = 30
    max_minutes: PositiveNumber | None = 15
    decide_within: Share = TOLERANCE
    threads: Literal["auto"] | PositiveInt | None = AUTO

    @classmethod
    def read(cls, config: Any) -> SweepSettings:
        node = config.get("sweep")
        raw = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else None
        return read_fields(cls, raw, "sweep.", "conf/config.yaml")


def repeat_of(config: Any, typed: Any = None) -> int | str:
    """`repeat`: `typed` (the command line's), else the config's; AUTO or N >= 1."""
    value = typed if typed is not None else config.get("repeat", 1)
    if str(value).strip().lower() == AUTO:
        return AUTO
    return check("repeat", value, PositiveInt | Literal["auto"], "3")


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
    repeat: int | str  # measurements of this point (run.measure), or AUTO (a sweep's rounds)
    check_knobs: bool = True  # what ran must match the knobs the user set (harness.run.observe)
    global_batch_size: int | None = None  # examples per optimizer step, all ranks (None: unset)
    accumulation: int | None = None  # the trainer.accumulate_grad_batches it sets (config.global_batch)
    # False, True (the model's repeated blocks) or class names (harness.run.checkpointing)
    activation_checkpointing: bool | tuple[str, ...] = False
    scaling: str | None = None  # scaling.mode: weak | strong (a scaling study), None: none

    @property
    def trains(self) -> bool:
        return self.mode in ("train", "both")

    @property
    def infers(self) -> bool:
        return self.mode in ("inference", "both")


def parse_compile(value: Any) -> str | bool:
    """The torch.compile mode of the compile knob, or False when off."""
    text = check("compile", str(value).strip().lower(), Literal[(*OFF, *ON, *COMPILE_MODES)], "true")
    return False if text in OFF else "default" if text in ON else text


def parse_checkpointing(value: Any) -> bool | tuple[str, ...]:
    """activation_checkpointing: False, True, or the class names to wrap (a bare name is a list of one)."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in (*OFF, *ON):
        return value.strip().lower() in ON
    names = [value] if isinstance(value, str) else list(value) if isinstance(value, Iterable) else value
    return tuple(check("activation_checkpointing", names,
                       Annotated[list[Annotated[str, MinLen(1)]], MinLen(1)], "[Block]"))


def read_knobs(cfg: Any) -> Knobs:
    """Validate the top-level knobs of a composed config."""
    precision = str(cfg.get("precision"))
    batch_size = check("batch_size", cfg.get("batch_size"), PositiveInt, 32)
    global_batch = check("global_batch_size", cfg.get("global_batch_size"), PositiveInt | None, 128)
    return Knobs(
        batch_size=batch_size, precision=precision,
        lightning_precision=PRECISIONS[check("precision", precision.strip().lower(),
                                             Literal[tuple(PRECISIONS)], "bf16")],
        compile=parse_compile(cfg.get("compile")),
        compile_module=check("compile_module", cfg.get("compile_module"), Annotated[str, MinLen(1)], "net"),
        mode=check("mode", cfg.get("mode"), Literal[MODES], "both"),
        # numpy's generators take seeds in [0, 2**32): Lightning seeds numpy with it.
        seed=check("seed", cfg.get("seed"), Annotated[int, Ge(0), Lt(2**32)], 0),
        repeat=repeat_of(cfg),  # auto: a sweep's rounds (its sweeper gives each job repeat=1)
        check_knobs=check("check_knobs", cfg.get("check_knobs", True), bool, "true"),
        global_batch_size=global_batch, accumulation=accumulation(cfg, batch_size, global_batch),
        activation_checkpointing=parse_checkpointing(cfg.get("activation_checkpointing", False)),
        scaling=scaling_mode(cfg, global_batch))


def scaling_mode(cfg: Any, global_batch: int | None) -> str | None:
    """`scaling.mode`, checked against the global batch: strong holds one, weak grows it."""
    node = cfg.get("scaling")
    mode = check("scaling.mode", node.get("mode") if hasattr(node, "get") else None,
                 Literal["weak", "strong"] | None, "weak")
    if mode == "strong" and global_batch is None:
        raise ConfigError("scaling.mode", mode, "weak, or strong with global_batch_size set:"
                          " strong scaling holds the global batch as the ranks grow",
                          "global_batch_size=256 (a multiple of batch_size x every world size)")
    if mode == "weak" and global_batch is not None:
        raise ConfigError("scaling.mode", mode, "strong beside global_batch_size: weak scaling holds the"
                          " batch per rank and lets the global batch grow",
                          "scaling.mode=strong, or drop global_batch_size")
    return mode


# Trainer arguments harness fills in from its own keys: set there, they would be overwritten.
OWNED_TRAINER_KEYS = {"precision": "the top-level knob: precision=bf16",
                      "logger": "the logger group: logger=mlflow or logger=none",
                      "profiler": "the profiler group: profiler=[speed,simple]"}


def check_trainer_keys(cfg: Any) -> None:
    """Refuse trainer.precision / logger / profiler, an unmeasurable strategy, a missing accelerator."""
    trainer = cfg.get("trainer")
    if not hasattr(trainer, "keys"):
        return
    for key, instead in OWNED_TRAINER_KEYS.items():
        if key in trainer:
            raise ConfigError(f"trainer.{key}", trainer.get(key), f"nothing: harness sets it from"
                              f" {instead.split(':')[0]}", f"remove trainer.{key} and use {instead}")
    check_strategy(trainer.get("strategy"))
    check_accelerator(trainer.get("accelerator"))


def check_accelerator(accelerator: Any) -> None:
    """Refuse an accelerator this machine lacks (`gpu` on a CPU); unknown names are Lightning's."""
    name = accelerator.lower() if isinstance(accelerator, str) else "auto"
    if name in ("auto", "cpu"):
        return
    from lightning.pytorch.accelerators import AcceleratorRegistry

    def has(name: str) -> bool:
        return name in AcceleratorRegistry and bool(AcceleratorRegistry[name]["accelerator"].is_available())

    wanted = ("cuda", "mps") if name == "gpu" else (name,)
    if (name != "gpu" and name not in AcceleratorRegistry) or any(map(has, wanted)):
        return
    here = [n for n in AcceleratorRegistry if has(n)]
    raise ConfigError("trainer.accelerator", accelerator, f"an accelerator this machine has (here:"
                      f" {', '.join(here) or 'none'})", "trainer.accelerator=auto (or cpu), or run on a"
                      " machine with that device")


# Start methods (ddp_spawn, ddp_fork, ddp_notebook) whose fit runs in processes with copies of
# the presets: this process's presets see no step and the run would end `ok` without a figure.
UNMEASURABLE_START_METHODS = ("spawn", "fork", "forkserver")


def check_strategy(strategy: Any) -> None:
    """Refuse a strategy (a registered name or a node) with an UNMEASURABLE_START_METHODS."""
    if isinstance(strategy, str):
        from lightning.pytorch.strategies import StrategyRegistry

        # Its items are {"strategy": class, "init_params": {...}}; its get() would build one.
        name = strategy.lower()
        entry = StrategyRegistry[name] if name in StrategyRegistry else {}  # noqa: SIM401
        start_method, shown = entry.get("init_params", {}).get("start_method"), strategy
    elif hasattr(strategy, "get"):
        start_method, shown = strategy.get("start_method"), strategy.get("_target_")
    else:
        return
    if start_method in UNMEASURABLE_START_METHODS:
        raise ConfigError("trainer.strategy", shown, f"a strategy harness can measure: start_method="
                          f"{start_method} runs the fit in processes Lightning starts with multiprocessing,"
                          " whose steps the presets do not see", "trainer.strategy=ddp (each rank a process"
                          " of its own; harness gathers their figures)")


CODE_DIR_CHILD = "HARNESS_CODE_DIR_CHILD"  # set in the fresh process a code_dir job runs in


def code_dir_of(cfg: Any) -> Path | None:
    """The `code_dir` directory, resolved; None when unset. A ConfigError when not a directory."""
    value = cfg.get("code_dir")
    if value is None or value == "":
        return None
    path = Path(str(value)).expanduser()
    if not path.is_dir():
        raise ConfigError("code_dir", value, "a directory whose code the job imports first",
                          "code_dir=../base (e.g. git worktree add ../base main), or drop it")
    return path.resolve()


def sweep_round(cfg: Any) -> int | None:
    """The round of a repeated sweep this job belongs to, or None."""
    value = cfg.get(ROUND_KEY)
    return None if value is None else check(ROUND_KEY, value, NonNegativeInt, 2)


@dataclass(frozen=True)
class Here:
    """What a sweep knows of the machine its jobs run on (`here`: this one)."""

    here: bool = True
    cuda: bool = False
    cxx: bool = True
    cpus: int | None = None


def jobs_run_here(config: Any) -> bool:
    """Whether a sweep's jobs run on this machine: under every launcher but a SLURM one."""
    return "slurm" not in str(OmegaConf.select(config, "hydra.launcher._target_", default="")).lower()


def cuda_here(config: Any) -> bool:
    """Whether the jobs' trainer would run on CUDA on this machine (imports torch)."""
    import torch

    accelerator = str(config.get("trainer", {}).get("accelerator") or "auto")
    return torch.cuda.is_available() and accelerator in ("auto", "gpu", "cuda")


def runnable(key: str, values: Iterable[str], here: Here) -> tuple[list[str], str]:
    """(the values of `key` the jobs' device runs, why not the others)."""
    if key == "precision" and here.here and not here.cuda:
        return [v for v in values if str(v).lower() not in FP16], "fp16 runs only on CUDA"
    if key == "compile" and here.here and not here.cxx:
        return [v for v in values if str(v).lower() in OFF], ("no C++ compiler on PATH, which"
                                                              " TorchInductor needs")
    return list(values), ""


def check_ranks_fit(cfg: Any, scaling: str | None) -> None:
    """A scaling study's (`scaling`: its Knobs.scaling) ranks per node against the node the check runs
    on (a SLURM sweep's are checked on their own nodes): more GPU ranks than GPUs is a ConfigError; more
    CPU ranks than cores runs, said once (the ranks then share cores: their timings hold the contention)."""
    trainer = cfg.get("trainer") or {}
    if scaling is None or (not jobs_run_here(cfg) and "SLURM_JOB_ID" not in os.environ):
        return
    devices = (world_size(trainer) or 1) // max(int(trainer.get("num_nodes") or 1), 1)
    accelerator = str(trainer.get("accelerator") or "auto").lower()
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and cuda_here(cfg)):
        import torch

        if devices > (gpus := torch.cuda.device_count()):
            raise ConfigError("trainer.devices", trainer.get("devices"),
                              f"at most {gpus}: this node has {gpus} GPU(s), one a rank",
                              f"trainer.devices={gpus}, or hydra/launcher=slurm with more nodes")
        return
    from harness.contention import affinity

    if devices > (cores := len(affinity() or range(os.cpu_count() or 1))):
        logging.getLogger(__name__).warning(
            "trainer.devices=%s: %d CPU ranks on %d cores share them: their timings hold that contention"
            " (a scaling study on a CPU gives each rank a core of its own)", trainer.get("devices"), devices,
            cores)


def check_device(values: dict[str, list[str]], here: Here) -> None:
    """Refuse, before any job of a sweep, a swept value the jobs' device cannot run."""
    for key, expected, fix in (
            ("precision", "a precision this machine runs: it has no GPU, and {} (the jobs would be invalid)",
             "drop it, e.g. precision=fp32,bf16, or run the jobs on a GPU node (hydra/launcher=slurm)"),
            ("compile", "compile=false here: {}", "install g++ (or set CXX), or drop compile from the"
             " space")):
        kept, why = runnable(key, values.get(key, ()), here)
        refused = [v for v in values.get(key, ()) if v not in kept]
        if refused:
            raise ConfigError(key, refused[0], expected.format(why), fix)
