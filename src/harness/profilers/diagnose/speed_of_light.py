"""The diagnose preset's speed-of-light passes: the input pipeline alone, the model alone.

What each part of a step could do with nothing else running:

- loader alone: the phase's dataloader iterated, each batch moved to the device as
  Lightning moves it (`strategy.batch_to_device`); after the workers' prefetch buffer is
  drained, K batches (at least one per worker) are timed as one window: the rate the
  input pipeline keeps up, not how fast a full buffer empties.
- model alone: K steps of the module's own step on the loader pass's first batch, kept on
  the device, with no input pipeline and no Lightning loop: forward + backward + the
  optimizer's step for training (the module's `training_step` and its first optimizer),
  `predict_step` under `torch.inference_mode` for inference, both in the run's precision
  context.

They run after the phase was measured, on the same objects, and leave them as they were:
the model's and optimizer's state are copied to the CPU before and loaded back after, the
RNG states are restored (the caller wraps the loader pass in `rng_restored`), `self.log`
is silenced for the pass. The clock is the speed preset's (harness.profilers.step_timer.now);
the first `warmup` steps of each pass are left out. The model pass can also count one step's
FLOPs (harness.profilers.flops), once, untimed, before its timed steps.
"""

from __future__ import annotations

import contextlib
import random
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy
import torch

from harness.errors import first_line
from harness.profilers.flops import count_flops
from harness.profilers.preset import count_examples
from harness.profilers.step_timer import now


@dataclass
class PassResult:
    step_s: float | None  # median seconds per step (batch, for the loader), None: not run
    steps: int  # steps timed
    examples: int | None  # examples per batch
    note: str | None = None  # why it did not run, or what to know
    flops: int | None = None  # FLOPs of one step (model-alone passes that counted them)
    fastest_s: float | None = None  # the quickest and slowest timed step: the pass's noise
    slowest_s: float | None = None

    def examples_per_second(self) -> float | None:
        if self.step_s is None or not self.examples or self.step_s <= 0:
            return None
        return self.examples / self.step_s


def _timed(step: Callable[[], Any], device: torch.device, steps: int, warmup: int) -> list[float]:
    times = []
    for index in range(warmup + steps):
        start = now(device)
        step()
        if index >= warmup:
            times.append(now(device) - start)
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
def rng_restored() -> Iterator[None]:
    """Python's, numpy's and torch's CPU and CUDA RNG states as they were before the block:
    samplers and augmentations draw from any of them."""
    python_rng, numpy_rng = random.getstate(), numpy.random.get_state()
    cpu_rng = torch.random.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        random.setstate(python_rng)
        numpy.random.set_state(numpy_rng)
        torch.random.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


# Strategies whose state_dict() gathers every shard onto each rank.
SHARDED = ("FSDPStrategy", "DeepSpeedStrategy", "ModelParallelStrategy")
# The copy may take at most this share of the host memory available when it is made.
MAX_COPY_SHARE_OF_AVAILABLE = 0.5


def copy_refused(strategy: Any, module: torch.nn.Module, optimizers: list[Any],
                 available_bytes: int) -> str | None:
    """Why the model-alone pass must not copy the state it restores afterwards, or None."""
    sharded = [c.__name__ for c in type(strategy).__mro__ if c.__name__ in SHARDED]
    if sharded:
        return (f"under {sharded[0]} copying the state would gather every shard on every"
                " rank")
    tensors = [*module.parameters(), *module.buffers()]
    for optimizer in optimizers:
        tensors += [v for state in optimizer.state.values() for v in state.values()
                    if isinstance(v, torch.Tensor)]
    size = sum(t.numel() * t.element_size() for t in tensors)
    if size > MAX_COPY_SHARE_OF_AVAILABLE * available_bytes:
        return (f"its copy would take {size / 2**30:.1f} GiB, more than half of the"
                f" {available_bytes / 2**30:.1f} GiB of host memory available")
    return None


@contextlib.contextmanager
def state_restored(module: torch.nn.Module, optimizers: list[Any]) -> Iterator[None]:
    """Copy the model's and optimizers' state and the RNGs; put them back afterwards."""
    model_state = _cpu_copy(module.state_dict())
    optimizer_states = [_cpu_copy(o.state_dict()) for o in optimizers]
    was_training = module.training
    try:
        with rng_restored():
            yield
    finally:
        module.load_state_dict(model_state)
        for optimizer, state in zip(optimizers, optimizer_states, strict=True):
            optimizer.load_state_dict(state)
            optimizer.zero_grad(set_to_none=True)
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


