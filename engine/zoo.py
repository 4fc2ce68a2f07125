"""The model zoo: the tutorial's MNIST network, ResNet-50, BERT, the GPT family and ViT.

Each entry builds a ``Model`` from ``RunOptions`` and its own parameters, with a default partition of
its blocks into stages over IPUs, and states the option defaults it was published with.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popvision_py.errors import ConfigError

from engine.model import Model, ModelBlock
from engine.options import RunOptions
from engine.layout import Layout, StageSpec


@dataclass(frozen=True)
class ZooEntry:
    """A zoo model: how to build it, its parameters and the option defaults it runs with."""

    name: str
    description: str
    build: Callable[..., Model]
    params: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    inference_defaults: dict[str, Any] = field(default_factory=dict)
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Option defaults a preset brings (its published mapping), over ``defaults``.
    preset_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)

    def resolve_params(self, given: dict[str, Any]) -> dict[str, Any]:
        """The model's parameters: a preset (if named), then the given values over the defaults."""
        given = {k: v for k, v in given.items() if v is not None}
        params = dict(self.params)
        preset = given.pop("preset", None)
        if preset is not None:
            if preset not in self.presets:
                choices = ", ".join(self.presets) or "none"
                raise ConfigError(f"Model {self.name} has no preset {preset!r}; its presets are {choices}.")
            params.update(self.presets[preset])
            params["preset"] = preset
        unknown = sorted(set(given) - set(params))
        if unknown:
            raise ConfigError(f"Model {self.name} has no parameter {unknown[0]!r}; its parameters are "
                              f"{', '.join(k for k in params if k != 'preset') or 'none'}.")
        params.update(given)
        for key, value in params.items():
            if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
                raise ConfigError(f"Model parameter {key} must be positive, not {value}.")
        return params


def balanced_stages(model: Model, ipus: int, kind: str = "pipelined",
                    first: int = 0, *, memory_aware: bool = False, head_on_first: bool = False,
                    first_alone: bool = False) -> Layout:
    """Contiguous groups of the model's blocks over ``ipus`` IPUs, balanced by training FLOPs, or
    with ``memory_aware`` by time and memory.

    By FLOPs: cut points sit where the running FLOP total crosses k/ipus of the whole: simple,
    deterministic, and close to how engineers split a uniform stack of layers. Memory-aware (the
    transformers, whose embedding tables hold far more than they compute): an IPU's load is the
    larger of its share of the training FLOPs and its share of the weight memory (weights, gradient
    accumulators and on-chip optimiser state), so a FLOP-light block with a big table (BERT's
    embedding) weighs what it holds; see ``_split``. ``head_on_first``: the last block is a stage
    of its own back on the first IPU (Graphcore's BERT and GPT-2: the head tied to the embedding
    sits with it), its load counted there. ``first_alone``: the first block alone on the first IPU
    (Graphcore's GPT-2 embedding), the other blocks over the rest.
    """
    blocks = list(model.blocks)
    if kind == "phased":
        # Phased: one phase per block, phases dealt round-robin over the IPUs.
        return Layout(kind, [StageSpec(b, first + k % ipus) for k, b in enumerate(blocks)])
    if not memory_aware:
        return Layout(kind, [StageSpec(tuple(grp), first + k) for k, grp in enumerate(_split_by_flops(model, ipus))])
    load = block_loads(model)
    head_on_first = head_on_first and ipus > 1 and len(blocks) > 2
    first_alone = first_alone and ipus > 2 and len(blocks) > 2
    tail = [blocks.pop()] if head_on_first else []
    preload = load[tail[0]] if tail else np.zeros(2)
    if first_alone:
        groups = [[blocks[0]]] + _split(blocks[1:], load, ipus - 1, np.zeros(2))
    else:
        groups = _split(blocks, load, ipus, preload)
    stages = [StageSpec(tuple(grp), first + k) for k, grp in enumerate(groups)]
    if tail:
        stages.append(StageSpec(tuple(tail), first))
    return Layout(kind, stages)


