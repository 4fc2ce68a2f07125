"""``trainingModel`` and ``inferenceModel``: the model runs on the CPU, its timing comes from the emulator.

A call takes PopTorch's combined batch (micro-batch x device iterations x gradient accumulation x
replicas on the leading dimension, as ``poptorch.DataLoader`` makes it), splits it into micro-batches
and runs them in order. Training, as PopTorch's ``trainingModel``: every micro-batch's gradients
(of the loss the model returns) are accumulated over gradient accumulation x replicas micro-batches,
averaged (``Training.accumulationAndReplicationReductionType``: Mean, PopTorch's default, or Sum),
and the optimiser steps once per group: ``deviceIterations`` updates per call. What the call
returns follows ``Options.outputMode`` (Final by default in training, All in inference).

A process of a distributed run (a poprun instance: ``Options.Distributed`` over several processes)
runs its own replicas' micro-batches; before each optimiser step the instances average (Sum: add)
their gradients over PopDist's backend, and at the first call they all take the first instance's
weights, so every replica of every instance keeps identical weights, as replicas on IPUs do.

The first call compiles: its first micro-batch's forward is captured, the captured model is
emulated with the options, its summary printed and its profile written (see ``_emulation``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from engine.torch_capture import recording, to_model
from popdist import _backend as instances
from popvision_py.format import system as timeline
from poptorch import _emulation, _pvti, optim
from poptorch._blocks import STATE
from poptorch._errors import Error, UnsupportedError
from poptorch._options import Options, OutputMode, ReductionType

# PopTorch executor methods that have no meaning here and no stand-in.
_UNSUPPORTED = frozenset({"getComputeLatency", "getHostIpuLatency", "getLatency", "getPerfCounters", "save",
                          "cycleCount", "rng_state", "compileAndExport", "loadExecutable", "precompileAndExport"})


# While popvision captures a script without running it (poptorch._script.capture_script): the callback each
# compiling model hands its capture to (it stops the script).
_CAPTURE_ONLY: list = []


class PoplarExecutor:
    """What ``trainingModel`` / ``inferenceModel`` return: call it as the model."""

    def __init__(self, model: torch.nn.Module, options: Options | None, training: bool,
                 optimizer: torch.optim.Optimizer | None = None) -> None:
        if options is not None and not isinstance(options, Options):
            raise Error(f"Invalid type: 'options' is of type {type(options).__name__} (expected poptorch.Options).")
        options = (options or Options()).clone()
        self._user_model = model
        self._options = options
        self._training = training
        if training:
            if options.defaultOutputMode():
                options.output_mode = OutputMode.Final
            self._optimizer = optimizer or optim.SGD(model.parameters(), lr=0.01)
            self._engine_optimiser = optim.engine_options(self._optimizer)
        else:
            if options.defaultOutputMode():
                options.output_mode = OutputMode.All
            if options.Training.gradient_accumulation != 1:
                raise Error("You must set poptorch.Options().Training.gradientAccumulation to 1 or leave it as its "
                            "default value (1) when running a poptorch.inferenceModel().")
            if optimizer is not None:
                raise Error("poptorch.inferenceModel takes no optimizer.")
            self._optimizer = None
            self._engine_optimiser = {}
        self._compiled: _emulation.EmulatedModel | None = None
        self._called = False  # the first call seeds torch's generator with Options.randomSeed
        self._joined = False  # a distributed model took the first instance's weights
        self._attached = False

    # -- what PopTorch's executor offers -------------------------------------------------------

    @property
    def options(self) -> Options:
        return self._options

    @property
    def training(self) -> bool:
        return self._training

    @property
    def compiled(self) -> _emulation.EmulatedModel | None:
        """The capture, emulation summary and profile of the first call (None before it)."""
        return self._compiled

    def isCompiled(self) -> bool:  # noqa: N802
        return self._compiled is not None

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Capture and emulate without training: one micro-batch's forward, gradients off."""
        if self._compiled is None:
            with torch.no_grad():
                self._forward(*self._micro_batches(args, kwargs)[0])
        self._attached = True

    def setOptimizer(self, optimizer: torch.optim.Optimizer) -> None:  # noqa: N802
        if not self._training:
            raise Error("poptorch.inferenceModel has no optimizer to set.")
        self._optimizer = optimizer
        self._engine_optimiser = optim.engine_options(optimizer)

    # The weights live in the host's model the whole time: copies and device attachment are no-ops, marked
    # on the system timeline (instants) where PopTorch would copy.
    def copyWeightsToHost(self) -> None:  # noqa: N802
        _pvti.instant(timeline.POPTORCH, timeline.WEIGHTS_TO_HOST)

    def copyWeightsToHostIfNeeded(self) -> bool:  # noqa: N802
        return False

    def copyWeightsToDevice(self) -> None:  # noqa: N802
        _pvti.instant(timeline.POPTORCH, timeline.WEIGHTS_TO_DEVICE)

    def detachFromDevice(self) -> None:  # noqa: N802
        self._attached = False

    def attachToDevice(self) -> None:  # noqa: N802
        if not self._attached and self._compiled is not None:
            _pvti.instant(timeline.POPTORCH, timeline.WEIGHTS_TO_DEVICE)  # PopTorch reloads the weights
        self._attached = True

    def isAttachedToDevice(self) -> bool:  # noqa: N802
        return self._attached

    def destroy(self) -> None:
        self._compiled = None
        self._called = False
        self._attached = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_user_model", "_options", "_training", "_compiled"):
            raise AttributeError(name)
        if name in _UNSUPPORTED:
            raise UnsupportedError(f"poptorch.PoplarExecutor.{name}")
        if name == "state_dict":  # PopTorch copies the weights to the host first
            _pvti.instant(timeline.POPTORCH, timeline.WEIGHTS_TO_HOST)
        return getattr(self._user_model, name)  # PopTorch forwards the rest to the model

    def __repr__(self) -> str:
        kind = "trainingModel" if self._training else "inferenceModel"
        return f"poptorch.{kind}({self._user_model!r})"

    # -- running -----------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        recorder = _pvti.active()
        if recorder is None or not recorder.wanted(timeline.POPTORCH):
            return self._call(args, kwargs)
        start = time.time_ns()
        out = self._call(args, kwargs)
        end = time.time_ns()
        recorder.span(timeline.POPTORCH, timeline.MODEL_CALL, start, end)
        samples = _samples(args, kwargs)
        if samples and end > start:
            counter = timeline.SAMPLES_PER_SECOND if self._training else timeline.INFERENCE_SAMPLES_PER_SECOND
            recorder.counter(timeline.POPTORCH, counter, samples * 1e9 / (end - start), end)
        return out

    def _call(self, args: tuple, kwargs: dict) -> Any:
        """One call of the model: its micro-batches in order, the optimiser stepping after each group."""
        micro = self._micro_batches(args, kwargs)
        if not self._called and self._options.random_seed is not None:
            # the IPU's generator is torch's here; compile() runs nothing on the IPU, so the first call seeds
            torch.manual_seed(self._options.random_seed)
        self._called = True
        outputs: list[Any] = []
        if self._training:
            per_update = self._options.Training.gradient_accumulation * self._options.replication_factor
            mean = self._options.Training.accumulation_and_replication_reduction_type == ReductionType.Mean
            distributed = self._join_instances()
            for start in range(0, len(micro), per_update):
                self._optimizer.zero_grad(set_to_none=True)
                for a, kw in micro[start:start + per_update]:
                    out = self._forward(a, kw)
                    loss = _loss_of(out)
                    (loss / per_update if mean else loss).backward()
                    outputs.append(_detached(out))
                if distributed:
                    with _pvti.span(timeline.POPDIST, timeline.GRADIENT_REDUCTION):
                        instances.reduce_gradients(_stepped(self._optimizer), mean)
                with _pvti.span(timeline.POPTORCH, timeline.OPTIMIZER_UPDATE):
                    self._optimizer.step()
        else:
            with torch.no_grad():
                outputs.extend(_detached(self._forward(a, kw)) for a, kw in micro)
        self._attached = True
        return _combine(outputs, self._options)

    def _join_instances(self) -> bool:
        """For a distributed run: join the instances' group and, the first time, take the first
        instance's weights and buffers; whether the run is distributed."""
        processes = self._options.Distributed.num_distributed_processes
        if processes == 1:
            return False
        instances.initialise(processes)
        if not self._joined:
            instances.broadcast_from_first([*self._user_model.parameters(), *self._user_model.buffers()])
            self._joined = True
        return True

    def _forward(self, args: tuple, kwargs: dict) -> Any:
        """One micro-batch through the model; the first one (before compiling) is captured."""
        with self._capturing(args, kwargs) if self._compiled is None else contextlib.nullcontext():
            return self._user_model(*args, **kwargs)

    def _micro_batches(self, args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
        """The call's inputs split into micro-batches along the leading dimension, as PopTorch does."""
        o = self._options
        n = o.device_iterations * o.replication_factor * (o.Training.gradient_accumulation if self._training else 1)
        leaves, spec = tree_flatten((args, kwargs))
        pieces: list[list[Any]] = []
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
                if leaf.shape[0] % n:
                    raise Error(f"Invalid batch dimension: the input of shape {tuple(leaf.shape)} has a batch "
                                f"dimension of {leaf.shape[0]}, not a multiple of deviceIterations "
                                f"({o.device_iterations}) x replicationFactor ({o.replication_factor})"
                                + (f" x gradientAccumulation ({o.Training.gradient_accumulation})"
                                   if self._training else "") + f" = {n}.")
                pieces.append(list(leaf.split(leaf.shape[0] // n)))
            else:
                pieces.append([leaf] * n)
        return [tree_unflatten([p[k] for p in pieces], spec) for k in range(n)]

    @contextlib.contextmanager
    def _capturing(self, args: tuple, kwargs: dict) -> Iterator[None]:
        """Record this forward's ops; when it ends, compile: capture, emulate, print, write the profile; then
        the weights go to the device (a compile span and an instant on the system timeline)."""
        with _pvti.span(timeline.POPTORCH, timeline.COMPILE):
            with self._compiling(args, kwargs):
                yield
        _pvti.instant(timeline.POPTORCH, timeline.WEIGHTS_TO_DEVICE)

    @contextlib.contextmanager
    def _compiling(self, args: tuple, kwargs: dict) -> Iterator[None]:
        STATE.reset()
        with recording(self._user_model, STATE.current) as recorder:
            yield
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        name = type(self._user_model).__name__
        captured = _emulation.capture_model(recorder.records, inputs, self._user_model, self._options,
                                            training=self._training, optimiser=self._engine_optimiser,
                                            recompute=STATE.checkpoints > 0, name=name)
        records, root = recorder.records, self._user_model
        del recorder
        if _CAPTURE_ONLY:
            # the capture again under other engine options (a tool's what-if), from the same records
            _CAPTURE_ONLY[-1](captured, _emulation.engine_layout(captured, self._options), self._training,
                              lambda options: to_model(records, inputs, root, name, options).model)
        # a capture (the callback did not stop the script at this model) writes no profile
        self._compiled = _emulation.emulate(captured, self._options, training=self._training, write=not _CAPTURE_ONLY)
        _emulation.announce(self._compiled)


def _samples(args: tuple, kwargs: dict) -> int:
    """Samples in one call: the leading dimension of its first tensor input (PopTorch's combined batch)."""
    for leaf in tree_flatten((args, kwargs))[0]:
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            return int(leaf.shape[0])
    return 0


def _loss_of(out: Any) -> torch.Tensor:
    """The loss a training model returns: the last single-element output with a gradient."""
    losses = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.numel() == 1 and t.requires_grad]
    if not losses:
        raise Error("poptorch.trainingModel: the model's forward returned no loss (a single-element tensor with a "
                    "gradient); return the loss, or a tuple that ends with it.")
    return losses[-1]


def _stepped(optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    """The parameters the optimiser updates, in its order (the same in every instance)."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def _detached(out: Any) -> Any:
    leaves, spec = tree_flatten(out)
    return tree_unflatten([x.detach() if isinstance(x, torch.Tensor) else x for x in leaves], spec)


def _combine(outputs: list[Any], options: Options) -> Any:
    """The call's result from its micro-batches' outputs, per ``Options.outputMode``; the micro-batches
    of one step are its replicas' in turn (PopTorch's [iterations, accumulation, replicas] order)."""
    mode = options.output_mode
    if mode == OutputMode.Final:
        if options.replication_factor == 1:
            return outputs[-1]
        # each replica's last micro-batch (the last replicationFactor ones), as PopTorch returns them
        outputs, mode = outputs[-options.replication_factor:], OutputMode.All
    if mode == OutputMode.EveryN:
        period = options.output_return_period
        outputs = [o for k, o in enumerate(outputs) if (k + 1) % period == 0] or outputs[-1:]
    flat = [tree_flatten(o) for o in outputs]
    spec = flat[0][1]
    combined = []
    for column in zip(*(leaves for leaves, _ in flat)):
        first = column[0]
        if not isinstance(first, torch.Tensor):
            combined.append(column[-1])
        elif mode == OutputMode.Sum:
            combined.append(torch.stack(column).sum(0))
        elif first.dim() == 0:
            combined.append(torch.stack(column))
        else:
            combined.append(torch.cat(column))
    return tree_unflatten(combined, spec)


def trainingModel(model: torch.nn.Module, options: Options | None = None,  # noqa: N802 (PopTorch's name)
                  optimizer: torch.optim.Optimizer | None = None) -> PoplarExecutor:
    """Wrap ``model`` for training (SGD with lr 0.01 when no optimizer is given, as PopTorch)."""
    if isinstance(model, PoplarExecutor):
        model = model._user_model
    return PoplarExecutor(model, options, True, optimizer)


def inferenceModel(model: torch.nn.Module, options: Options | None = None) -> PoplarExecutor:  # noqa: N802
    """Wrap ``model`` for inference."""
    if isinstance(model, PoplarExecutor):
        model = model._user_model
    return PoplarExecutor(model, options, False)
