"""From one real PyTorch forward pass to an engine ``Model``: the ops PyTorch dispatched, per block.

Why a ``TorchDispatchMode``: it sees every ATen op the forward really runs, after Python control
flow, module hooks and the composite ops' decompositions, with real shapes and dtypes; it needs no
tracing (``torch.fx`` fails on data-dependent Python) and no second run (the capture watches the
first micro-batch the script trains on). Global module hooks name each op after the module that
ran it; the caller's ``where()`` (``poptorch``'s current Block) gives its block.

The ATen ops are then mapped onto the engine's builders: convolutions, linear layers and matmuls
(a decoder reading an earlier embedding's table: a linear tied to it), attention (PyTorch's fused
encoder layer: the ops of the unfused one), norms, pooling, embeddings, the cross-entropy loss
(log-softmax + NLL as one op, as the engine's ``loss``; other losses by their FLOPs), dropout
(PyTorch's random mask times the input), elementwise ops. Views and reshapes move no data and are
no op, as in the engine. Anything else becomes generic work by
its FLOPs (``torch.utils.flop_counter``'s formula where PyTorch has one, else one per output
element) and its bytes; ``Captured.generic`` names those ops so the caller can warn.

This module is the engine's only use of torch, imported only by callers that have it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from engine.model import Model, Tensor
from engine.options import RunOptions

# Ops that only look at their input differently (views, reshapes, copies of the same values):
# no data moves on the IPU, so no op, as the engine's Model.view.
ALIASES = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "t", "t_", "transpose", "transpose_", "permute", "expand",
    "expand_as", "unsqueeze", "unsqueeze_", "squeeze", "squeeze_", "slice", "select", "alias", "detach", "as_strided",
    "split", "split_with_sizes", "unbind", "chunk", "lift_fresh", "lift_fresh_copy", "clone", "contiguous",
    "flatten", "unflatten", "narrow", "view_as", "numpy_T", "view_copy", "permute_copy", "expand_copy",
    "unsafe_split", "movedim", "squeeze_copy", "unsqueeze_copy", "t_copy", "transpose_copy", "_to_copy", "to",
    # PyTorch's nested tensors (nn.TransformerEncoder drops padded tokens in inference): the IPU has
    # none and runs the padded tensor, which a nested one stands for here
    "_nested_tensor_from_mask", "to_padded_tensor",
})
# Ops that make a tensor of their input's shape without reading its values (random masks, fills).
FILLS = frozenset({
    "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like", "new_empty",
    "new_zeros", "new_ones", "new_full", "new_empty_strided", "bernoulli", "bernoulli_", "uniform_", "normal_",
    "fill_", "zero_", "random_", "exponential_",
})
# Random draws: a value computed from them only is a dropout mask.
RANDOM = frozenset({"bernoulli", "bernoulli_", "rand_like", "uniform_"})
# Elementwise ops: FLOPs per output element (transcendentals count a few).
ELEMENTWISE = {
    "add": 1, "add_": 1, "sub": 1, "sub_": 1, "rsub": 1, "mul": 1, "mul_": 1, "div": 1, "div_": 1, "neg": 1,
    "abs": 1, "clamp": 1, "clamp_": 1, "clamp_min": 1, "clamp_max": 1, "maximum": 1, "minimum": 1, "where": 1,
    "hardtanh": 1, "hardtanh_": 1, "leaky_relu": 1, "leaky_relu_": 1, "threshold": 1, "masked_fill": 1,
    "masked_fill_": 1, "eq": 1, "ne": 1, "lt": 1, "le": 1, "gt": 1, "ge": 1, "pow": 2, "sqrt": 4, "rsqrt": 4,
    "exp": 4, "log": 4, "tanh": 4, "sigmoid": 4, "silu": 5, "silu_": 5, "elu": 5, "hardswish": 3, "hardsigmoid": 2,
    "erf": 4, "sin": 4, "cos": 4, "reciprocal": 1, "addcmul": 2, "addcdiv": 2, "lerp": 3,
}
# Reductions: FLOPs per input element.
REDUCTIONS = {"sum": 1, "mean": 1, "amax": 1, "amin": 1, "max": 1, "min": 1, "var": 3, "std": 3, "norm": 2,
              "argmax": 1, "argmin": 1, "prod": 1, "logsumexp": 6, "var_mean": 3, "std_mean": 3}
# Losses other than cross-entropy (which is the engine's own op): FLOPs per input element.
LOSSES = {"mse_loss": 3, "l1_loss": 2, "smooth_l1_loss": 4, "huber_loss": 4, "binary_cross_entropy": 6,
          "binary_cross_entropy_with_logits": 8, "kl_div": 4}
ATTENTION = frozenset({"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
                       "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                       "_scaled_dot_product_attention_math"})
BATCH_NORMS = frozenset({"native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                         "_native_batch_norm_legit_functional", "batch_norm"})


@dataclass
class OpRecord:
    """One ATen op of the captured forward, with the tensors it read and wrote (kept alive)."""

    func: Any
    args: tuple
    kwargs: dict
    out: Any
    block: str | None
    ipu: int | None
    module: str

    @property
    def name(self) -> str:
        return self.func.overloadpacket.__name__ if hasattr(self.func, "overloadpacket") else str(self.func)


class _OpRecorder(TorchDispatchMode):
    """Each ATen op the model runs, with its block, IPU and innermost module (see ``recording``)."""

    def __init__(self, where: Callable[[], tuple[str | None, int | None]]) -> None:
        super().__init__()
        self.where = where
        self.records: list[OpRecord] = []
        self.modules: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        block, ipu = self.where()
        self.records.append(OpRecord(func, args, kwargs, out, block, ipu, self.modules[-1] if self.modules else ""))
        return out


@contextlib.contextmanager
def recording(root: torch.nn.Module, where: Callable[[], tuple[str | None, int | None]]) -> Iterator[_OpRecorder]:
    """Record the ATen ops run inside the ``with``, each with the innermost module running it
    (its path in ``root``, ``/``-separated: ``model/layer1/conv``) and ``where()``'s block."""
    names = {id(m): name.replace(".", "/") for name, m in root.named_modules()}
    recorder = _OpRecorder(where)

    def enter(module: torch.nn.Module, _inputs: Any) -> None:
        recorder.modules.append(names.get(id(module), type(module).__name__))

    def leave(module: torch.nn.Module, _inputs: Any, _output: Any) -> None:
        if recorder.modules:
            recorder.modules.pop()

    pre = torch.nn.modules.module.register_module_forward_pre_hook(enter)
    post = torch.nn.modules.module.register_module_forward_hook(leave)
    try:
        with recorder:
            yield recorder
    finally:
        pre.remove()
        post.remove()