def loader_alone(trainer: Any, loader: Any, steps: int, warmup: int) -> tuple[PassResult, Any]:
    """Seconds per batch of `loader` alone, device transfer included, and its first batch
    (on the device, for the model pass: the last one may be a short remainder; None when it
    gave none)."""
    if loader is None or isinstance(loader, (list, dict)) and len(loader) != 1:
        return PassResult(None, 0, None, "loader pass skipped: none, or several dataloaders"), None
    if isinstance(loader, (list, dict)):
        loader = next(iter(loader.values() if isinstance(loader, dict) else loader))
    device = trainer.strategy.root_device
    workers = getattr(loader, "num_workers", 0) or 0
    wanted = max(steps, workers)
    # Workers fill num_workers x prefetch_factor batches while the first one starts up; timed,
    # those would come back at once and make a slow pipeline look fast. A loader too short
    # for both keeps the batches it needs timed.
    buffered = workers * (getattr(loader, "prefetch_factor", None) or 2)
    drain = buffered + warmup
    total = _length(loader)
    notes = []
    if total is not None and total < drain + wanted:
        drain = max(total - wanted, 0)
        if drain < buffered:
            notes.append(f"loader pass: the loader has {total} batches, too few to leave its"
                         f" {buffered} prefetched out of the timing: its rate is optimistic")
    iterator = iter(loader)
    first = None

    def fetch() -> bool:
        nonlocal first
        try:
            batch = trainer.strategy.batch_to_device(next(iterator))
        except StopIteration:
            return False
        first = batch if first is None else first
        return True

    drained = 0
    while drained < drain and fetch():
        drained += 1
    timed = 0
    start = end = now(device)
    while timed < wanted and fetch():
        timed += 1
        end = now(device)  # not after a failed next(): ending shuts the workers down
    if not timed:
        notes.append(f"loader pass: the loader ran out after {drained} batches, before any was"
                     " timed")
    elif timed < wanted:
        notes.append(f"loader pass: the loader ran out after {timed} of {wanted} timed batches")
    examples = count_examples(first) if first is not None else None
    return PassResult((end - start) / timed if timed else None, timed, examples,
                      "; ".join(notes) or None), first


def _length(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:  # an iterable dataset without __len__
        return None


def _loss(output: Any) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor):
        return output["loss"]
    return None


def training_forward(trainer: Any, module: Any, batch: Any) -> Callable[[], torch.Tensor | None]:
    """The module's training_step on `batch` in the run's precision context; returns its loss
    (None: no loss to step on)."""
    precision = trainer.precision_plugin

    def forward() -> torch.Tensor | None:
        with precision.train_step_context():
            return _loss(module.training_step(batch, 0))

    return forward


def training_step_fn(trainer: Any, module: Any, batch: Any) -> Callable[[], None]:
    """One training step on `batch`: training_step, backward and the first optimizer's step.
    Under manual optimization training_step steps its optimizers itself."""
    optimizers = list(trainer.optimizers)
    forward = training_forward(trainer, module, batch)

    def step() -> None:
        loss = forward()
        if module.automatic_optimization and loss is not None:
            loss.backward()
            optimizers[0].step()
            optimizers[0].zero_grad(set_to_none=True)

    return step


def predict_step_fn(trainer: Any, module: Any, batch: Any) -> Callable[[], None]:
    precision = trainer.precision_plugin

    def step() -> None:
        with torch.inference_mode(), precision.predict_step_context():
            module.predict_step(batch, 0)

    return step


def _backward_of(loss: torch.Tensor | None) -> torch.Tensor:
    """What measure_flops calls backward on: the loss, or nothing to differentiate."""
    return loss if loss is not None else torch.zeros((), requires_grad=True)


def step_flops(trainer: Any, module: Any, batch: Any, training: bool
               ) -> tuple[int | None, str | None]:
    """(FLOPs of one step on `batch`, why not counted): forward + backward for training
    (under manual optimization, whatever training_step runs), predict_step for inference."""
    if not training:
        return count_flops(module, predict_step_fn(trainer, module, batch))
    forward = training_forward(trainer, module, batch)
    if not module.automatic_optimization:
        return count_flops(module, forward)
    return count_flops(module, forward, _backward_of)


def model_alone(trainer: Any, module: Any, step: Callable[[], Any], batch: Any, steps: int,
                warmup: int, training: bool, flops: bool = False) -> PassResult:
    """Seconds per step of `step` on one resident batch, the module's state restored after.

    With `flops`, one step's FLOPs are counted first, untimed (step_flops).
    """
    device = trainer.strategy.root_device
    no_sync = getattr(trainer.strategy.model, "no_sync", None)  # DDP: no gradient all-reduce
    optimizers = list(trainer.optimizers) if training else []
    counted, note = None, None
    with (state_restored(module, optimizers), silent_logging(module),
          no_sync() if no_sync is not None else contextlib.nullcontext()):
        module.train(training)
        if flops:
            counted, note = step_flops(trainer, module, batch, training)
        try:
            times = _timed(step, device, steps, warmup)
        except Exception as err:
            return PassResult(None, 0, count_examples(batch),
                              f"model-alone pass failed: {first_line(err)}", counted)
    return PassResult(statistics.median(times), len(times), count_examples(batch), note, counted,
                      min(times), max(times))
