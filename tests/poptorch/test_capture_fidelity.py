"""Capture cases that used to fall back to generic work: a decoder tied to the word embedding (one
weight read by two ops), PyTorch's fused inference path of nn.TransformerEncoderLayer (with masks and
nested tensors), nn.MultiheadAttention's fused attention under a mask."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import popvision_py as pv
import poptorch
from poptorch._script import capture_script
from popvision_py.cli import main

# A language model whose head is tied to its word embedding (BERT's MLM head, GPT-2's LM head):
# V x H embedding, L linear layers of H x H, the head's weight the embedding's table, its own bias.
V, H, L, B, S = 500, 64, 3, 4, 16
TIED_LM = f"""\
import torch
import poptorch


class TiedLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding({V}, {H})
        self.layers = torch.nn.ModuleList(torch.nn.Linear({H}, {H}) for _ in range({L}))
        self.head = torch.nn.Linear({H}, {V})
        self.head.weight = self.embed.weight

    def forward(self, ids, labels):
        x = self.embed(ids)
        for layer in self.layers:
            x = torch.relu(layer(x))
        logits = self.head(x)
        return logits, torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


net = TiedLM()
model = poptorch.trainingModel(net, poptorch.Options(), optimizer=poptorch.optim.SGD(net.parameters(), lr=0.1))
ids = torch.randint(0, {V}, ({B}, {S}))
model(ids, ids)
"""


def test_a_head_tied_to_the_word_embedding_is_a_matmul_reading_the_embeddings_table(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    # GIVEN the tied language model as a PopTorch script
    script = tmp_path / "tied_lm.py"
    script.write_text(TIED_LM)
    monkeypatch.chdir(tmp_path)
    # WHEN popvision emulates it and writes its profile
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(main, ["run", str(script), "--emulate-only", "-q", "--profile", "--profile-dir",
                                           "p"])
    assert result.exit_code == 0, result.output
    assert not [w for w in caught if issubclass(w.category, poptorch.GenericOpsWarning)]
    with pv.open(tmp_path / "p" / "profile.pop") as report:
        ops = report.profile.read_pandas("ops")
        variables = report.profile.read_pandas("variables")
        parameters = report.profile.manifest["run"]["parameters"]
    forward = ops[ops["pass"].astype(str) == "forward"]
    # THEN the head is a matmul (the AMP units' work), its FLOPs 2 x tokens x H x V
    head = forward[forward["name"].astype(str).str.startswith("head/")]
    assert head["kind"].astype(str).tolist() == ["matmul"]
    assert int(head["flops"].iloc[0]) == 2 * (B * S) * H * V
    assert set(forward["kind"].astype(str)) == {"embedding", "matmul", "relu", "cross_entropy"}
    # AND the weights are counted once: the table, the layers' matrices and biases, the head's bias alone
    weights = V * H + L * (H * H + H) + V
    assert parameters == weights
    live = variables[(variables["category"].astype(str) == "weights") & variables["always_live"]]
    assert int(live["bytes"].sum()) == weights * 4  # FP32, as PyTorch's default weights are


# PyTorch's encoder layers for inference: eval mode without gradients takes their fused path
# (one _transformer_encoder_layer_fwd per layer). "--unfused" hangs a no-op forward hook on each layer,
# which makes PyTorch run the layer op by op (its attention still nn.MultiheadAttention's fused
# one); "--causal" passes a causal mask; "--padded" a padding mask (the first sequence's last 3
# tokens), with which PyTorch runs the layers on nested tensors; "--train" calls a training model.
EV, EH, HEADS, F, LAYERS, EB, ES = 100, 32, 4, 64, 2, 3, 8
ENCODER = f"""\
import sys
import torch
import poptorch

V, H, HEADS, F, LAYERS, B, S = {EV}, {EH}, {HEADS}, {F}, {LAYERS}, {EB}, {ES}
activation, norm_first = sys.argv[1], sys.argv[2] == "norm_first"


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(V, H)
        layer = torch.nn.TransformerEncoderLayer(H, HEADS, F, dropout=0.0, activation=activation,
                                                 batch_first=True, norm_first=norm_first)
        self.encoder = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor="--padded" in sys.argv)
        self.head = torch.nn.Linear(H, V)

    def forward(self, ids, labels=None):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(S) if "--causal" in sys.argv else None
        padding = torch.arange(S) >= torch.tensor([[S - 3]] + [[S]] * (B - 1)) if "--padded" in sys.argv else None
        logits = self.head(self.encoder(self.embed(ids), mask=mask, src_key_padding_mask=padding,
                                        is_causal=mask is not None))
        if labels is None:
            return logits
        return logits, torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


net = Encoder()
if "--unfused" in sys.argv:
    for layer in net.encoder.layers:
        layer.register_forward_hook(lambda module, args, out: None)