def _split_by_flops(model: Model, ipus: int) -> list[list[str]]:
    blocks = model.blocks
    cost = {b: 0 for b in blocks}
    for op in model.ops:
        cost[op.block] += op.flops + op.backward_flops + op.params * 16  # params: weight-update work
    ipus = max(1, min(ipus, len(blocks)))
    total = sum(cost.values()) or 1
    groups: list[list[str]] = [[] for _ in range(ipus)]
    running, g = 0.0, 0
    for i, block in enumerate(blocks):
        want = min(ipus - 1, int((running + cost[block] / 2) * ipus / total))
        # contiguous: stay or move one group on; and leave enough blocks for the groups left
        g = max(min(want, g + 1) if groups[g] else g, ipus - (len(blocks) - i))
        groups[g].append(block)
        running += cost[block]
    return [grp for grp in groups if grp]


def block_loads(model: Model) -> dict[str, np.ndarray]:
    """Each block's (share of the training FLOPs, share of the weight memory)."""
    o = model.options
    per_param = o.dtype_bytes * (2 if o.training else 1)  # the weights and their gradient accumulators
    if o.training and o.tensor_locations.optimiser_on_chip:
        per_param += 8  # two FP32 moments (the Assumptions default of adam, adamw, lamb)
    loads = {b: np.zeros(2) for b in model.blocks}
    for op in model.ops:
        loads[op.block] += (op.flops + op.backward_flops + op.params * 16, op.params * per_param)
    total = np.maximum(sum(loads.values()), 1)
    return {b: v / total for b, v in loads.items()}


def _split(blocks: list[str], load: dict[str, np.ndarray], groups: int, preload: np.ndarray) -> list[list[str]]:
    """Contiguous groups (exactly ``min(groups, blocks)``, each non-empty); group 0 also carries
    ``preload``. First the least bound B on every group's ``max(time share, memory share)``; then,
    memory kept within B, the least bound on time (the pipeline's pace). Each by bisection, a bound
    tried by filling groups from the last."""
    groups = max(1, min(groups, len(blocks)))
    loads = np.array([load[b] for b in blocks]).reshape(len(blocks), 2)

    def fill(bound: np.ndarray) -> list[int] | None:
        # From the back: each group takes blocks while it stays within the bound (time, memory)
        # and leaves one block for each group before it; group 0 takes the rest (with the preload).
        cuts, end = [], len(blocks)
        for g in range(groups - 1, 0, -1):
            start, acc = end, np.zeros(2)
            while start - 1 >= g and (acc + loads[start - 1] <= bound).all():
                start -= 1
                acc += loads[start]
            if start == end:
                return None
            cuts.append(start)
            end = start
        return sorted(cuts) if (loads[:end].sum(axis=0) + preload <= bound).all() else None

    def least(bound: Callable[[float], np.ndarray], hi: float) -> tuple[float, list[int]]:
        lo, best = 0.0, fill(bound(hi)) or list(range(1, groups))
        for _ in range(50):
            mid = (lo + hi) / 2
            cuts = fill(bound(mid))
            if cuts is None:
                lo = mid
            else:
                hi, best = mid, cuts
        return hi, best

    most = float((loads.sum(axis=0) + preload).max())
    both, _ = least(lambda b: np.array([b, b]), most)
    _, cuts = least(lambda t: np.array([t, both]), both)
    edges = [0, *cuts, len(blocks)]
    return [blocks[a:b] for a, b in zip(edges, edges[1:])]


# -- MNIST: exactly the PopTorch pipelining tutorial's network ---------------------------------


# The datasets' published sizes (training and test splits): MNIST (LeCun et al.) and ImageNet ILSVRC-2012.
# An epoch is this many samples; the language models' tokenised corpora are too long for epochs to matter.
MNIST_SAMPLES = {"training": 60_000, "inference": 10_000}
IMAGENET_SAMPLES = {"training": 1_281_167, "inference": 50_000}


