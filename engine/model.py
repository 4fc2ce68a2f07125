"""Describing a model in PopTorch's words: ops with shapes, Blocks, Stages, execution strategies, Options.

A model is a list of ops in program order. Each op knows its input and output shapes and dtype;
its FLOPs and bytes are derived from them (never typed in), so a user who changes a shape changes
the cost. Blocks name groups of ops, exactly as ``poptorch.Block`` does::

    m = Model("mnist", options)
    x = m.input((1, 28, 28))                 # the micro-batch dimension is added from the options
    with Block("B1"):
        x = m.relu(m.maxpool2d(m.conv2d(x, 10, kernel=5), 2))
    ...
    m.loss(m.linear(x, 10, block="B4"))      # or by name, like poptorch.BeginBlock

Stages group blocks on IPUs (``Stage("B1", "B2").ipu(0)``) and an execution strategy orders them
(``PipelinedExecution``, ``ShardedExecution``, ``PhasedExecution``). ``Options`` carries
PopTorch's option names (``deviceIterations``, ``Training.gradientAccumulation``,
``replicationFactor``, ``TensorLocations``...).

A user's model file defines ``build(options: Options) -> Model`` and may define ``DEFAULTS``, a
dict of option defaults (``micro_batch_size``, ``device_iterations``, ``gradient_accumulation``...).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from popvision_py.errors import ConfigError

DTYPE_BYTES = {"fp16": 2, "fp32": 4, "int32": 4}

# Ops whose work runs on the matrix (AMP) units; everything else runs on the workers' vector units.
AMP_KINDS = frozenset({"conv", "matmul"})

_current_block: contextvars.ContextVar[str | None] = contextvars.ContextVar("popvision_block", default=None)
_current_block_ipu: contextvars.ContextVar[int | None] = contextvars.ContextVar("popvision_block_ipu", default=None)


# -- options ---------------------------------------------------------------------------------


class TensorLocationSettings:
    """Where a class of tensors lives (PopTorch's ``TensorLocationSettings``)."""

    def __init__(self) -> None:
        self.on_chip = True
        self.replicated_tensor_sharding = False

    def useOnChipStorage(self, on_chip: bool = True) -> "TensorLocationSettings":  # noqa: N802 (PopTorch's name)
        self.on_chip = bool(on_chip)
        return self

    def useReplicatedTensorSharding(self, sharded: bool = True) -> "TensorLocationSettings":  # noqa: N802
        self.replicated_tensor_sharding = bool(sharded)
        return self


# The names an option may take (the CLI offers them as choices).
PRECISIONS = ("fp16", "fp32")
MODES = ("training", "inference")
OPTIMISERS = ("adamw", "adam", "lamb", "sgd", "lars")
# Recomputation checkpoints by name (a positive int k also works: every k-th block's output).
RECOMPUTE_CHECKPOINTS = ("blocks", "stage")


@dataclass
class TensorLocations:
    """On-chip or off-chip (streaming memory) for optimiser state, weights and activations."""

    optimiser_on_chip: bool = True
    weights_on_chip: bool = True
    activations_on_chip: bool = True
    replicated_tensor_sharding: bool = False

    def setOptimizerLocation(self, settings: TensorLocationSettings) -> "TensorLocations":  # noqa: N802
        self.optimiser_on_chip = settings.on_chip
        self.replicated_tensor_sharding |= settings.replicated_tensor_sharding
        return self

    def setWeightLocation(self, settings: TensorLocationSettings) -> "TensorLocations":  # noqa: N802
        self.weights_on_chip = settings.on_chip
        self.replicated_tensor_sharding |= settings.replicated_tensor_sharding
        return self

    def setActivationLocation(self, settings: TensorLocationSettings) -> "TensorLocations":  # noqa: N802
        self.activations_on_chip = settings.on_chip
        return self

    def as_manifest(self) -> dict[str, Any]:
        where = {True: "on_chip", False: "off_chip"}
        return {
            "optimiser": where[self.optimiser_on_chip],
            "weights": where[self.weights_on_chip],
            "activations": where[self.activations_on_chip],
            "replicated_tensor_sharding": self.replicated_tensor_sharding,
        }


class _Distributed:
    """``options.Distributed``: PopTorch's distributed sub-options (one host process per poprun instance)."""

    def __init__(self, options: "Options") -> None:
        self._options = options

    def configureProcessId(self, process_id: int, num_processes: int) -> "Options":  # noqa: N802
        # The emulator times the whole run: only the number of processes feeding it matters.
        self._options.host_processes = int(num_processes)
        return self._options

    @property
    def numProcesses(self) -> int:  # noqa: N802
        return self._options.host_processes


class _Training:
    """``options.Training``: PopTorch's training sub-options."""

    def __init__(self, options: "Options") -> None:
        self._options = options

    def gradientAccumulation(self, n: int) -> "Options":  # noqa: N802
        self._options.gradient_accumulation = int(n)
        return self._options


class _Precision:
    """``options.Precision``: PopTorch's precision sub-options."""

    def __init__(self, options: "Options") -> None:
        self._options = options

    def setPartialsType(self, dtype: object) -> "Options":  # noqa: N802
        """``torch.half`` / ``"fp16"`` or ``torch.float`` / ``"fp32"``."""
        name = str(dtype).removeprefix("torch.")
        self._options.partials = {"half": "fp16", "float16": "fp16", "float": "fp32", "float32": "fp32"}.get(name, name)
        return self._options


INPUT_KINDS = {  # what a sample is, as --input names it, and how the run summary says it
    "synthetic": "synthetic data (no host loading)",
    "tensor": "small in-memory tensors (MNIST-like)",
    "image": "JPEG decode and augmentation (ImageNet-like)",
    "text": "tokenised text",
}


@dataclass
class Options:
    """A run's options. Attribute names are snake_case; PopTorch's chained setters also work."""

    micro_batch_size: int = 1
    device_iterations: int = 1
    gradient_accumulation: int = 1
    replication_factor: int = 1
    precision: str = "fp16"
    # Precision of a matmul's / convolution's partial sums: poplibs' and PopTorch's default is FP32,
    # which runs the Mk2 AMP at half its FP16 rate; Graphcore's published models use FP16 partials
    # (PopTorch ``Precision.setPartialsType(torch.half)``).
    partials: str = "fp32"
    mode: str = "training"
    recompute: bool = False
    optimiser: str = "adamw"
    runs: int = 1
    arch: str = "mk2"
    system: str | None = None
    # Share of each tile's memory a matmul or convolution may use for its temporary data (received
    # operands, partials); above it the planner serialises the op. Poplar's default is 0.6
    # (PopTorch's setAvailableMemoryProportion). One value for every IPU, or one per IPU (a tuple).
    available_memory_proportion: float | tuple[float, ...] = 0.6
    # With recompute: where the backward restarts from (see RECOMPUTE_CHECKPOINTS): every block's
    # output ("blocks"), every k-th block's (an int k), or only the stage inputs ("stage", PopART's
    # RecomputationType::Pipeline: the backward recomputes the whole stage's forward).
    recompute_checkpoints: str | int = "blocks"
    # Attention computed in this many pieces over the heads (Graphcore's attention splits): each
    # piece's scores and probabilities are live alone, at the price of a launch per piece.
    attention_serialisation: int = 1
    # The blog's t axis: each stage's ops (weights and work) split over this many IPUs.
    tensor_sharding: int = 1
    # Optimiser state precision: PopTorch's first_order_momentum_accum_type /
    # second_order_momentum_accum_type (Adam, AdamW, LAMB) and velocity_accum_type (SGD, LARS);
    # PopTorch's default is FP32.
    optimiser_state_type: str = "fp32"
    # Adam / AdamW / LAMB: the first moment's type alone (PopTorch's first_order_momentum_accum_type;
    # Graphcore's BERT-Large sets it to FP16, enable_half_first_order_momentum); None: the state's type.
    first_moment_type: str | None = None
    # Gradient accumulators' type (PopTorch's accum_type); None: the weights' type (PopART's default).
    accum_type: str | None = None
    # SGD with momentum keeps one velocity that also accumulates the gradients (PopART's "SGD1",
    # PopTorch's SGD(use_combined_accum=True), as Graphcore's CNN examples run it); False: a
    # separate gradient accumulator beside the velocity ("SGD2").
    use_combined_accum: bool = True
    # PopART outlines identical subgraphs (SessionOptions.enableOutlining, on by default): repeated
    # layers share one copy of their code and vertex state.
    enable_outlining: bool = True
    # Host processes feeding the replicas (poprun instances, PopTorch's Distributed.numProcesses):
    # each runs its own data loader, so the host prepares samples this many times as fast.
    host_processes: int = 1
    # What one sample is for the host's data loaders (synthetic, tensor, image, text); None: the model's.
    host_input: str | None = None
    # Worker processes each host process's DataLoader runs (PopTorch DataLoader num_workers); None:
    # every core of the process's share of its host server.
    loader_workers: int | None = None
    tensor_locations: TensorLocations = field(default_factory=TensorLocations)
    strategy: "ExecutionStrategy | None" = None

    # PopTorch's spelling -------------------------------------------------------------------
    def deviceIterations(self, n: int) -> "Options":  # noqa: N802
        self.device_iterations = int(n)
        return self

    def replicationFactor(self, n: int) -> "Options":  # noqa: N802
        self.replication_factor = int(n)
        return self

    def setAvailableMemoryProportion(self, proportion: float | dict[str, float]) -> "Options":  # noqa: N802
        # PopTorch takes {"IPU0": 0.2, ...}: one value per IPU, the IPUs it leaves out at Poplar's 0.6.
        if isinstance(proportion, dict):
            try:
                by_ipu = {int(str(k).upper().removeprefix("IPU")): float(v) for k, v in proportion.items()}
            except ValueError:
                raise ConfigError(f"setAvailableMemoryProportion takes {{'IPU0': 0.2, ...}}, not {proportion}.") from None
            if any(i < 0 for i in by_ipu):
                raise ConfigError(f"setAvailableMemoryProportion names a negative IPU: {proportion}.")
            self.available_memory_proportion = tuple(by_ipu.get(i, 0.6) for i in range(max(by_ipu, default=0) + 1))
        else:
            self.available_memory_proportion = float(proportion)
        return self

    def memory_proportion(self, ipu: int) -> float:
        """The available memory proportion of one IPU (the last value given for IPUs beyond the list:
        a tuple shorter than the IPUs is refused by the plan, so that is only Python callers' case)."""
        amp = self.available_memory_proportion
        if isinstance(amp, (tuple, list)):
            return float(amp[min(ipu, len(amp) - 1)])
        return float(amp)

    def setExecutionStrategy(self, strategy: "ExecutionStrategy") -> "Options":  # noqa: N802
        self.strategy = strategy
        return self

    @property
    def Precision(self) -> "_Precision":  # noqa: N802
        return _Precision(self)

    @property
    def Training(self) -> _Training:  # noqa: N802
        return _Training(self)

    @property
    def Distributed(self) -> _Distributed:  # noqa: N802
        return _Distributed(self)

    @property
    def TensorLocations(self) -> TensorLocations:  # noqa: N802
        return self.tensor_locations

    @property
    def training(self) -> bool:
        return self.mode == "training"

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.precision]

    def validate(self) -> None:
        """ConfigError for sizes that are zero or negative and for unknown names."""
        amp = self.available_memory_proportion
        if isinstance(amp, list):
            amp = self.available_memory_proportion = tuple(amp)
        for value in (amp if isinstance(amp, tuple) else (amp,)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ConfigError(f"Available memory proportion must be in (0, 1], not {value}.")
        if isinstance(amp, tuple) and not amp:
            raise ConfigError("Available memory proportion needs at least one value.")
        checkpoints = self.recompute_checkpoints
        if not (checkpoints in RECOMPUTE_CHECKPOINTS or (isinstance(checkpoints, int) and not isinstance(checkpoints, bool)
                                                          and checkpoints >= 1)):
            raise ConfigError(f"Recompute checkpoints must be {' or '.join(RECOMPUTE_CHECKPOINTS)} or a positive "
                              f"number of blocks, not {checkpoints!r}.")
        if not isinstance(self.attention_serialisation, int) or self.attention_serialisation < 1:
            raise ConfigError(f"Attention serialisation must be a positive integer, not {self.attention_serialisation}.")
        for name in ("micro_batch_size", "device_iterations", "gradient_accumulation", "replication_factor", "runs",
                     "tensor_sharding", "host_processes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name.replace('_', ' ').capitalize()} must be a positive integer, not {value}.")
        for what, value, choices in (("precision", self.precision, PRECISIONS), ("partials", self.partials, PRECISIONS),
                                     ("mode", self.mode, MODES),
                                     ("optimiser", self.optimiser, OPTIMISERS),
                                     ("optimiser state type", self.optimiser_state_type, PRECISIONS),
                                     ("first moment type", self.first_moment_type or self.optimiser_state_type,
                                      PRECISIONS),
                                     ("accumulator type", self.accum_type or self.precision, PRECISIONS)):
            if value not in choices:
                raise ConfigError(f"Unknown {what} {value!r}; choose one of {', '.join(choices)}.")
        if self.host_input is not None and self.host_input not in INPUT_KINDS:
            raise ConfigError(f"Unknown input kind {self.host_input!r}; choose one of {', '.join(INPUT_KINDS)}.")
        workers = self.loader_workers
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ConfigError(f"Loader workers must be a positive integer, not {workers}.")


# -- stages and strategies -------------------------------------------------------------------


class Stage:
    """A group of blocks placed on one IPU: ``Stage("B1", "B2").ipu(0)``."""

    def __init__(self, *blocks: str) -> None:
        if not blocks:
            raise ConfigError("A Stage needs at least one block name.")
        self.blocks: tuple[str, ...] = tuple(blocks)
        self.ipu_id: int | None = None

    def ipu(self, ipu_id: int) -> "Stage":
        self.ipu_id = int(ipu_id)
        return self

    def __repr__(self) -> str:
        return f"Stage({', '.join(map(repr, self.blocks))}).ipu({self.ipu_id})"


class ExecutionStrategy:
    """Stages and how they run; ``kind`` is pipelined, sharded or phased."""

    kind = ""

    def __init__(self, *stages: Stage | str) -> None:
        # PopTorch's shorthand: bare block names are one stage each, on IPUs 0, 1, 2...
        self.stages: list[Stage] = [Stage(s) if isinstance(s, str) else s for s in stages]
        for i, stage in enumerate(self.stages):
            if stage.ipu_id is None:
                stage.ipu_id = i

    def with_kind(self, kind: str) -> "ExecutionStrategy":
        """The same stages under another strategy."""
        cls = STRATEGIES[kind]
        return cls(*[Stage(*s.blocks).ipu(s.ipu_id) for s in self.stages])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.stages))})"


