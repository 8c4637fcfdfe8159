"""The diagnose preset's speed-of-light passes: the loader alone and the model alone, each with
nothing else running, on the run's own objects left as they were (docs/presets/diagnose.md)."""

from __future__ import annotations

import contextlib
import copy
import random
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy
import torch
from lightning.fabric.utilities.apply_func import apply_to_collection
from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature

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

    def examples_per_second(self, ranks: int = 1) -> float | None:
        """The pass's rate; with `ranks`, the run's (ranks work side by side)."""
        if self.step_s is None or not self.examples or self.step_s <= 0:
            return None
        return self.examples / self.step_s * ranks


def _cpu_copy(value: Any) -> Any:
    return apply_to_collection(value, torch.Tensor, lambda t: t.detach().to("cpu", copy=True))


@contextlib.contextmanager
def rng_restored() -> Iterator[None]:
    """Python's, numpy's and torch's CPU and CUDA RNG states put back after the block."""
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
MAX_COPY_SHARE_OF_AVAILABLE = 0.5


def copy_refused(strategy: Any, module: torch.nn.Module, optimizers: list[Any],
                 available_bytes: int) -> str | None:
    """Why the model-alone pass must not copy the state it restores afterwards, or None."""
    sharded = [c.__name__ for c in type(strategy).__mro__ if c.__name__ in SHARDED]
    if sharded:
        return f"under {sharded[0]} copying the state would gather every shard on every rank"
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
def state_restored(module: torch.nn.Module, optimizers: list[Any], precision: Any = None) -> Iterator[None]:
    """Model, optimizer, precision-plugin and RNG states copied to the host, then put back into
    the run's own tensors (load_state_dict would build a second copy on the device first); so is
    what a step keeps on its modules' attributes (outputs, a metric's counts)."""
    attributes = _attributes(module)
    model_state = _cpu_copy(module.state_dict())
    optimizer_states = [_cpu_copy(o.state_dict()) for o in optimizers]
    precision_state = _cpu_copy(precision.state_dict()) if precision is not None else None
    was_training = module.training
    try:
        with rng_restored():
            yield
    finally:
        _put_back(attributes)  # first: a buffer the step rebound to another shape is its own again
        module.load_state_dict(model_state)
        for optimizer, state in zip(optimizers, optimizer_states, strict=True):
            optimizer.zero_grad(set_to_none=True)  # the pass's gradients go before the copy
            _restore_optimizer(optimizer, state)
        if precision_state:
            precision.load_state_dict(precision_state)
        module.train(was_training)


_STATE = ("_parameters", "_buffers", "_modules")  # state_dict's, and the modules themselves
# What a step may change in place, by kind: (kind, its copy, the copy put back into it)
_IN_PLACE: tuple[tuple[Any, Callable[[Any], Any], Callable[[Any, Any], Any]], ...] = (
    (torch.Tensor, lambda v: v.detach().clone(), lambda v, kept: v.copy_(kept)),
    (list, copy.copy, lambda v, kept: v.__setitem__(slice(None), kept)),
    (dict, copy.copy, lambda v, kept: (v.clear(), v.update(kept))),
    (torch.Generator | numpy.random.RandomState, lambda v: v.get_state(), lambda v, kept: v.set_state(kept)),
    (numpy.random.Generator, lambda v: v.bit_generator.state,
     lambda v, kept: setattr(v.bit_generator, "state", kept)),
    (random.Random, lambda v: v.getstate(), lambda v, kept: v.setstate(kept)),
)


def _attributes(module: torch.nn.Module) -> list[tuple[Any, ...]]:
    """Each module's own attributes, and a copy of what a step changes in place (torchmetrics'
    states, step outputs, a non-persistent buffer, a Generator drawing noise)."""
    saved = []
    for owner in module.modules():
        found = {name: value for name, value in vars(owner).items() if name not in _STATE}
        buffers = dict(owner.named_buffers(recurse=False))
        copies = [(name, value, put, copied(value)) for name, value in (*found.items(), *buffers.items())
                  for kind, copied, put in _IN_PLACE if isinstance(value, kind)]
        saved.append((owner, found, copies, buffers))
    return saved