def build_mnist(options: RunOptions) -> Model:
    """conv(1->10, k5) + maxpool 2 + ReLU in B1; conv(10->20, k5) + pool + ReLU in B2; 320->256 + ReLU in
    B3; 256->10 with the cross-entropy loss in B4."""
    m = Model("mnist", options)
    m.dataset_samples = MNIST_SAMPLES
    x = m.input((1, 28, 28))
    with ModelBlock("B1"):
        x = m.relu(m.maxpool2d(m.conv2d(x, 10, kernel=5, name="layer1/conv"), 2, name="layer1/pool"),
                   name="layer1/relu")
    with ModelBlock("B2"):
        x = m.relu(m.maxpool2d(m.conv2d(x, 20, kernel=5, name="layer2/conv"), 2, name="layer2/pool"),
                   name="layer2/relu")
    with ModelBlock("B3"):
        x = m.view(x, (-1, 320))
        x = m.relu(m.linear(x, 256, name="layer3/linear"), name="layer3/relu")
    with ModelBlock("B4"):
        x = m.linear(x, 10, name="layer4/linear")
        if options.training:
            m.loss(x, name="loss/cross_entropy")
    m.set_default_layout(Layout.of("pipelined", "B1", "B2", "B3", "B4"))
    return m


# -- ResNet-50 -------------------------------------------------------------------------------


def build_resnet50(options: RunOptions, *, image_size: int = 224, classes: int = 1000, ipus: int = 4) -> Model:
    """ResNet-50 v1.5: a 7x7 stem, bottleneck stages of 3, 4, 6 and 3 units, a 1000-way classifier."""
    m = Model("resnet50", options, params={"image_size": image_size, "classes": classes, "ipus": ipus})
    m.input_kind = "image"  # ImageNet JPEGs, decoded and augmented on the host
    m.dataset_samples = IMAGENET_SAMPLES
    x = m.input((3, image_size, image_size))
    with ModelBlock("stem"):
        x = m.relu(m.batch_norm(m.conv2d(x, 64, 7, stride=2, padding=3, bias=False, name="stem/conv"),
                                name="stem/bn"), name="stem/relu")
        x = m.maxpool2d(x, 3, stride=2, padding=1, name="stem/pool")
    for layer, (units, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512)), start=1):
        for unit in range(units):
            name = f"layer{layer}.{unit}"
            stride = 2 if unit == 0 and layer > 1 else 1
            with ModelBlock(name):
                y = m.relu(m.batch_norm(m.conv2d(x, width, 1, bias=False, name=f"{name}/conv1"), name=f"{name}/bn1"),
                           name=f"{name}/relu1")
                y = m.relu(m.batch_norm(m.conv2d(y, width, 3, stride=stride, padding=1, bias=False,
                                                 name=f"{name}/conv2"), name=f"{name}/bn2"), name=f"{name}/relu2")
                y = m.batch_norm(m.conv2d(y, width * 4, 1, bias=False, name=f"{name}/conv3"), name=f"{name}/bn3")
                if unit == 0:
                    x = m.batch_norm(m.conv2d(x, width * 4, 1, stride=stride, bias=False, name=f"{name}/downsample"),
                                     name=f"{name}/bn_down")
                x = m.relu(m.add(y, x, name=f"{name}/add"), name=f"{name}/relu3")
    with ModelBlock("head"):
        x = m.global_avgpool(x, name="head/avgpool")
        x = m.linear(x, classes, name="head/fc")
        if options.training:
            m.loss(x, name="head/loss")
    if ipus == 4:
        # Graphcore's split of its TensorFlow ResNet-50 on IPU-POD16/64 (configs.yml
        # mk2_resnet50_bn_16ipus: after stage1/unit3, stage2/unit4 and stage3/unit4, our layer1.2,
        # layer2.3 and layer3.3): lighter early stages, which stash more micro-batches.
        m.set_default_layout(Layout("pipelined", [
            StageSpec(tuple(_blocks_between(m, first, last)), ipu) for ipu, (first, last) in enumerate(
                [("stem", "layer1.2"), ("layer2.0", "layer2.3"), ("layer3.0", "layer3.3"), ("layer3.4", "head")])]))
    else:
        m.set_default_layout(balanced_stages(m, ipus))
    return m