@dataclass
class Captured:
    """The engine model of a captured forward, and what it could not name."""

    model: Model
    # ATen op -> how many of its executions became generic work (FLOPs and bytes only)
    generic: Counter = field(default_factory=Counter)
    # block -> IPU, for the blocks that named one (PopTorch's auto-staging)
    block_ipus: dict[str, int] = field(default_factory=dict)


def engine_dtype(dtype: torch.dtype) -> str:
    """The engine's dtype (the IPU has no 64-bit types: PopTorch casts them to 32 bits)."""
    if dtype in (torch.float16, torch.bfloat16):
        return "fp16"
    return "fp32" if dtype.is_floating_point else "int32"


def _tensors(value: Any) -> list[torch.Tensor]:
    return [x for x in tree_flatten(value)[0] if isinstance(x, torch.Tensor)]


def _pair(value: Any, default: int) -> tuple[int, int]:
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return default, default
    if isinstance(value, (list, tuple)):
        return (int(value[0]), int(value[-1]))
    return int(value), int(value)


class _Translator:
    """Walks the records in order, building the engine model."""

    def __init__(self, records: Sequence[OpRecord], inputs: Sequence[torch.Tensor], root: torch.nn.Module,
                 name: str, options: RunOptions) -> None:
        self.records = records
        self.m = Model(name, options)
        self.env: dict[int, Tensor] = {}  # id(torch tensor) -> engine tensor (activations and host inputs)
        self.params: dict[int, int] = {id(p): id(p) for p in root.parameters()}  # id -> id of its parameter
        self.param_elements = {id(p): p.numel() for p in root.parameters()}
        self.counted: set[int] = set()  # parameters already counted by an op
        # parameter -> the output of the embedding op that counted it: a later matmul reading the
        # same table (a decoder tied to the word embedding) is a linear tied to that op
        self.tables: dict[int, Tensor] = {}
        self.masks: set[int] = set()
        self.generic: Counter = Counter()
        for t in inputs:
            self.env[id(t)] = Tensor(tuple(t.shape), engine_dtype(t.dtype), -1)
        blocks = [r.block for r in records if r.block is not None]
        self.first_block = blocks[0] if blocks else "model"
        # log-softmax outputs consumed by an NLL loss: the pair is one cross-entropy op
        self.fused = {id(_tensors(r.args)[0]) for r in records if r.name == "nll_loss_forward"}
        self.block = self.first_block
        self.op_name = ""

    # -- helpers -------------------------------------------------------------------------------

    def t(self, x: torch.Tensor) -> Tensor:
        return self.env[id(x)]

    def is_act(self, x: Any) -> bool:
        return isinstance(x, torch.Tensor) and id(x) in self.env

    def take_params(self, *xs: Any) -> int | None:
        """The elements of the parameters ``xs`` stand for, counting each parameter once; None when
        one of them was counted already (a shared weight) or is not a parameter."""
        total = 0
        for x in xs:
            if x is None:
                continue
            base = self.params.get(id(x)) if isinstance(x, torch.Tensor) else None
            if base is None or base in self.counted:
                return None
        for x in xs:
            if x is not None:
                base = self.params[id(x)]
                self.counted.add(base)
                total += self.param_elements[base]
        return total

    def shape(self, x: torch.Tensor, acts: Sequence[torch.Tensor]) -> tuple[int, ...]:
        """``x``'s shape; a nested tensor's is its padded shape, the first activation's it was made from."""
        return self.t(acts[0]).shape if x.is_nested else tuple(x.shape)

    def tied_table(self, weight: Any, *others: Any) -> Tensor | None:
        """The output of the embedding whose whole table ``weight`` is (transposed or not), when
        ``others`` (a bias) are parameters not counted yet, which this counts; else None."""
        base = self.params.get(id(weight)) if isinstance(weight, torch.Tensor) else None
        if base not in self.tables or weight.numel() != self.param_elements[base]:
            return None  # not a table, or a part of one (a few rows: generic work)
        if any(x is not None for x in others) and self.take_params(*others) is None:
            return None
        return self.tables[base]

    def uncounted_params(self, xs: Sequence[torch.Tensor]) -> int:
        total = 0
        for x in xs:
            base = self.params.get(id(x))
            if base is not None and base not in self.counted:
                self.counted.add(base)
                total += self.param_elements[base]  # the weight, not the view or slice of it read here
        return total

    # -- the walk ------------------------------------------------------------------------------

    def run(self) -> Captured:
        block_ipus: dict[str, int] = {}
        for rec in self.records:
            if rec.block is not None and rec.ipu is not None:
                block_ipus.setdefault(rec.block, rec.ipu)
            self.step(rec)
        return Captured(self.m, self.generic, block_ipus)

    def step(self, rec: OpRecord) -> None:
        name = rec.name
        ins = _tensors((rec.args, rec.kwargs))
        outs = _tensors(rec.out)
        if not outs:
            return
        acts = [x for x in ins if id(x) in self.env]
        if not acts or name in FILLS:
            # Weights, constants and random masks: no op on the IPU's activations.
            for o in outs:
                self.env.pop(id(o), None)  # an in-place fill of an activation makes it a constant
                if any(id(x) in self.params for x in ins) and name not in FILLS:
                    self.params[id(o)] = next(self.params[id(x)] for x in ins if id(x) in self.params)
                if name in RANDOM or any(id(x) in self.masks for x in ins):
                    self.masks.add(id(o))
            return
        if any(d == 0 for o in outs for d in self.shape(o, acts)):
            return  # empty tensors do no work
        if rec.block is not None:
            self.block = rec.block
        self.op_name = f"{rec.module}/{name}" if rec.module else name
        src = self.t(acts[0])
        if name in ALIASES and not (name in ("_to_copy", "to") and outs[0].dtype != acts[0].dtype):
            for o in outs:
                self.env[id(o)] = Tensor(self.shape(o, acts), src.dtype, src.producer)
            return
        if name == "_log_softmax" and id(outs[0]) in self.fused:
            self.env[id(outs[0])] = src  # the loss reads the logits
            return
        result = self.mapped(rec, name, acts)
        if result is None:
            result = self.as_generic(rec, name, acts, outs)
        for o in outs:
            shape = self.shape(o, acts)
            self.env[id(o)] = result if shape == result.shape else Tensor(shape, result.dtype, result.producer)

    def mapped(self, rec: OpRecord, name: str, acts: list[torch.Tensor]) -> Tensor | None:
        """The op as one of the engine's builders, or None."""
        m, a, block, op = self.m, rec.args, self.block, self.op_name
        if name == "convolution" and self.is_act(a[0]):
            x, w, bias, stride, padding, dilation, transposed, _, groups = a[:9]
            kh, kw = (w.shape[2], w.shape[3]) if w.dim() == 4 else (0, -1)
            (sh, sw), (ph, pw) = _pair(stride, 1), _pair(padding, 0)
            if (x.dim() == 4 and kh == kw and sh == sw and ph == pw and not transposed and groups == 1
                    and all(d == 1 for d in dilation) and self.take_params(w, bias) is not None):
                return m.conv2d(self.t(x), w.shape[0], kh, sh, ph, bias=bias is not None, name=op, block=block)
            return None
        if name == "addmm" and self.is_act(a[1]) and a[1].dim() == 2:
            if self.take_params(a[2], a[0]) is not None:
                return m.linear(self.t(a[1]), a[2].shape[1], bias=True, name=op, block=block)
            if (table := self.tied_table(a[2], a[0])) is not None:
                return m.linear(self.t(a[1]), a[2].shape[1], bias=True, name=op, block=block, tied_to=table)
            return None
        if name in ("mm", "bmm", "matmul", "baddbmm"):
            x, y = (a[1], a[2]) if name == "baddbmm" else (a[0], a[1])
            if self.is_act(x) and self.is_act(y) and x.dim() == y.dim() and x.shape[:-2] == y.shape[:-2]:
                return m.matmul(self.t(x), self.t(y), name=op, block=block)
            if name == "mm" and self.is_act(x) and self.take_params(y) is not None:
                return m.linear(self.t(x), y.shape[1], bias=False, name=op, block=block)
            if name == "mm" and self.is_act(x) and (table := self.tied_table(y)) is not None:
                return m.linear(self.t(x), y.shape[1], bias=False, name=op, block=block, tied_to=table)
            return None
        if name in ("relu", "relu_"):
            return m.relu(self.t(a[0]), name=op, block=block)
        if name == "gelu":
            return m.gelu(self.t(a[0]), name=op, block=block)
        if name in ("add", "add_") and len(acts) == 2 and acts[0].shape == acts[1].shape:
            return m.add(self.t(acts[0]), self.t(acts[1]), name=op, block=block)
        if name == "mul" and len(acts) == 1 and any(id(x) in self.masks for x in _tensors(a)):
            return m.dropout(self.t(acts[0]), name=op, block=block)
        if name == "native_dropout":
            return m.dropout(self.t(a[0]), name=op, block=block)
        if name in ("_softmax", "_log_softmax", "softmax", "_safe_softmax"):
            return m.softmax(self.t(a[0]), name=op, block=block)
        if name == "nll_loss_forward" and self.is_act(a[0]) and len(a[0].shape) == 2:
            return m.loss(self.t(a[0]), name=op, block=block)
        if name in ("max_pool2d_with_indices", "max_pool2d") and a[0].dim() == 4:
            k, s = _pair(a[1], 1), _pair(a[2] if len(a) > 2 else None, -1)
            p, d = _pair(a[3] if len(a) > 3 else 0, 0), _pair(a[4] if len(a) > 4 else 1, 1)
            s = k if s[0] < 0 else s
            x = self.t(a[0])
            if k[0] == k[1] and s[0] == s[1] and p[0] == p[1] and d == (1, 1):
                h, w = x.shape[2], x.shape[3]
                expected = ((h + 2 * p[0] - k[0]) // s[0] + 1, (w + 2 * p[0] - k[0]) // s[0] + 1)
                if expected == tuple(_tensors(rec.out)[0].shape[2:]):
                    return m.maxpool2d(x, k[0], s[0], p[0], name=op, block=block)
            return None
        if (name == "mean" and a[0].dim() == 4 and len(a) > 1 and isinstance(a[1], (list, tuple))
                and sorted(int(d) % 4 for d in a[1]) == [2, 3]):
            return m.global_avgpool(self.t(a[0]), name=op, block=block)
        if name == "_adaptive_avg_pool2d" and a[0].dim() == 4 and tuple(a[1]) == (1, 1):
            return m.global_avgpool(self.t(a[0]), name=op, block=block)
        if name == "native_layer_norm" and self.is_act(a[0]):
            self.uncounted_params([x for x in a[2:4] if x is not None])
            return m.layer_norm(self.t(a[0]), name=op, block=block)
        if name in BATCH_NORMS and self.is_act(a[0]) and a[0].dim() >= 2:
            self.uncounted_params([x for x in a[1:3] if isinstance(x, torch.Tensor)])
            return m.batch_norm(self.t(a[0]), name=op, block=block)
        if name == "embedding" and self.is_act(a[1]) and self.take_params(a[0]) is not None:
            out = m.embedding(self.t(a[1]), a[0].shape[0], a[0].shape[1], name=op, block=block)
            self.tables[self.params[id(a[0])]] = out
            return out
        if name in ATTENTION and all(self.is_act(x) for x in a[:3]) and a[0].dim() == 4:
            q, k, v = (self.t(x) for x in a[:3])
            k_t = Tensor((*k.shape[:-2], k.shape[-1], k.shape[-2]), k.dtype, k.producer)
            scores = m.matmul(q, k_t, name=f"{op}/scores", block=block)
            probs = m.softmax(scores, name=f"{op}/softmax", block=block)
            return m.matmul(probs, v, name=f"{op}/context", block=block)
        if (name == "_native_multi_head_attention" and a[0] is a[1] is a[2] and self.is_act(a[0]) and a[0].dim() == 3
                and self.take_params(*a[5:9]) is not None):
            # nn.MultiheadAttention's fused self-attention (eval, no gradients): the engine's attention
            # holds the same weights (QKV 3h x h + 3h, output h x h + h); a mask adds no op, as in the
            # scaled-dot-product attention above
            return m.attention(self.t(a[0]), int(a[4]), name=op, block=block)
        if (name == "_transformer_encoder_layer_fwd" and self.is_act(a[0]) and a[0].dim() == 3
                and self.take_params(*a[3:7], *a[10:18]) is not None):
            return self.encoder_layer(self.t(a[0]), heads=int(a[2]), ffn=int(a[14].shape[0]), gelu=bool(a[7]),
                                      norm_first=bool(a[8]))
        # Work the engine has no builder for but whose FLOPs are known: per output element
        # (elementwise), per input element (losses, reductions) or none (concatenations).
        out = _tensors(rec.out)[0]
        if name in ELEMENTWISE or name in ("_to_copy", "to"):
            return self.generic_op(rec, acts, ELEMENTWISE.get(name, 1) * out.numel(), name.rstrip("_"),
                                   engine_dtype(out.dtype), a)
        if name in LOSSES:
            return self.generic_op(rec, acts, LOSSES[name] * acts[0].numel(), name, "fp32", a)
        if name in REDUCTIONS:
            return self.generic_op(rec, acts, REDUCTIONS[name] * acts[0].numel(), "reduce", engine_dtype(out.dtype), a)
        if name in ("cat", "stack"):
            return self.generic_op(rec, acts, 0, "concat", engine_dtype(out.dtype), a)
        return None

    def encoder_layer(self, x: Tensor, *, heads: int, ffn: int, gelu: bool, norm_first: bool) -> Tensor:
        """nn.TransformerEncoderLayer's fused inference path (``_transformer_encoder_layer_fwd``) as
        the ops its unfused path gives: self-attention, add, layer norm, linear, ReLU or GELU, linear,
        add, layer norm (the norms before each sublayer with ``norm_first``). Its 12 weights are
        those ops' weights; a mask adds no op, as in the unfused path's attention."""
        m, block, op = self.m, self.block, self.op_name
        hidden = x.shape[-1]

        def norm(y: Tensor, k: int) -> Tensor:
            return m.layer_norm(y, name=f"{op}/norm{k}", block=block)

        def feed_forward(y: Tensor) -> Tensor:
            y = m.linear(y, ffn, name=f"{op}/linear1", block=block)
            y = (m.gelu if gelu else m.relu)(y, name=f"{op}/activation", block=block)
            return m.linear(y, hidden, name=f"{op}/linear2", block=block)

        if norm_first:
            x = m.add(x, m.attention(norm(x, 1), heads, name=f"{op}/self_attn", block=block), name=f"{op}/add1",
                      block=block)
            return m.add(x, feed_forward(norm(x, 2)), name=f"{op}/add2", block=block)
        x = norm(m.add(x, m.attention(x, heads, name=f"{op}/self_attn", block=block), name=f"{op}/add1",
                       block=block), 1)
        return norm(m.add(x, feed_forward(x), name=f"{op}/add2", block=block), 2)

    def as_generic(self, rec: OpRecord, name: str, acts: list[torch.Tensor], outs: list[torch.Tensor]) -> Tensor:
        """Work the engine has no builder for: its FLOPs (PyTorch's formula, else one per output
        element), its bytes, and the weights it reads."""
        out = outs[0]
        flops = out.numel()
        formula = flop_registry.get(getattr(rec.func, "overloadpacket", None))
        if formula is not None:
            try:
                flops = int(formula(*rec.args, **rec.kwargs, out_val=rec.out))
            except Exception:  # noqa: BLE001 - a formula that does not apply: one FLOP per element
                flops = out.numel()
        self.generic[f"aten.{name}"] += 1
        return self.generic_op(rec, acts, flops, name.rstrip("_"), engine_dtype(out.dtype), (rec.args, rec.kwargs))

    def generic_op(self, rec: OpRecord, acts: list[torch.Tensor], flops: int, kind: str, out_dtype: str,
                   reads: Any) -> Tensor:
        """The engine's generic op for ``rec``: ``flops`` as given, reading ``acts`` and the weights
        among ``reads`` not counted yet, writing its first output."""
        out = _tensors(rec.out)[0]
        return self.m.generic([self.t(x) for x in acts], self.shape(out, acts), flops, kind=kind, name=self.op_name,
                              block=self.block, params=self.uncounted_params(_tensors(reads)), out_dtype=out_dtype)


def to_model(records: Sequence[OpRecord], inputs: Sequence[torch.Tensor], root: torch.nn.Module, name: str,
             options: RunOptions) -> Captured:
    """The engine model of a recorded forward: ``inputs`` are the host tensors it was called with,
    ``root`` the module whose parameters are its weights, ``options`` the engine's."""
    return _Translator(records, inputs, root, name, options).run()


def model_precision(root: torch.nn.Module) -> str:
    """The precision the model's weights are in (FP16 when most of them are half)."""
    half = sum(p.numel() for p in root.parameters() if p.dtype in (torch.float16, torch.bfloat16))
    total = sum(p.numel() for p in root.parameters())
    return "fp16" if total and half * 2 > total else "fp32"


def micro_batch_size(inputs: Sequence[torch.Tensor]) -> int:
    """The micro-batch: the leading dimension of the first input with one."""
    for t in inputs:
        if t.dim() >= 1:
            return int(t.shape[0])
    return 1