class PipelinedExecution(ExecutionStrategy):
    """Stages on ascending IPUs, all busy at once on different micro-batches."""

    kind = "pipelined"


class ShardedExecution(ExecutionStrategy):
    """Stages one after another: one IPU busy at a time."""

    kind = "sharded"


class PhasedExecution(ExecutionStrategy):
    """Each stage is a phase; phases run one after another, their weights streamed from streaming memory."""

    kind = "phased"


STRATEGIES: dict[str, type[ExecutionStrategy]] = {
    "pipelined": PipelinedExecution,
    "sharded": ShardedExecution,
    "phased": PhasedExecution,
}


# -- blocks ----------------------------------------------------------------------------------


class Block:
    """``with Block("B1"):`` puts the ops built inside it into block B1 (``ipu_id`` auto-stages it)."""

    def __init__(self, name: str, ipu_id: int | None = None) -> None:
        self.name = name
        self.ipu_id = ipu_id
        self._tokens: list[tuple[contextvars.Token, contextvars.Token]] = []

    def __enter__(self) -> "Block":
        self._tokens.append((_current_block.set(self.name), _current_block_ipu.set(self.ipu_id)))
        return self

    def __exit__(self, *exc: object) -> None:
        block, ipu = self._tokens.pop()
        _current_block.reset(block)
        _current_block_ipu.reset(ipu)


