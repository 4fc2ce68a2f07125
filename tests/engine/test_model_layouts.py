"""Model layouts of Graphcore's BERT and GPT-2: tied embeddings, the head back on IPU 0, the embedding
alone, vocabulary / masked tokens / packing from the CLI, memory-aware default partitions."""

from __future__ import annotations

import json

from engine.runner import RunRequest, prepare
from engine import rules
from engine.rules import ascending_rule, pipeline_ranks

from tests.engine.helpers import run_cli, run_profile

# A small BERT whose vocabulary matrix dominates: 2 layers of hidden 64, a 1000-word vocabulary.
SMALL_BERT = ("bert-base", "--layers", "2", "--hidden", "64", "--heads", "4", "--vocab", "1000",
              "--batch-size", "2", "--gradient-accumulation", "8")


def _weights_bytes(tables: dict) -> int:
    """Bytes of always-live weights over every IPU and tile."""
    v = tables["variables"]
    live = v[(v["category"].astype(str) == "weights") & v["always_live"]]
    return int(live["bytes"].sum()) if "bytes" in live else int(live["total_bytes"].sum())


def _summary(*args: str) -> dict:
    result = run_cli("run", *args, "-q", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_tied_head_holds_no_second_copy_of_the_vocabulary_matrix(tmp_path):
    # GIVEN the same small BERT with its MLM decoder tied to the word embedding and untied, on the
    # same stages (the head on IPU 0 with the embedding in both)
    stages = ("--stages", "embeddings,layer0@0 layer1@1 head@0")
    tied = run_profile(tmp_path, *SMALL_BERT, *stages, "--tied-embeddings", name="tied")
    untied = run_profile(tmp_path, *SMALL_BERT, *stages, "--no-tied-embeddings", name="untied")
    # THEN the weights on the IPUs differ by exactly one vocab x hidden fp16 matrix
    assert _weights_bytes(untied) - _weights_bytes(tied) == 1000 * 64 * 2
    # AND the parameter count by vocab x hidden
    assert untied["manifest"]["run"]["parameters"] - tied["manifest"]["run"]["parameters"] == 1000 * 64


def test_a_tied_head_on_another_ipu_copies_the_matrix_over_ipu_links(tmp_path):
    # GIVEN the tied head on IPU 1, the embedding on IPU 0
    tables = run_profile(tmp_path, *SMALL_BERT, "--stages", "embeddings,layer0@0 layer1,head@1", name="apart")
    programs = tables["programs"]
    names = programs["name"].astype(str)
    # THEN the head's IPU receives the matrix in the forward and sends its gradient back, each
    # vocab x hidden x 2 bytes
    copies = programs[names.str.contains("tied_weights_")]
    assert sorted(copies["name"].astype(str).str.rsplit("/", n=1).str[-1]) == ["tied_weights_from_ipu0",
                                                                                 "tied_weights_to_ipu0"]
    assert set(copies["ipu"]) == {1}
    assert set(copies["bytes"]) == {1000 * 64 * 2}
    # AND it holds no always-live copy: the matrix is always-live on IPU 0 only
    v = tables["variables"]
    word = v[v["name"].astype(str).str.startswith("embeddings/word/weight")]
    assert set(word["ipu"]) == {0}


def test_the_gpt2_layout_puts_the_embedding_alone_on_ipu0_and_the_tied_head_back_on_it():
    plan = prepare(RunRequest("gpt", params={"preset": "gpt2-small", "embedding_alone": True}))
    stages = [(s.blocks, s.ipu) for s in plan.stages]
    assert stages[0] == (("embeddings",), 0)
    assert stages[-1] == (("head",), 0)
    assert {ipu for _, ipu in stages[1:-1]} == {1, 2, 3}
    # every layer is on IPUs 1..3
    assert sum(len(b) for b, _ in stages[1:-1]) == 12
    # the head reads the token embedding's matrix: no LM-head matrix of its own
    head = [op for op in plan.model.ops if op.name == "head/lm"][0]
    assert head.params == 0 and head.tied_params == 50257 * 768


def test_only_the_last_pipelined_stage_may_return_to_the_first_ipu():
    assert ascending_rule("pipelined", [0, 1, 2, 0]) is None
    assert ascending_rule("pipelined", [0, 1, 0, 2]) is not None
    assert ascending_rule("pipelined", [1, 2, 0]) is not None
    assert ascending_rule("pipelined", [1, 0]) is not None
    # consecutive stages may share an IPU (a stage boundary inside one IPU), and the head still returns
    assert ascending_rule("pipelined", [0, 0]) is None
    assert ascending_rule("pipelined", [0, 1, 1, 0]) is None
    assert pipeline_ranks([0, 1, 1, 2, 0]) == [0, 1, 1, 2, 3]


def test_vocab_and_masked_tokens_change_parameters_and_flops_by_the_right_amounts():
    def model(**params):
        return prepare(RunRequest("bert-base", params={"layers": 2, **params})).model

    base, bigger = model(vocab=30522), model(vocab=40522)
    # tied: the vocabulary is in the embedding (vocab x hidden) and the decoder's bias (vocab)
    assert bigger.parameters - base.parameters == 10000 * (768 + 1)
    few, many = model(masked_tokens=20), model(masked_tokens=40)
    decoder = lambda m: [op for op in m.ops if op.name == "head/mlm_decoder"][0]  # noqa: E731
    # the decoder is a (micro-batch x masked) x hidden x vocab matmul: 2 x 8 x 20 x 768 x 30522 more
    assert decoder(many).flops - decoder(few).flops == 2 * 8 * 20 * 768 * 30522


def test_packing_counts_sequences_not_inputs():
    plain = _summary("bert-base", "--layers", "2", "--gradient-accumulation", "8")
    packed = _summary("bert-base", "--layers", "2", "--gradient-accumulation", "8", "--packing", "1.5")
    # micro-batch 8 x GA 8 = 64 inputs; at 1.5 sequences per input, 96 sequences
    assert plain["samples_per_step"] == 64
    assert packed["samples_per_step"] == 96
    # the same work: the same time per step
    assert packed["cycles_per_step"] == plain["cycles_per_step"]


def test_packing_below_one_is_one_sentence():
    result = run_cli("run", "bert-base", "--packing", "0.5", "-q")
    assert result.exit_code == 2
    assert "Packing must be between 1" in result.output


def test_memory_aware_default_puts_fewer_layers_on_the_embeddings_ipu():
    plan = prepare(RunRequest("bert-large"))
    layers = [0] * 4
    for s in plan.stages:
        layers[s.ipu] += sum(b.startswith("layer") for b in s.blocks)
    # Graphcore's BERT-Large: layers per IPU [3, 7, 7, 7], the embedding and the tied head on IPU 0
    assert layers == [3, 7, 7, 7]
    assert plan.stages[0].blocks[0] == "embeddings" and plan.stages[-1].blocks == ("head",)
    assert plan.stages[-1].ipu == 0


def test_the_analysis_paces_a_returning_pipeline_by_its_busiest_ipu():
    from popvision_py.analysis.pipeline.stages import pipeline_cycles
    import numpy as np

    # 3 stages of 1 cycle forward, none backward (inference), 4 micro-batches; the last on IPU 0
    fwd, bwd = np.ones(3), np.zeros(3)
    separate = pipeline_cycles(fwd, bwd, 4, True, False)
    shared = pipeline_cycles(fwd, bwd, 4, True, False, np.array([0, 1, 0]))
    # separate IPUs: 4 + 2 cycles of 1; IPU 0 runs stages 0 and 2 together in cycles 2 and 3
    assert separate == 6
    assert shared == 6 + 2



def test_gpt2_small_defaults_to_graphcores_layout_and_untied_keeps_the_head_last():
    # GIVEN gpt2-small's default partition (memory-aware, the LM head tied)
    tied = prepare(RunRequest("gpt", params={"preset": "gpt2-small"}))
    # THEN Graphcore's GPT-2 device allocation: embeddings alone on IPU 0, 4 layers on each of
    # IPUs 1-3, the LM head back on IPU 0
    assert [(len(s.blocks), s.ipu) for s in tied.stages] == [(1, 0), (4, 1), (4, 2), (4, 3), (1, 0)]
    assert tied.stages[-1].blocks == ("head",)
    # AND untied, nothing ties the head to IPU 0: it stays on the last IPU
    untied = prepare(RunRequest("gpt", params={"preset": "gpt2-small", "tied_embeddings": False}))
    assert untied.stages[-1].ipu == 3 and "head" in untied.stages[-1].blocks


def test_a_fix_command_keeps_the_runs_model_layout(tmp_path):
    # GIVEN a run of an untied, packed BERT with its own vocabulary
    from popvision_py.analysis.findings import fixes

    tables = run_profile(tmp_path, *SMALL_BERT, "--no-tied-embeddings", "--packing", "1.5", "--masked-tokens", "10")
    run, target = tables["manifest"]["run"], tables["manifest"]["target"]
    # WHEN the analysis writes the command of a changed configuration
    words = fixes.command(run, target, {"micro_batch_size": 1}, "x", rules).split()
    # THEN it runs the same model: the flags are popvision run's, each with its value
    assert "--no-tied-embeddings" in words
    assert words[words.index("--vocab") + 1] == "1000"
    assert words[words.index("--packing") + 1] == "1.5"
    assert words[words.index("--masked-tokens") + 1] == "10"
    # AND the manifest counts sequences: 2 inputs x GA 8 x 1.5
    assert run["packing_factor"] == 1.5
