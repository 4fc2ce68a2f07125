"""Describing a model in PopTorch's words: ops with shapes in Blocks, and shard_ops (the t axis).

A model is a list of ops in program order. Each op knows its input and output shapes and dtype;
its FLOPs and bytes are derived from them (never typed in), so a user who changes a shape changes
the cost. Blocks name groups of ops, exactly as ``poptorch.Block`` does::

    m = Model("mnist", options)
    x = m.input((1, 28, 28))                 # the micro-batch dimension is added from the options
    with ModelBlock("B1"):
        x = m.relu(m.maxpool2d(m.conv2d(x, 10, kernel=5), 2))
    ...
    m.loss(m.linear(x, 10, block="B4"))      # or by name, like poptorch.BeginBlock

Stages and their layout live in ``engine.layout``, ``RunOptions`` in ``engine.options``.

A user's model file defines ``build(options: RunOptions) -> Model`` and may define ``DEFAULTS``, a
dict of option defaults (``micro_batch_size``, ``device_iterations``, ``gradient_accumulation``...).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.options import DTYPE_BYTES, RunOptions
from engine.layout import Layout
from popvision_py.errors import ConfigError

# Ops whose work runs on the matrix (AMP) units; everything else runs on the workers' vector units.
AMP_KINDS = frozenset({"conv", "matmul"})

_current_block: contextvars.ContextVar[str | None] = contextvars.ContextVar("popvision_block", default=None)
_current_block_ipu: contextvars.ContextVar[int | None] = contextvars.ContextVar("popvision_block_ipu", default=None)


# -- blocks ----------------------------------------------------------------------------------


class ModelBlock:
    """``with ModelBlock("B1"):`` puts the ops built inside it into block B1 (``ipu_id`` auto-stages it)."""

    def __init__(self, name: str, ipu_id: int | None = None) -> None:
        self.name = name
        self.ipu_id = ipu_id
        self._tokens: list[tuple[contextvars.Token, contextvars.Token]] = []

    def __enter__(self) -> ModelBlock:
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

    def __init__(self, name: str, options: RunOptions | None = None, *, params: dict[str, Any] | None = None) -> None:
        self.name = name
        self.options = options or RunOptions()
        self.dtype = self.options.precision
        self.ops: list[Op] = []
        self._op_names: set[str] = set()  # the ops' names, to make each unique without a scan
        self.blocks: list[str] = []  # in order of first use
        self.block_ipus: dict[str, int] = {}
        self.default_layout: Layout | None = None
        self.params: dict[str, Any] = dict(params or {})
        # Samples (sequences) per input on average: above 1 when inputs pack several sequences
        # (Graphcore's packed BERT); throughput counts samples.
        self.packing_factor: float = 1.0
        # What one sample is, for the host's data loaders (engine.options.INPUT_KINDS): small tensors
        # unless the model says otherwise (the zoo's image models "image", its language models "text").
        self.input_kind: str = "tensor"
        # Samples in one epoch of the model's dataset in training and in inference (its training and
        # test splits), where the model names its dataset; None: an epoch too long to matter.
        self.dataset_samples: dict[str, int] = {}

    # -- structure -------------------------------------------------------------------------

    @property
    def parameters(self) -> int:
        return sum(op.params for op in self.ops)

    def set_default_layout(self, layout: Layout) -> Model:
        """The partition the model runs with unless the user chooses stages."""
        self.default_layout = layout
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
             out_dtype: str | None = None, groups: int = 1, tied: Op | None = None) -> Tensor:
        block = block or _current_block.get()
        if block is None:
            raise ConfigError(f"Op {name!r} is in no ModelBlock; build it inside `with ModelBlock(...)` "
                              f"or pass block=.")
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
