"""Capture cases that used to fall back to generic work: a decoder tied to the word embedding (one
weight read by two ops)."""

from __future__ import annotations

import warnings
from pathlib import Path

from click.testing import CliRunner

import popvision_py as pv
import poptorch
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