# -- tensors and ops -------------------------------------------------------------------------


@dataclass(frozen=True)
class Tensor:
    """A value flowing between ops: its shape (micro-batch first), dtype and producing op (-1: input)."""

    shape: tuple[int, ...]
    dtype: str
    producer: int

    # Cached: the compiler asks for a tensor's bytes several times per op pass.
    @functools.cached_property
    def elements(self) -> int:
        return math.prod(self.shape)

    @functools.cached_property
    def bytes(self) -> int:
        return self.elements * DTYPE_BYTES[self.dtype]


@dataclass
class Op:
    """One operation. Costs are derived by the Model's builder methods from the shapes.

    ``gemm`` is (M, K, N) for ops on the matrix units (a convolution as its implicit matmul);
    ``grains`` is how many independent pieces of work the op splits into across tiles.
    """

    op_id: int
    name: str
    kind: str
    block: str
    inputs: tuple[Tensor, ...]
    output: Tensor
    params: int  # trainable parameters
    flops: int  # forward, one micro-batch
    bytes: int  # forward bytes read and written
    grains: int
    gemm: tuple[int, int, int] | None = None
    groups: int = 1  # independent products of a batched matmul (batch x heads); gemm is per group
    # Under tensor sharding: "column" (output features split, its input gradient all-reduced in the
    # backward), "row" (input features split, its output all-reduced in the forward) or "".
    shard: str = ""
    # A serialised attention's piece (the op id of the piece's first op; -1: not a piece): the
    # compiler recomputes a piece's ops again just before its backward, so pieces never coexist.
    piece: int = -1
    # Tied weights (a decoder sharing the word-embedding matrix): the op that owns the matrix and its
    # elements. The matrix is counted, stored, accumulated and updated once, with its owner; ``params``
    # holds only this op's own weights (a bias).
    tied_to: int = -1
    tied_params: int = 0

    @property
    def weight_params(self) -> int:
        """Weights the op reads: its own and a tied matrix."""
        return self.params + self.tied_params

    @property
    def on_amp(self) -> bool:
        return self.kind in AMP_KINDS

    @property
    def backward_flops(self) -> int:
        # Weighted ops compute the gradient of their input and of their weights: twice the forward.
        return 2 * self.flops if self.on_amp else self.flops

    @property
    def backward_bytes(self) -> int:
        return 2 * self.bytes