def _blocks_between(m: Model, first: str, last: str) -> list[str]:
    """The model's blocks from ``first`` to ``last``, in order."""
    blocks = m.blocks
    return blocks[blocks.index(first):blocks.index(last) + 1]


# -- transformers ------------------------------------------------------------------------------


def _encoder_layer(m: Model, x: Any, heads: int, ffn: int, name: str) -> Any:
    a = m.attention(x, heads, name=f"{name}/attention")
    x = m.layer_norm(m.add(m.dropout(a, name=f"{name}/attn_dropout"), x, name=f"{name}/attn_add"),
                     name=f"{name}/attn_norm")
    h = m.gelu(m.linear(x, ffn, name=f"{name}/ffn1"), name=f"{name}/gelu")
    h = m.dropout(m.linear(h, x.shape[-1], name=f"{name}/ffn2"), name=f"{name}/ffn_dropout")
    return m.layer_norm(m.add(h, x, name=f"{name}/ffn_add"), name=f"{name}/ffn_norm")


def build_bert(options: RunOptions, *, layers: int = 24, hidden: int = 1024, heads: int = 16, seq_len: int = 128,
               vocab: int = 30522, masked_tokens: int = 20, packing: float = 1.0, tied_embeddings: bool = True,
               ipus: int = 4, name: str = "bert") -> Model:
    """BERT pre-training: embeddings, ``layers`` encoder layers, the masked-LM head.

    ``tied_embeddings``: the MLM decoder shares the word-embedding matrix (BERT's and Graphcore's
    choice); the default partition then puts the head back on IPU 0 with it, as Graphcore's BERT does.
    ``packing``: sequences per input on average (Graphcore's packed BERT packs several short
    sequences into one ``seq_len`` input: 1.17 at 128, 1.7 at 384, 2.0 at 512); the cost is the
    input's, the samples counted are sequences. ``masked_tokens`` are per input.
    """
    if masked_tokens > seq_len:
        raise ConfigError(f"Masked tokens ({masked_tokens}) cannot exceed the sequence length ({seq_len}).")
    packing = _packing(packing)
    m = Model(name, options, params={"layers": layers, "hidden": hidden, "heads": heads, "seq_len": seq_len,
                                     "vocab": vocab, "masked_tokens": masked_tokens, "packing": packing,
                                     "tied_embeddings": bool(tied_embeddings), "ipus": ipus})
    m.input_kind = "text"  # pre-tokenised sequences
    m.packing_factor = packing
    ids = m.input((seq_len,), dtype="int32")
    with ModelBlock("embeddings"):
        word = m.embedding(ids, vocab, hidden, name="embeddings/word")
        x = m.add(word, m.embedding(ids, 512 + 2, hidden, name="embeddings/position_type"), name="embeddings/add")
        x = m.layer_norm(x, name="embeddings/norm")
    for i in range(layers):
        with ModelBlock(f"layer{i}"):
            x = _encoder_layer(m, x, heads, 4 * hidden, f"layer{i}")
    with ModelBlock("head"):
        # The masked-LM head runs on the masked positions only, as Graphcore's BERT does.
        masked = m.slice(x, (options.micro_batch_size, masked_tokens, hidden))
        t = m.layer_norm(m.gelu(m.linear(masked, hidden, name="head/mlm_transform"), name="head/mlm_gelu"),
                         name="head/mlm_norm")
        logits = m.linear(t, vocab, name="head/mlm_decoder", tied_to=word if tied_embeddings else None)
        if options.training:
            m.loss(logits, name="head/mlm_loss")
    # Graphcore places the embeddings (the large vocabulary table) with fewer layers on IPU 0, and
    # the tied head back on IPU 0 (nlp/bert/pytorch/modeling.py: "Classifier --> IPU 0").
    m.set_default_layout(balanced_stages(m, ipus, memory_aware=True, head_on_first=bool(tied_embeddings)))
    return m