ids = torch.randint(0, V, (B, S))
if "--train" in sys.argv:
    poptorch.trainingModel(net, poptorch.Options(), optimizer=poptorch.optim.SGD(net.parameters(), lr=0.1))(ids, ids)
else:
    poptorch.inferenceModel(net.eval())(ids)
"""


def _capture(script: Path, *args: str, training: bool = False):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        captured = capture_script(script, args, training=training)
    assert not [w for w in caught if issubclass(w.category, poptorch.GenericOpsWarning)]
    assert not captured.generic
    return captured.model


def _costs(model) -> list[tuple[str, int, int, int]]:
    return [(op.kind, op.flops, op.bytes, op.params) for op in model.ops]


@pytest.mark.parametrize(("activation", "norm"), [("relu", "norm_after"), ("gelu", "norm_first")])
def test_pytorchs_fused_encoder_layer_is_the_ops_of_the_unfused_layer(tmp_path: Path, activation: str,
                                                                      norm: str) -> None:
    # GIVEN an nn.TransformerEncoder for inference in a PopTorch script
    script = tmp_path / "encoder.py"
    script.write_text(ENCODER)
    # WHEN its inference model is captured: fused, fused under a causal mask, op by op, and for training
    fused = _capture(script, activation, norm)
    fused_layers = [op for op in fused.ops if "_transformer_encoder_layer_fwd" in op.name]
    assert fused_layers, "PyTorch took its fused path"
    masked = _capture(script, activation, norm, "--causal")
    padded = _capture(script, activation, norm, "--padded")
    unfused = _capture(script, activation, norm, "--unfused")
    assert not [op for op in unfused.ops if "_transformer_encoder_layer_fwd" in op.name]
    trained = _capture(script, activation, norm, "--train", training=True)
    # THEN each layer is the unfused layer's ops, with the same FLOPs, bytes and weights; a mask adds
    # no op, and nested tensors are the padded tensors the IPU runs
    assert _costs(fused) == _costs(unfused) == _costs(masked) == _costs(padded)
    sublayers = ["matmul", "matmul", "softmax", "matmul", "matmul", "add"]  # attention (QKV ... output), residual
    ffn = ["matmul", activation, "matmul", "add"]
    layer = (["layer_norm", *sublayers, "layer_norm", *ffn] if norm == "norm_first"
             else [*sublayers, "layer_norm", *ffn, "layer_norm"])
    assert [op.kind for op in fused.ops] == ["embedding", *layer * LAYERS, "matmul"]
    # the FLOPs by hand, per layer of T tokens: QKV 2T.H.3H, scores and context 2 x 2B.S.S.H, softmax
    # 5B.heads.S.S, output projection 2T.H.H, two residual adds T.H, two norms 8T.H, the feed-forward
    # 2 x 2T.H.F and its activation (ReLU 1, GELU 8 per element)
    t = EB * ES
    per_layer = (2 * t * EH * 3 * EH + 2 * 2 * EB * ES * ES * EH + 5 * EB * HEADS * ES * ES + 2 * t * EH * EH
                 + 2 * t * EH + 2 * 8 * t * EH + 2 * 2 * t * EH * F + {"relu": 1, "gelu": 8}[activation] * t * F)
    head = 2 * t * EH * EV
    assert sum(op.flops for op in fused.ops) == t * EH + LAYERS * per_layer + head
    # AND training (where PyTorch never fuses) runs the same forward but for the QKV projection's bias,
    # which PyTorch's unfused attention adds as an op of its own: T x 3H FLOPs per layer
    assert sum(op.flops for op in trained.ops[:-1]) == sum(op.flops for op in fused.ops) + LAYERS * t * 3 * EH
    assert fused.parameters == unfused.parameters == trained.parameters


class SelfAttention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(EH, HEADS, batch_first=True)

    def forward(self, x: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        return self.attn(x, x, x, key_padding_mask=padding, need_weights=False)[0]


def test_the_fused_multi_head_attention_under_a_padding_mask_is_the_engines_attention() -> None:
    # GIVEN nn.MultiheadAttention for inference, with and without a boolean padding mask (both fused by PyTorch)
    x = torch.randn(EB, ES, EH)
    padding = torch.zeros(EB, ES, dtype=torch.bool)
    padding[0, -3:] = True
    costs = []
    for mask in (None, padding):
        inference = poptorch.inferenceModel(SelfAttention().eval())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            inference(x, mask)
        assert not [w for w in caught if issubclass(w.category, poptorch.GenericOpsWarning)]
        costs.append(_costs(inference.compiled.captured.model))
    # THEN both are the engine's attention: QKV projection, scores, softmax, context, output projection;
    # the masked one first turns the host's boolean mask into additive -inf (one FLOP per element)
    assert [kind for kind, *_ in costs[0]] == ["matmul", "matmul", "softmax", "matmul", "matmul"]
    assert costs[1][0][:2] == ("masked_fill", EB * ES) and costs[1][1:] == costs[0]