def _put_back(saved: list[tuple[Any, ...]]) -> None:
    with torch.no_grad():
        for owner, found, copies, buffers in saved:
            for name in [n for n in vars(owner) if n not in _STATE and n not in found]:
                del owner.__dict__[name]  # set by the pass
            owner.__dict__.update(found)
            for name, buffer in buffers.items():
                setattr(owner, name, buffer)
            for name, value, put, kept in copies:
                try:
                    put(value, kept)
                except RuntimeError:  # a tensor of another shape, an inference tensor: the copy
                    setattr(owner, name, kept)


def _restore_optimizer(optimizer: Any, saved: dict[str, Any]) -> None:
    """`saved` copied into the live tensors in place; load_state_dict where none fits."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    fallback = False
    for index, param in enumerate(params):  # state_dict()'s integer ids, in this order
        kept = saved["state"].get(index)
        if kept is None:
            optimizer.state.pop(param, None)
            continue
        live = optimizer.state.get(param)
        if live is None:
            fallback = True
            continue
        for key in set(live) - set(kept):
            del live[key]
        for key, value in kept.items():
            current = live.get(key)
            if (isinstance(value, torch.Tensor) and isinstance(current, torch.Tensor)
                    and current.shape == value.shape):
                current.copy_(value)
            elif isinstance(value, torch.Tensor):
                fallback = True
            else:
                live[key] = value
    for group, kept_group in zip(optimizer.param_groups, saved["param_groups"], strict=True):
        group.update({k: v for k, v in kept_group.items() if k != "params"})
    if fallback:  # a shape or a tensor the live state lacks: torch's own way (a new copy)
        optimizer.load_state_dict(saved)


@contextlib.contextmanager
def silent_logging(module: Any) -> Iterator[None]:
    """`self.log` / `self.log_dict` (outside the loop they raise) and the loggers' `log_metrics`
    do nothing inside the block."""
    loggers = list(getattr(module, "loggers", None) or [])
    module.log = module.log_dict = lambda *args, **kwargs: None
    for logger in loggers:
        logger.log_metrics = module.log
    try:
        yield
    finally:
        del module.log, module.log_dict
        for logger in loggers:
            del logger.log_metrics


def loader_alone(trainer: Any, loader: Any, steps: int, warmup: int) -> tuple[PassResult, Any]:
    """Seconds per batch of `loader` alone (to the device included) and its first batch, or None."""
    if loader is None or isinstance(loader, (list, dict)) and len(loader) != 1:
        return PassResult(None, 0, None, "loader pass skipped: none, or several dataloaders"), None
    if isinstance(loader, (list, dict)):
        loader = next(iter(loader.values() if isinstance(loader, dict) else loader))
    device = trainer.strategy.root_device
    workers = getattr(loader, "num_workers", 0) or 0
    wanted = max(steps, workers)
    # prefetched batches would come back at once and make a slow pipeline look fast
    buffered = workers * (getattr(loader, "prefetch_factor", None) or 2)
    drain = buffered + warmup
    try:
        total = len(loader)
    except TypeError:  # an iterable dataset without __len__
        total = None
    notes = []
    if total is not None and total < drain + wanted:
        drain = max(total - wanted, 0)
        if drain < buffered:
            notes.append(f"loader pass: the loader has {total} batches, too few to leave its"
                         f" {buffered} prefetched out of the timing: its rate is optimistic")
    first, fetched = None, 0
    start = end = now(device)
    for batch in loader:
        batch = to_device(trainer, batch)
        first = batch if first is None else first
        fetched += 1
        if fetched <= drain:  # the clock starts after the last batch drained
            start = end = now(device)
        else:  # never after the last next(): ending the loader shuts its workers down
            end = now(device)
        if fetched == drain + wanted:
            break
    drained, timed = min(fetched, drain), max(fetched - drain, 0)
    if not timed:
        notes.append(f"loader pass: the loader ran out after {drained} batches, before any was timed")
    elif timed < wanted:
        notes.append(f"loader pass: the loader ran out after {timed} of {wanted} timed batches")
    examples = count_examples(first) if first is not None else None
    return PassResult((end - start) / timed if timed else None, timed, examples,
                      "; ".join(notes) or None), first


def to_device(trainer: Any, batch: Any, dataloader_idx: int = 0) -> Any:
    """`batch` made ready for the step as Lightning 2.6's loops make it: convert_input,
    on_before_batch_transfer (the DataModule's if overridden), strategy.batch_to_device."""
    import lightning.pytorch as pl
    from lightning.pytorch.utilities.model_helpers import is_overridden

    batch = trainer.precision_plugin.convert_input(batch)
    datamodule, module = trainer.datamodule, trainer.lightning_module
    owner = (datamodule if datamodule is not None and is_overridden(
        "on_before_batch_transfer", datamodule, pl.LightningDataModule) else module)
    if owner is not None:
        batch = owner.on_before_batch_transfer(batch, dataloader_idx)
    return trainer.strategy.batch_to_device(batch, dataloader_idx=dataloader_idx)


def _step_args(hook: Callable[..., Any], batch: Any) -> tuple[Any, ...]:
    """The batch, and batch_idx 0 where the hook takes one, as Lightning's loops call it."""
    return (batch, 0) if is_param_in_hook_signature(hook, "batch_idx", min_args=2) else (batch,)


def training_forward(trainer: Any, module: Any, batch: Any) -> Callable[[], torch.Tensor | None]:
    """training_step on `batch` in the run's precision context, returning its loss or None."""
    precision = trainer.precision_plugin

    def forward() -> torch.Tensor | None:
        with precision.train_step_context():
            output = module.training_step(*_step_args(module.training_step, batch))
        loss = output.get("loss") if isinstance(output, dict) else output
        return loss if isinstance(loss, torch.Tensor) else None

    return forward


def training_step_fn(trainer: Any, module: Any, batch: Any) -> Callable[[], None]:
    """One training step as Lightning's automatic optimization runs it (scaler, clipping, the
    first optimizer), without the callback hooks strategy.backward would run."""
    optimizers = list(trainer.optimizers)
    forward = training_forward(trainer, module, batch)
    scaler = getattr(trainer.precision_plugin, "scaler", None)  # MixedPrecision('16-mixed')

    def step() -> None:
        loss = forward()
        if not module.automatic_optimization or loss is None:
            return
        optimizer = optimizers[0]
        module.backward(scaler.scale(loss) if scaler is not None else loss)
        if scaler is not None and not optimizer.defaults.get("fused"):
            scaler.unscale_(optimizer)  # before clipping; a fused optimizer unscales itself
        module.configure_gradient_clipping(optimizer, gradient_clip_val=trainer.gradient_clip_val,
                                           gradient_clip_algorithm=trainer.gradient_clip_algorithm)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def predict_step_fn(trainer: Any, module: Any, batch: Any) -> Callable[[], None]:
    precision = trainer.precision_plugin

    def step() -> None:
        with torch.inference_mode(), precision.predict_step_context():
            module.predict_step(*_step_args(module.predict_step, batch))

    return step


def own_step_fn(trainer: Any, module: Any, batch: Any, training: bool) -> Callable[[], None]:
    """The phase's own step on `batch`, as the speed preset's step alone and diagnose's pass run it."""
    return (training_step_fn if training else predict_step_fn)(trainer, module, batch)


def step_flops(trainer: Any, module: Any, batch: Any, training: bool) -> tuple[int | None, str | None]:
    """(FLOPs of one training or predict step on `batch`, why not counted)."""
    if not training:
        return count_flops(module, predict_step_fn(trainer, module, batch))
    forward = training_forward(trainer, module, batch)
    if not module.automatic_optimization:
        return count_flops(module, forward)
    # measure_flops calls backward on this: the loss, or nothing to differentiate
    return count_flops(module, forward,
                       lambda loss: loss if loss is not None else torch.zeros((), requires_grad=True))


def model_alone(trainer: Any, module: Any, step: Callable[[], Any], batch: Any, steps: int,
                warmup: int, training: bool, flops: bool = False) -> PassResult:
    """Seconds per step on one resident batch, state restored after; `flops`: counted first."""
    device = trainer.strategy.root_device
    no_sync = getattr(trainer.strategy.model, "no_sync", None)  # DDP: no gradient all-reduce
    optimizers = list(trainer.optimizers) if training else []
    precision = trainer.precision_plugin if training else None  # its GradScaler's state
    counted, note = None, None
    with (state_restored(module, optimizers, precision), silent_logging(module),
          no_sync() if no_sync is not None else contextlib.nullcontext()):
        module.train(training)
        if flops:
            counted, note = step_flops(trainer, module, batch, training)
        times: list[float] = []
        try:
            for index in range(warmup + steps):
                start = now(device)
                step()
                if index >= warmup:
                    times.append(now(device) - start)
        except Exception as err:
            return PassResult(None, 0, count_examples(batch),
                              f"model-alone pass failed: {first_line(err)}", counted)
    return PassResult(statistics.median(times), len(times), count_examples(batch), note, counted,
                      min(times), max(times))