class Model:
    """Builds a model's op list; each builder method returns the op's output Tensor."""

    def __init__(self, name: str, options: Options | None = None, *, params: dict[str, Any] | None = None) -> None:
        self.name = name
        self.options = options or Options()
        self.dtype = self.options.precision
        self.ops: list[Op] = []
        self._op_names: set[str] = set()  # the ops' names, to make each unique without a scan
        self.blocks: list[str] = []  # in order of first use
        self.block_ipus: dict[str, int] = {}
        self.default_strategy: ExecutionStrategy | None = None
        self.params: dict[str, Any] = dict(params or {})
        # Samples (sequences) per input on average: above 1 when inputs pack several sequences
        # (Graphcore's packed BERT); throughput counts samples.
        self.packing_factor: float = 1.0
        # What one sample is, for the host's data loaders (engine.costs.INPUT_KINDS): small tensors
        # unless the model says otherwise (the zoo's image models "image", its language models "text").
        self.input_kind: str = "tensor"

    # -- structure -------------------------------------------------------------------------

    @property
    def parameters(self) -> int:
        return sum(op.params for op in self.ops)

    def set_default_strategy(self, strategy: ExecutionStrategy) -> "Model":
        """The partition the model runs with unless the user chooses stages."""
        self.default_strategy = strategy
        return self

    def input(self, shape: Sequence[int], dtype: str | None = None) -> Tensor:
        """A host input; ``shape`` excludes the micro-batch dimension, which the options give."""
        full = (self.options.micro_batch_size, *map(int, shape))
        _check_shape(full, "input")
        return Tensor(full, dtype or self.dtype, -1)

    def view(self, x: Tensor, shape: Sequence[int]) -> Tensor:
        """A reshape: no data moves, so no op (``-1`` in ``shape`` is inferred, as in PyTorch)."""
        shape = list(shape)
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape[shape.index(-1)] = x.elements // max(known, 1)
        if math.prod(shape) != x.elements:
            raise ConfigError(f"Cannot view a tensor of shape {x.shape} as {tuple(shape)}.")
        return Tensor(tuple(shape), x.dtype, x.producer)

    def slice(self, x: Tensor, shape: Sequence[int]) -> Tensor:
        """A part of ``x`` (a token, some positions) seen as ``shape``: read in place, so no op."""
        _check_shape(tuple(shape), "slice")
        return Tensor(tuple(int(s) for s in shape), x.dtype, x.producer)

    def _add(self, name: str, kind: str, inputs: Sequence[Tensor], out_shape: Sequence[int], *, params: int = 0,
             flops: int, grains: int, gemm: tuple[int, int, int] | None = None, block: str | None = None,
             out_dtype: str | None = None, groups: int = 1, tied: "Op | None" = None) -> Tensor:
        block = block or _current_block.get()
        if block is None:
            raise ConfigError(f"Op {name!r} is in no Block; build it inside `with Block(...)` or pass block=.")
        if block not in self.blocks:
            self.blocks.append(block)
        ipu = _current_block_ipu.get()
        if ipu is not None:
            self.block_ipus.setdefault(block, ipu)
        out_shape = tuple(int(s) for s in out_shape)
        _check_shape(out_shape, name)
        op_id = len(self.ops)
        unique = name if name not in self._op_names else f"{name}.{op_id}"
        self._op_names.add(unique)
        out = Tensor(out_shape, out_dtype or self.dtype, op_id)
        dtype_bytes = DTYPE_BYTES[self.dtype]
        tied_params = tied.params if tied is not None else 0
        moved = sum(t.bytes for t in inputs) + out.bytes + (params + tied_params) * dtype_bytes
        self.ops.append(Op(op_id, unique, kind, block, tuple(inputs), out, int(params), int(flops), int(moved),
                           max(1, int(grains)), gemm, groups, tied_to=tied.op_id if tied is not None else -1,
                           tied_params=int(tied_params)))
        return out

    # -- layers ------------------------------------------------------------------------------

    def conv2d(self, x: Tensor, out_channels: int, kernel: int, stride: int = 1, padding: int = 0, *,
               bias: bool = True, name: str = "conv", block: str | None = None) -> Tensor:
        """A 2-D convolution over (N, C, H, W)."""
        n, c, h, w = x.shape
        ho = (h + 2 * padding - kernel) // stride + 1
        wo = (w + 2 * padding - kernel) // stride + 1
        m, k = n * ho * wo, c * kernel * kernel
        params = out_channels * k + (out_channels if bias else 0)
        # A grain: 16 output channels of up to 8 output pixels of one row of one image (Poplar
        # plans conv partitions over batch, field and channel groups of 8 or 16).
        grains = n * ho * math.ceil(wo / 8) * math.ceil(out_channels / 16)
        return self._add(name, "conv", [x], (n, out_channels, ho, wo), params=params, flops=2 * m * k * out_channels,
                         grains=grains, gemm=(m, k, out_channels), block=block)

    def linear(self, x: Tensor, out_features: int, *, bias: bool = True, name: str = "linear",
               block: str | None = None, tied_to: Tensor | None = None) -> Tensor:
        """y = x W + b over the last dimension.

        ``tied_to``: the output of an ``embedding`` whose ``out_features x in_features`` table is W
        (a decoder tied to the word embedding, as BERT's MLM head and GPT-2's LM head are): the
        op holds no matrix of its own, only its bias.
        """
        *lead, k = x.shape
        m = math.prod(lead)
        tied = None
        if tied_to is not None:
            tied = self.ops[tied_to.producer] if tied_to.producer >= 0 else None
            if tied is None or tied.kind != "embedding" or tied.params != k * out_features:
                raise ConfigError(f"Linear {name!r} can only be tied to an embedding of {out_features} x {k} "
                                  f"weights.")
        params = (0 if tied else k * out_features) + (out_features if bias else 0)
        return self._add(name, "matmul", [x], (*lead, out_features), params=params, flops=2 * m * k * out_features,
                         grains=_gemm_grains(m, out_features), gemm=(m, k, out_features), block=block, tied=tied)

    def matmul(self, a: Tensor, b: Tensor, *, name: str = "matmul", block: str | None = None) -> Tensor:
        """A batched matmul of two activations (..., M, K) x (..., K, N): no weights."""
        *batch, m, k = a.shape
        *_, k2, n = b.shape
        if k != k2:
            raise ConfigError(f"matmul {name!r}: inner dimensions {k} and {k2} differ.")
        groups = math.prod(batch)
        return self._add(name, "matmul", [a, b], (*batch, m, n), flops=2 * groups * m * k * n,
                         grains=groups * _gemm_grains(m, n), gemm=(m, k, n), block=block, groups=groups)

    def _elementwise(self, x: Tensor, kind: str, flops_per_element: int, name: str, block: str | None,
                     others: Sequence[Tensor] = (), params: int = 0) -> Tensor:
        # A grain: 64 contiguous elements, the vector units' natural chunk per worker.
        return self._add(name, kind, [x, *others], x.shape, params=params, flops=flops_per_element * x.elements,
                         grains=math.ceil(x.elements / 64), block=block)

    def generic(self, inputs: Sequence[Tensor], out_shape: Sequence[int], flops: int, *, kind: str = "generic",
                name: str = "generic", block: str | None = None, params: int = 0,
                out_dtype: str | None = None) -> Tensor:
        """Work the builders above do not name (an op captured from PyTorch, say): its FLOPs as given,
        its bytes from its inputs, output and ``params`` weights, run on the workers' vector units."""
        elements = math.prod(int(s) for s in out_shape)
        return self._add(name, kind, list(inputs), out_shape, params=params, flops=max(0, int(flops)),
                         grains=math.ceil(max(elements, 1) / 64), block=block, out_dtype=out_dtype)

    def relu(self, x: Tensor, *, name: str = "relu", block: str | None = None) -> Tensor:
        return self._elementwise(x, "relu", 1, name, block)

    def gelu(self, x: Tensor, *, name: str = "gelu", block: str | None = None) -> Tensor:
        return self._elementwise(x, "gelu", 8, name, block)

    def add(self, x: Tensor, y: Tensor, *, name: str = "add", block: str | None = None) -> Tensor:
        return self._elementwise(x, "add", 1, name, block, others=[y])

    def dropout(self, x: Tensor, *, name: str = "dropout", block: str | None = None) -> Tensor:
        return self._elementwise(x, "dropout", 3, name, block)

    def softmax(self, x: Tensor, *, name: str = "softmax", block: str | None = None) -> Tensor:
        return self._elementwise(x, "softmax", 5, name, block)

    def layer_norm(self, x: Tensor, *, name: str = "layer_norm", block: str | None = None) -> Tensor:
        return self._elementwise(x, "layer_norm", 8, name, block, params=2 * x.shape[-1])

    def batch_norm(self, x: Tensor, *, name: str = "batch_norm", block: str | None = None) -> Tensor:
        return self._elementwise(x, "batch_norm", 6, name, block, params=2 * x.shape[1])

    def maxpool2d(self, x: Tensor, kernel: int, stride: int | None = None, padding: int = 0, *,
                  name: str = "maxpool", block: str | None = None) -> Tensor:
        n, c, h, w = x.shape
        stride = stride or kernel
        ho = (h + 2 * padding - kernel) // stride + 1
        wo = (w + 2 * padding - kernel) // stride + 1
        out = n * c * ho * wo
        return self._add(name, "maxpool", [x], (n, c, ho, wo), flops=out * kernel * kernel,
                         grains=math.ceil(out / 64), block=block)

    def global_avgpool(self, x: Tensor, *, name: str = "avgpool", block: str | None = None) -> Tensor:
        n, c, h, w = x.shape
        return self._add(name, "reduce", [x], (n, c), flops=x.elements, grains=math.ceil(n * c / 16), block=block)

    def embedding(self, ids: Tensor, vocab: int, dim: int, *, name: str = "embedding",
                  block: str | None = None) -> Tensor:
        """A table lookup: ``vocab x dim`` weights, gathered per id."""
        out = (*ids.shape, dim)
        return self._add(name, "embedding", [ids], out, params=vocab * dim, flops=math.prod(out),
                         grains=math.ceil(math.prod(out) / 64), block=block)

    def loss(self, logits: Tensor, *, name: str = "cross_entropy", block: str | None = None) -> Tensor:
        """Cross-entropy against host labels: softmax, log and a reduction (5 FLOP per logit)."""
        return self._add(name, "cross_entropy", [logits], (logits.shape[0],), flops=5 * logits.elements,
                         grains=math.ceil(logits.elements / 64), block=block, out_dtype="fp32")

    def attention(self, x: Tensor, heads: int, *, name: str = "attention", block: str | None = None) -> Tensor:
        """Multi-head self-attention over (N, S, H): QKV projection, scores, softmax, context, output."""
        n, s, h = x.shape
        if h % heads:
            raise ConfigError(f"Hidden size {h} is not divisible by {heads} heads.")
        d = h // heads
        pieces = self.options.attention_serialisation
        if pieces > heads or heads % pieces:
            raise ConfigError(f"Attention serialisation {pieces} does not divide the {heads} heads of {name}; "
                              f"choose a divisor of {heads}.")
        qkv = self.linear(x, 3 * h, name=f"{name}/qkv", block=block)
        q = self.view(qkv, (n, heads, s, 3 * d))  # q, k and v are slices of it
        if pieces == 1:
            k_t = Tensor((n, heads, d, s), self.dtype, qkv.producer)
            scores = self.matmul(Tensor((n, heads, s, d), self.dtype, q.producer), k_t, name=f"{name}/scores",
                                 block=block)
            probs = self.softmax(scores, name=f"{name}/softmax", block=block)
            v = Tensor((n, heads, s, d), self.dtype, qkv.producer)
            context = self.matmul(probs, v, name=f"{name}/context", block=block)
            context = self.view(context, (n, s, h))
            return self.linear(context, h, name=f"{name}/out", block=block)
        # Serialised over the heads (Graphcore's attention splits): piece j computes the scores,
        # probabilities and context of heads/pieces heads; the pieces' contexts are then gathered
        # into one tensor (a copy) for the output projection.
        part = heads // pieces
        contexts = []
        for j in range(pieces):
            first = len(self.ops)
            k_t = Tensor((n, part, d, s), self.dtype, qkv.producer)
            scores = self.matmul(Tensor((n, part, s, d), self.dtype, qkv.producer), k_t,
                                 name=f"{name}/piece{j}/scores", block=block)
            probs = self.softmax(scores, name=f"{name}/piece{j}/softmax", block=block)
            v = Tensor((n, part, s, d), self.dtype, qkv.producer)
            contexts.append(self.matmul(probs, v, name=f"{name}/piece{j}/context", block=block))
            for op in self.ops[first:]:
                op.piece = first
        context = self._add(f"{name}/concat", "concat", contexts, (n, s, h), flops=0,
                            grains=math.ceil(n * s * h / 64), block=block)
        return self.linear(context, h, name=f"{name}/out", block=block)


