"""The diagnose preset's speed-of-light passes: the input pipeline alone, the model alone.

- loader alone: the phase's dataloader iterated for K batches, each moved to the device
  as Lightning moves it (`strategy.batch_to_device`): what the input pipeline can deliver.
- model alone: K steps of the module's own step on one batch kept on the device, with no
  input pipeline and no Lightning loop: forward + backward + the optimizer's step for
  training (the module's `training_step` and its first optimizer), `predict_step` under
  `torch.inference_mode` for inference, both in the run's precision context.

They run after the phase was measured, on the same objects, and leave them as they were:
the model's and optimizer's state are copied to the CPU before and loaded back after, the
RNG states are restored, `self.log` is silenced for the pass. Clocks are read after a
device synchronise on CUDA; the first `warmup` steps of each pass are left out.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class PassResult:
    step_s: float | None  # median seconds per step (batch, for the loader), None: not run
    steps: int  # steps timed
    examples: int | None  # examples per batch
    note: str | None = None  # why it did not run, or what to know
    flops: int | None = None  # FLOPs of one step (model-alone passes that counted them)

    def examples_per_second(self) -> float | None:
        if self.step_s is None or not self.examples or self.step_s <= 0:
            return None
        return self.examples / self.step_s


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _timed(step: Callable[[], Any], device: torch.device, steps: int, warmup: int) -> list[float]:
    times = []
    for index in range(warmup + steps):
        start = _clock(device)
        step()
        if index >= warmup:
            times.append(_clock(device) - start)
    return times


def _cpu_copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _cpu_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cpu_copy(v) for v in value)
    return value


@contextlib.contextmanager
def state_restored(module: torch.nn.Module, optimizers: list[Any]) -> Iterator[None]:
    """Copy the model's and optimizers' state and the RNGs; put them back afterwards."""
    model_state = _cpu_copy(module.state_dict())
    optimizer_states = [_cpu_copy(o.state_dict()) for o in optimizers]
    cpu_rng = torch.random.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    was_training = module.training
    try:
        yield
    finally:
        module.load_state_dict(model_state)
        for optimizer, state in zip(optimizers, optimizer_states, strict=True):
            optimizer.load_state_dict(state)
            optimizer.zero_grad(set_to_none=True)
        torch.random.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        module.train(was_training)


@contextlib.contextmanager
def silent_logging(module: Any) -> Iterator[None]:
    """`self.log` / `self.log_dict` do nothing inside the block: outside Lightning's loop
    they would raise, and the pass's values are not the run's."""
    module.log = module.log_dict = lambda *args, **kwargs: None
    try:
        yield
    finally:
        del module.log, module.log_dict


def loader_alone(trainer: Any, loader: Any, steps: int, warmup: int) -> PassResult:
    """Seconds per batch of `loader` alone, device transfer included."""
    from harness.profilers.speed import count_examples

    if loader is None or isinstance(loader, (list, dict)) and len(loader) != 1:
        return PassResult(None, 0, None, "loader pass skipped: none, or several dataloaders")
    if isinstance(loader, (list, dict)):
        loader = next(iter(loader.values() if isinstance(loader, dict) else loader))
    device = trainer.strategy.root_device
    iterator = iter(loader)
    times: list[float] = []
    examples = None
    for index in range(warmup + steps):
        start = _clock(device)
        try:
            batch = next(iterator)
        except StopIteration:
            break
        trainer.strategy.batch_to_device(batch)
        elapsed = _clock(device) - start
        examples = count_examples(batch) or examples
        if index >= warmup:
            times.append(elapsed)
    note = None if times else "loader pass: the loader ran out within its warm-up"
    return PassResult(statistics.median(times) if times else None, len(times), examples, note)


def _loss(output: Any) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor):
        return output["loss"]
    return None


def training_step_fn(trainer: Any, module: Any, batch: Any) -> Callable[[], Any]:
    """One training step on `batch`: the module's training_step, backward, optimizer step."""
    optimizers = list(trainer.optimizers)
    precision = trainer.precision_plugin

    def step() -> None:
        with precision.train_step_context():
            loss = _loss(module.training_step(batch, 0))
        if module.automatic_optimization and loss is not None:
            loss.backward()
            optimizers[0].step()
            optimizers[0].zero_grad(set_to_none=True)

    return step


def forward_backward_fn(trainer: Any, module: Any, batch: Any) -> Callable[[], Any]:
    """Forward + backward of one training step, no optimizer step (what FLOPs count)."""
    precision = trainer.precision_plugin

    def step() -> None:
        with precision.train_step_context():
            loss = _loss(module.training_step(batch, 0))
        if loss is not None:
            loss.backward()

    return step


def predict_step_fn(trainer: Any, module: Any, batch: Any) -> Callable[[], Any]:
    precision = trainer.precision_plugin

    def step() -> None:
        with torch.inference_mode(), precision.predict_step_context():
            module.predict_step(batch, 0)

    return step


def model_alone(trainer: Any, module: Any, step: Callable[[], Any], batch: Any, steps: int,
                warmup: int, training: bool,
                counted: Callable[[], Any] | None = None) -> PassResult:
    """Seconds per step of `step` on one resident batch, the module's state restored after.

    `counted`, when given, runs once first, untimed, under torch's FLOP counter.
    """
    from harness.errors import first_line
    from harness.profilers.flops import count_flops
    from harness.profilers.speed import count_examples

    device = trainer.strategy.root_device
    no_sync = getattr(trainer.strategy.model, "no_sync", None)  # DDP: no gradient all-reduce
    optimizers = list(trainer.optimizers) if training else []
    flops, note = None, None
    with (state_restored(module, optimizers), silent_logging(module),
          no_sync() if no_sync is not None else contextlib.nullcontext()):
        module.train(training)
        if counted is not None:
            flops, note = count_flops(counted)
        try:
            times = _timed(step, device, steps, warmup)
        except Exception as err:
            return PassResult(None, 0, count_examples(batch),
                              f"model-alone pass failed: {first_line(err)}", flops)
    return PassResult(statistics.median(times), len(times), count_examples(batch), note, flops)