def _packing(packing: float) -> float:
    try:
        packing = float(packing)
    except (TypeError, ValueError):
        raise ConfigError(f"Packing must be a number of sequences per input, not {packing!r}.") from None
    if not 1 <= packing <= 64:
        raise ConfigError(f"Packing must be between 1 (no packing) and 64 sequences per input, not {packing}.")
    return packing


GPT_PRESETS: dict[str, dict[str, Any]] = {
    "gpt2-small": {"layers": 12, "hidden": 768, "heads": 12, "seq_len": 1024, "ipus": 4},
    "gpt2-medium": {"layers": 24, "hidden": 1024, "heads": 16, "seq_len": 1024, "ipus": 8},
    "gpt2-large": {"layers": 36, "hidden": 1280, "heads": 20, "seq_len": 1024, "ipus": 16},
    "gpt2-xl": {"layers": 48, "hidden": 1600, "heads": 25, "seq_len": 1024, "ipus": 16},
    "gpt3-2.7b": {"layers": 32, "hidden": 2560, "heads": 32, "seq_len": 2048, "ipus": 32},
    "gpt3-13b": {"layers": 40, "hidden": 5120, "heads": 40, "seq_len": 2048, "ipus": 64},
    "gpt3-175b": {"layers": 96, "hidden": 12288, "heads": 96, "seq_len": 2048, "ipus": 8},
}

# The blog's GPT-3 175B mapping onto an IPU-POD256: a pipeline of depth p = 8, each stage's tensors
# sharded over t = 8 IPUs (64 IPUs per replica), r = 4 replicas, phased execution streaming the
# weights from streaming memory, split over the replicas (replicated tensor sharding). Attention is
# computed in 4 pieces, as Graphcore's phased large-model implementations do at long sequences
# (graphcore/examples PopXL GPT models: `attention_serialisation`, "can reduce the temporary
# activation requirement when using longer sequence lengths").
GPT_PRESET_DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt3-175b": {"tensor_sharding": 8, "replication_factor": 4, "system": "IPU-POD256",
                  "replicated_tensor_sharding": True, "offload_activations": True,
                  "available_memory_proportion": 0.15, "attention_serialisation": 4},
}


def build_gpt(options: RunOptions, *, layers: int = 12, hidden: int = 768, heads: int = 12, seq_len: int = 1024,
              vocab: int = 50257, tied_embeddings: bool = True, embedding_alone: bool = False, ipus: int = 4,
              preset: str | None = None) -> Model:
    """A GPT decoder: token and position embeddings, ``layers`` decoder layers, the LM head.

    Presets up to GPT-3 175B; the largest default to phased execution, weights streamed per phase,
    because their weights cannot all stay on chip (the blog post's mapping onto an IPU-POD256).
    ``tied_embeddings``: the LM head shares the token-embedding matrix (GPT-2's choice); a pipeline
    then puts the head back on IPU 0 with it. ``embedding_alone``: the embeddings alone on IPU 0 and
    the layers over the other IPUs (Graphcore's GPT-2: ``layers_per_ipu [0, ...]``).
    """
    params = {"layers": layers, "hidden": hidden, "heads": heads, "seq_len": seq_len, "vocab": vocab,
              "tied_embeddings": bool(tied_embeddings), "embedding_alone": bool(embedding_alone), "ipus": ipus}
    if preset:
        params["preset"] = preset
    m = Model("gpt", options, params=params)
    m.input_kind = "text"  # pre-tokenised sequences
    ids = m.input((seq_len,), dtype="int32")
    with ModelBlock("embeddings"):
        token = m.embedding(ids, vocab, hidden, name="embeddings/token")
        x = m.add(token, m.embedding(ids, seq_len, hidden, name="embeddings/position"), name="embeddings/add")
    for i in range(layers):
        with ModelBlock(f"layer{i}"):
            # The causal mask hides scores, it does not skip computing them: the cost is an encoder's.
            x = _encoder_layer(m, x, heads, 4 * hidden, f"layer{i}")
    with ModelBlock("head"):
        x = m.layer_norm(x, name="head/norm")
        logits = m.linear(x, vocab, bias=False, name="head/lm", tied_to=token if tied_embeddings else None)
        if options.training:
            m.loss(logits, name="head/loss")
    weights = m.parameters * options.dtype_bytes
    on_chip = ipus * options.tensor_sharding * 900e6 * 0.5  # weights beyond half the IPUs' memory stream
    if weights > on_chip:
        # Phased pipeline: contiguous stages on distinct IPUs, each streaming its ops' weights.
        # (the tied head streams the embedding's matrix itself: it stays on the last stage)
        m.set_default_layout(balanced_stages(m, ipus, memory_aware=True,
                                               first_alone=bool(embedding_alone)).with_kind("phased"))
    else:
        m.set_default_layout(balanced_stages(m, ipus, memory_aware=True, head_on_first=bool(tied_embeddings),
                                               first_alone=bool(embedding_alone)))
    return m