def _gemm_grains(m: int, n: int) -> int:
    # A grain: a 16 x 16 block of the output (the AMP's accumulation unit on Mk2 is 16 wide).
    return math.ceil(m / 16) * math.ceil(n / 16)


def _check_shape(shape: Sequence[int], what: str) -> None:
    if any(s <= 0 for s in shape):
        raise ConfigError(f"The shape of {what} must be positive in every dimension, not {tuple(shape)}.")


def shard_ops(ops: Sequence[Op], t: int) -> list[Op]:
    """The ops as one of ``t`` tensor shards sees them (Megatron-style, the blog's t axis).

    Every op's weights, FLOPs, grains and tensors are split ``t`` ways. Weighted matmuls alternate
    column-parallel (the first of a pair: output features split, no exchange in the forward) and
    row-parallel (input features split: partial outputs all-reduced over the shards); an embedding
    is split over its vocabulary and all-reduced like a row-parallel op.
    """
    if t <= 1:
        return list(ops)

    def split(x: Tensor) -> Tensor:
        return Tensor((*x.shape[:-1], math.ceil(x.shape[-1] / t)), x.dtype, x.producer)

    out, role = [], "column"
    for op in ops:
        shard, gemm, groups = "", op.gemm, op.groups
        if op.kind == "embedding":
            shard, role = "row", "column"
        elif op.weight_params and op.gemm is not None:
            shard = role
            m, k, n = op.gemm
            gemm = (m, k, math.ceil(n / t)) if role == "column" else (m, math.ceil(k / t), n)
            role = "row" if role == "column" else "column"
        elif op.gemm is not None:
            groups = math.ceil(op.groups / t)  # attention: the heads are split
        out.append(dataclasses.replace(
            op, inputs=tuple(split(x) for x in op.inputs), output=split(op.output),
            params=math.ceil(op.params / t), tied_params=math.ceil(op.tied_params / t),
            flops=math.ceil(op.flops / t), bytes=math.ceil(op.bytes / t),
            grains=max(1, math.ceil(op.grains / t)), gemm=gemm, groups=groups, shard=shard))
    return out
