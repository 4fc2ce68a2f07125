"""--stages takes block ranges A..B, so every partition `popvision models` prints can be passed to
`popvision run --stages` as printed (issue 11, item 10)."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from engine.runner import RunRequest, prepare
from engine.zoo import ZOO
from popvision_py.cli import main


def _cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _printed_partitions() -> dict[str, str]:
    """Model name -> the partition `popvision models` prints after "IPU(s): "."""
    result = _cli("models")
    assert result.exit_code == 0, result.output
    found = re.findall(r"^(\S+)\n(?:  .*\n)*?  partition    \w+ over \d+ IPU\(s\): (.+)$", result.stdout, flags=re.M)
    return dict(found)


def _stages(plan) -> list[tuple[tuple[str, ...], int]]:
    return [(s.blocks, s.ipu) for s in plan.stages]


def test_models_prints_a_partition_for_every_zoo_model_and_some_use_ranges():
    printed = _printed_partitions()
    assert sorted(printed) == sorted(ZOO)
    assert printed["bert-large"] == \
        "embeddings..layer2@0 layer3..layer9@1 layer10..layer16@2 layer17..layer23@3 head@0"


@pytest.mark.parametrize("model", sorted(ZOO))
def test_the_printed_partition_is_accepted_verbatim_and_is_the_default(model):
    # GIVEN the partition `popvision models` prints for the model
    partition = _printed_partitions()[model]
    # WHEN it is passed to --stages as printed (the central figures: the ranges are the same plan's again)
    given = _cli("run", model, "--stages", partition, "--json", "-q", "--no-ranges")
    default = _cli("run", model, "--json", "-q", "--no-ranges")
    # THEN the run is accepted and is the default run, figure for figure
    assert given.exit_code == 0, given.output
    assert json.loads(given.stdout) == json.loads(default.stdout)
    # AND its stages are the default's: the same blocks, in the same order, on the same IPUs
    assert _stages(prepare(RunRequest(model, stages=partition))) == _stages(prepare(RunRequest(model)))


def test_a_range_is_every_block_from_a_to_b_in_model_order():
    # GIVEN bert-base's blocks: embeddings, layer0 ... layer11, head
    plan = prepare(RunRequest("bert-base", stages="embeddings..layer2,layer3@0 layer4..layer10@1 layer11,head@2"))
    assert _stages(plan) == [
        (("embeddings", "layer0", "layer1", "layer2", "layer3"), 0),
        (tuple(f"layer{i}" for i in range(4, 11)), 1),
        (("layer11", "head"), 2),
    ]
    # a range of one block is that block; resnet's dotted names split at "..", not at "."
    assert _stages(prepare(RunRequest("mnist", stages="B1..B1@0 B2..B4@1")))[0] == (("B1",), 0)
    resnet = prepare(RunRequest("resnet50", stages="stem..layer2.0@0 layer2.1..head@1"))
    assert resnet.stages[0].blocks[0] == "stem" and resnet.stages[0].blocks[-1] == "layer2.0"
    assert resnet.stages[1].blocks[0] == "layer2.1" and resnet.stages[1].blocks[-1] == "head"


BAD = {
    "reversed": ("layer5..embeddings@0 layer6..head@1",
                 ["range layer5..embeddings is reversed", "embeddings comes before layer5",
                  "write embeddings..layer5"]),
    "unknown start": ("emb..layer5@0 layer6..head@1",
                      ["range emb..layer5 starts at 'emb'", "not a block of bert-base"]),
    "unknown end": ("embeddings..layer50@0 layer6..head@1", ["range embeddings..layer50 ends at 'layer50'"]),
    "missing end": ("embeddings..@0 layer6..head@1", ["range embeddings.. needs a block at both ends",
                                                      "embeddings..head"]),
    "missing start": ("..layer5@0 layer6..head@1", ["range ..layer5 needs a block at both ends"]),
    "at with no ipu": ("embeddings..layer5@ layer6..head@1", ["ends in '@' with no IPU number"]),
    "overlapping ranges": ("embeddings..layer5@0 layer5..head@1", ["Block layer5 is in both stage 0 and stage 1"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_range_is_one_sentence_naming_it(tmp_path, case):
    stages, words = BAD[case]
    out = tmp_path / "profile"
    result = _cli("run", "bert-base", "--stages", stages, "--profile", "--profile-dir", str(out), "-q")
    assert result.exit_code == 2
    assert result.stdout == "" and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert not (out / "profile.pop").exists()


def test_run_help_documents_ranges():
    text = " ".join(_cli("run", "--help").stdout.split())
    assert "A..B is every block from A to B in model order" in text
    assert "NAME.OPTIMISER=VALUE" in text