def build_vit(options: RunOptions, *, layers: int = 12, hidden: int = 768, heads: int = 12, patch: int = 16,
              image_size: int = 224, classes: int = 1000, ipus: int = 4) -> Model:
    """ViT-Base/16: a patch-embedding convolution, a class token, ``layers`` encoder layers, a classifier."""
    m = Model("vit-base", options, params={"layers": layers, "hidden": hidden, "heads": heads, "patch": patch,
                                           "image_size": image_size, "classes": classes, "ipus": ipus})
    m.input_kind = "image"  # ImageNet JPEGs, decoded and augmented on the host
    m.dataset_samples = IMAGENET_SAMPLES
    x = m.input((3, image_size, image_size))
    tokens = (image_size // patch) ** 2 + 1
    with ModelBlock("embeddings"):
        x = m.conv2d(x, hidden, patch, stride=patch, name="embeddings/patch")
        x = m.slice(x, (options.micro_batch_size, tokens, hidden))  # the patches and the class token
        x = m.dropout(x, name="embeddings/dropout")
    for i in range(layers):
        with ModelBlock(f"layer{i}"):
            x = _encoder_layer(m, x, heads, 4 * hidden, f"layer{i}")
    with ModelBlock("head"):
        x = m.layer_norm(x, name="head/norm")
        cls = m.slice(x, (options.micro_batch_size, hidden))  # the class token
        logits = m.linear(cls, classes, name="head/classifier")
        if options.training:
            m.loss(logits, name="head/loss")
    m.set_default_layout(balanced_stages(m, ipus))
    return m


def _bert_entry(name: str, size: str, *, layers: int, hidden: int, heads: int, **defaults: Any) -> ZooEntry:
    """A BERT size: its shape, and option defaults beyond those every size shares."""
    return ZooEntry(name, f"BERT-{size} pre-training ({layers} layers, hidden {hidden}), pipelined over 4 IPUs.",
                    functools.partial(build_bert, name=name),
                    params={"layers": layers, "hidden": hidden, "heads": heads, "seq_len": 128, "vocab": 30522,
                            "masked_tokens": 20, "packing": 1.0, "tied_embeddings": True, "ipus": 4},
                    defaults={"micro_batch_size": 8, "device_iterations": 1, "gradient_accumulation": 16,
                              "recompute": True, "optimiser": "lamb", "partials": "fp16", "first_moment_type": "fp16",
                              **defaults},
                    inference_defaults={"micro_batch_size": 8, "device_iterations": 16})


ZOO: dict[str, ZooEntry] = {
    e.name: e
    for e in (
        ZooEntry("mnist", "The PopTorch pipelining tutorial's CNN: blocks B1..B4 on 4 IPUs, pipelined.",
                 build_mnist,
                 defaults={"micro_batch_size": 40, "device_iterations": 10, "gradient_accumulation": 10},
                 inference_defaults={"micro_batch_size": 8, "device_iterations": 100}),
        ZooEntry("resnet50", "ResNet-50 v1.5 image classification (ImageNet, 224x224), pipelined over 4 IPUs.",
                 build_resnet50,
                 params={"image_size": 224, "classes": 1000, "ipus": 4},
                 # Graphcore's published run (configs.yml mk2_resnet50_bn_16ipus): micro-batch 16,
                 # GA 256, momentum SGD with FP32 accumulators ("16.32"), half partials, proportion 0.15
                 defaults={"micro_batch_size": 16, "device_iterations": 1, "gradient_accumulation": 256,
                           "recompute": True, "optimiser": "sgd", "partials": "fp16", "accum_type": "fp32",
                           "use_combined_accum": False, "available_memory_proportion": 0.15},
                 inference_defaults={"micro_batch_size": 16, "device_iterations": 16}),
        _bert_entry("bert-base", "Base", layers=12, hidden=768, heads=12),
        _bert_entry("bert-large", "Large", layers=24, hidden=1024, heads=16, offload_optimiser=True,
                    available_memory_proportion=0.15),
        ZooEntry("gpt", "A GPT decoder; presets from gpt2-small to gpt3-175b (phased pipeline p=8 x t=8, 4 replicas).",
                 build_gpt,
                 params={"layers": 12, "hidden": 768, "heads": 12, "seq_len": 1024, "vocab": 50257,
                         "tied_embeddings": True, "embedding_alone": False, "ipus": 4},
                 defaults={"micro_batch_size": 1, "device_iterations": 1, "gradient_accumulation": 16,
                           "recompute": True, "offload_optimiser": True, "partials": "fp16",
                           # Graphcore's GPT-2 runs set 0.15 to 0.3 per IPU (nlp/gpt2/pytorch/run/*.sh)
                           "available_memory_proportion": 0.2},
                 inference_defaults={"micro_batch_size": 1, "device_iterations": 16},
                 presets=GPT_PRESETS, preset_defaults=GPT_PRESET_DEFAULTS),
        ZooEntry("vit-base", "ViT-Base/16 image classification (224x224), pipelined over 4 IPUs.",
                 build_vit,
                 params={"layers": 12, "hidden": 768, "heads": 12, "patch": 16, "ipus": 4},
                 defaults={"micro_batch_size": 8, "device_iterations": 1, "gradient_accumulation": 16,
                           "recompute": True, "partials": "fp16"},
                 inference_defaults={"micro_batch_size": 16, "device_iterations": 16}),
    )
}


def zoo_entry(name: str) -> ZooEntry:
    """The zoo entry for ``name``; a ConfigError naming the zoo otherwise."""
    if name not in ZOO:
        raise ConfigError(f"Unknown model {name!r}; the zoo has {', '.join(ZOO)}, or give a path to a .py file.")
    return ZOO[name]


def describe_partition(layout: Layout) -> str:
    """``B1@0 B2@1`` style text for a strategy's stages (the CLI's --stages syntax)."""
    return " ".join(f"{','.join(_compress(s.blocks))}@{s.ipu}" for s in layout.stages)


def _compress(blocks: tuple[str, ...]) -> list[str]:
    # layer0,layer1,...,layer5 reads better as layer0..layer5 in listings
    if len(blocks) > 2:
        return [f"{blocks[0]}..{blocks[-1]}"]
    return list(blocks)


def estimate_ipus(layout: Layout) -> int:
    return 1 + max(layout.ipus, default=0)


__all__ = ["ZOO", "ZooEntry", "balanced_stages", "build_mnist", "describe_partition", "zoo_entry"]
