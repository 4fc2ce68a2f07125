"""Recomputation checkpoints, stages sharing an IPU, attention serialisation, per-IPU available memory."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest

from popvision_py.analysis.report import Report
from tests.engine.helpers import BALANCED_MODEL, busy_rows, profile_path, run_cli, run_profile, write_model

MB, HIDDEN = 16, 1024
ACTIVATION = MB * HIDDEN * 2  # one block's output: micro-batch x 1024 in FP16

# Two stages of three blocks each (a 1024 x 1024 linear and a ReLU per block).
SIX_BLOCKS = textwrap.dedent(
    """
    from engine import Layout, Model, ModelBlock, StageSpec

    DEFAULTS = {"micro_batch_size": 16, "gradient_accumulation": 8, "recompute": True}

    def build(options):
        m = Model("six", options)
        x = m.input((1024,))
        for b in range(6):
            with ModelBlock(f"B{b}"):
                x = m.relu(m.linear(x, 1024, name=f"b{b}/linear"), name=f"b{b}/relu")
        return m.set_default_layout(Layout("pipelined", [StageSpec(("B0", "B1", "B2"), ipu=0),
                                                         StageSpec(("B3", "B4", "B5"), ipu=1)]))
    """
)

# One block: self-attention over 128 positions of 256 features in 8 heads, then a small head.
ATTENTION = textwrap.dedent(
    """
    from engine import Model, ModelBlock

    DEFAULTS = {"micro_batch_size": 2, "gradient_accumulation": 1}

    def build(options):
        m = Model("attn", options)
        x = m.input((128, 256))
        with ModelBlock("B0"):
            x = m.linear(m.attention(x, 8, name="attn"), 16, name="head")
            m.loss(x)
        return m
    """
)
SCORES = 2 * 8 * 128 * 128 * 2  # micro-batch x heads x seq x seq in FP16


def _stash(tables) -> dict[int, int]:
    v = tables["variables"]
    return v[v["category"].astype(str) == "stash"].groupby("ipu")["bytes"].sum().to_dict()


def _compute(tables, pass_: str) -> int:
    p = tables["programs"]
    return int(p[(p["type"].astype(str) == "compute_set") & (p["pass"].astype(str) == pass_)]["cycles"].sum())


# -- recomputation checkpoints ------------------------------------------------------------------


def test_checkpointing_only_stage_inputs_stashes_only_the_inputs(tmp_path):
    # GIVEN two stages of three blocks; stage 0 holds 3 micro-batches in flight, stage 1 one
    model = write_model(tmp_path, SIX_BLOCKS)
    blocks = run_profile(tmp_path, model, name="blocks")
    stage = run_profile(tmp_path, model, "--recompute-checkpoints", "stage", name="stage")
    # THEN with every block's output a checkpoint the stash is the stage input plus the outputs of
    # the first two blocks (read by a later block), per micro-batch in flight
    assert _stash(blocks) == {0: 3 * 3 * ACTIVATION, 1: 1 * 3 * ACTIVATION}
    # and with only the stage inputs it is the input alone: two activations fewer per micro-batch
    assert _stash(stage) == {0: 3 * ACTIVATION, 1: 1 * ACTIVATION}
    assert stage["manifest"]["run"]["recompute_checkpoints"] == "stage"


def test_checkpointing_every_second_block_keeps_one_checkpoint_per_stage(tmp_path):
    model = write_model(tmp_path, SIX_BLOCKS)
    tables = run_profile(tmp_path, model, "--recompute-checkpoints", "2")
    # segments (B0, B1), (B2) and (B3, B4), (B5): the input and B1's (B4's) output
    assert _stash(tables) == {0: 3 * 2 * ACTIVATION, 1: 1 * 2 * ACTIVATION}


def test_stage_recomputation_adds_the_forward_to_the_backward(tmp_path):
    model = write_model(tmp_path, SIX_BLOCKS)
    plain = run_profile(tmp_path, model, "--no-recompute", name="plain")
    stage = run_profile(tmp_path, model, "--recompute-checkpoints", "stage", name="stage")
    # THEN the backward's compute is the plain backward plus one more forward of every op
    assert _compute(plain, "forward") == _compute(stage, "forward")
    assert _compute(stage, "backward") == _compute(plain, "backward") + _compute(plain, "forward")
    names = stage["programs"]["name"].astype(str)
    assert names.str.endswith("/recompute").sum() == 12  # the 12 ops, each recomputed once
    # and the whole stage is recomputed before its first backward: every recompute step of a stage
    # comes before its backward steps
    p = stage["programs"]
    for ipu in (0, 1):
        on = p[(p["ipu"] == ipu) & (p["type"].astype(str) == "compute_set") & (p["pass"].astype(str) == "backward")]
        recompute = on[on["name"].astype(str).str.endswith("/recompute")]["step"]
        backward = on[on["name"].astype(str).str.endswith("/bwd")]["step"]
        assert recompute.max() < backward.min()


def test_bad_recompute_checkpoints_are_one_sentence(tmp_path):
    for value in ("sometimes", "0", "-2"):
        result = run_cli("run", "mnist", "-q", "--recompute", "--recompute-checkpoints", value)
        assert result.exit_code == 2
        assert "Recompute checkpoints must be blocks or stage or a positive number" in result.output
        assert "Traceback" not in result.output


# -- stages sharing an IPU ----------------------------------------------------------------------


def test_stages_sharing_an_ipu_run_one_after_another_in_its_superstep(tmp_path):
    # GIVEN four identical stages, two per IPU, GA 8
    model = write_model(tmp_path, BALANCED_MODEL)
    tables = run_profile(tmp_path, model, "--stages", "B0@0 B1@0 B2@1 B3@1", "--gradient-accumulation", "8")
    trace = busy_rows(tables["trace"])
    trace = trace[trace["iteration"] == 0]
    span = trace.groupby(["stage", "pass", "micro_batch"], observed=True).agg(
        start=("start_cycle", "min"), end=("end_cycle", "max"))
    for m in range(8):
        # THEN stage 1's forward of a micro-batch starts when stage 0's ends, on the same IPU
        assert span.loc[(1, "forward", m), "start"] == span.loc[(0, "forward", m), "end"]
        # and its backward ends when stage 0's backward of that micro-batch starts
        assert span.loc[(1, "backward", m), "end"] <= span.loc[(0, "backward", m), "start"]
    # the pipeline is two IPUs deep: 2 x 2 - 1 = 3 pipeline stages, GA + 2N - 2 = 10 supersteps + the update
    assert tables["manifest"]["run"]["pipeline_stages"] == 3
    programs = tables["programs"]
    syncs = tables["trace"].merge(programs[programs["name"].astype(str) == "pipeline/sync"][["ipu", "step"]],
                                  on=["ipu", "step"])
    assert (syncs[syncs["iteration"] == 0].groupby("ipu").size().loc[[0, 1]] >= 8 + 2 * 2 - 2 + 1).all()


def test_stages_sharing_ipus_idle_the_bubble_of_their_ipus_and_the_analysis_agrees(tmp_path):
    path = profile_path(tmp_path, write_model(tmp_path, BALANCED_MODEL), "--stages", "B0@0 B1@0 B2@1 B3@1",
                        "--gradient-accumulation", "8", name="shared")
    # four identical blocks, two per IPU: the pipeline is balanced already, so re-timing its supersteps
    # with the IPUs' work made even changes little, and its idle share is at most what ran
    with Report(path) as report:
        figures = report.stages.figures()
    assert figures.balance_gain_pct == pytest.approx(0.0, abs=3)
    assert 0.0 <= figures.ideal_bubble_pct <= figures.bubble_pct
    assert figures.ideal_bubble_pct == pytest.approx(figures.bubble_pct, abs=3)


def test_seven_stages_on_one_ipu_need_no_more_micro_batches_than_one(tmp_path):
    # GIVEN every stage on IPU 0 (the MLPerf ResNet-50 shape): a pipeline one IPU deep
    model = write_model(tmp_path, BALANCED_MODEL)
    tables = run_profile(tmp_path, model, "--stages", "B0@0 B1@0 B2@0 B3@0", "--gradient-accumulation", "1",
                         "--recompute")
    # THEN GA 1 runs, nothing is kept for a second micro-batch, and the IPU never idles
    assert tables["manifest"]["run"]["pipeline_stages"] == 1
    assert _stash(tables) == {}
    trace = tables["trace"]
    assert not (trace["phase"].astype(str) == "idle").any()
    # each stage's input (a 16 x 1024 activation) is kept from its forward to its backward
    v = tables["variables"]
    inputs = v[v["name"].astype(str).str.match(r"stage[123]/")]
    assert sorted(inputs["bytes"].tolist()) == [ACTIVATION] * 3


def test_pipelined_stages_may_not_go_back_to_an_earlier_ipu(tmp_path):
    model = write_model(tmp_path, BALANCED_MODEL)
    result = run_cli("run", model, "-q", "--stages", "B0@0 B1@1 B2@0 B3@1")
    assert result.exit_code == 2
    assert "ascending IPUs" in result.output


# -- attention serialisation --------------------------------------------------------------------


def _most_scores_live(tables) -> int:
    """The most bytes of attention scores (outputs and recomputations) live at any one step."""
    v = tables["variables"]
    v = v[v["name"].astype(str).str.match(r".*scores/(output|recomputed)$")]
    steps = int(tables["programs"]["step"].max()) + 1
    live = np.zeros(steps + 1, dtype=np.int64)
    np.add.at(live, v["live_from_step"].to_numpy(), v["bytes"].to_numpy())
    np.add.at(live, v["live_to_step"].to_numpy() + 1, -v["bytes"].to_numpy())
    return int(np.cumsum(live).max())


@pytest.mark.parametrize("pieces", [1, 2, 4])
@pytest.mark.parametrize("mode", [("--mode", "inference"), ("--recompute",)])
def test_attention_in_k_pieces_holds_a_kth_of_the_scores_at_once(tmp_path, pieces, mode):
    model = write_model(tmp_path, ATTENTION)
    tables = run_profile(tmp_path, model, *mode, "--attention-serialisation", str(pieces))
    assert _most_scores_live(tables) == SCORES // pieces
    # one scores compute set per piece in the forward (each a launch of its own)
    names = tables["programs"]["name"].astype(str)
    assert names.str.endswith("/scores/fwd").sum() == pieces


def test_attention_pieces_do_the_same_forward_work(tmp_path):
    model = write_model(tmp_path, ATTENTION)
    whole = run_profile(tmp_path, model, "--mode", "inference", name="whole")
    split = run_profile(tmp_path, model, "--mode", "inference", "--attention-serialisation", "4", name="split")
    flops = lambda t: int(t["ops"].query("kind == 'matmul'")["flops"].sum())  # noqa: E731
    assert flops(split) == flops(whole)
    assert split["manifest"]["run"]["attention_serialisation"] == 4


def test_attention_serialisation_must_divide_the_heads(tmp_path):
    model = write_model(tmp_path, ATTENTION)
    result = run_cli("run", model, "-q", "--attention-serialisation", "3")
    assert result.exit_code == 2
    assert "does not divide the 8 heads" in result.output


# -- available memory proportion per IPU --------------------------------------------------------


def test_a_lower_proportion_on_one_ipu_serialises_only_that_ipus_matmuls(tmp_path):
    model = write_model(tmp_path, BALANCED_MODEL)
    base = run_profile(tmp_path, model, name="base")
    low = run_profile(tmp_path, model, "--available-memory-proportion", "0.6,0.001,0.6,0.6", name="low")
    a, b = base["programs"], low["programs"]
    # THEN IPUs 0, 2 and 3 compile exactly as before
    for ipu in (0, 2, 3):
        assert a[a["ipu"] == ipu]["cycles"].tolist() == b[b["ipu"] == ipu]["cycles"].tolist()
    # and IPU 1's forward linears are serialised into ceil(received per tile / budget) pieces, each
    # piece but the first one more compute-set launch (80 cycles)
    budget = 0.001 * 638_976
    on = lambda p: p[(p["ipu"] == 1) & (p["pass"].astype(str) == "forward")]  # noqa: E731
    pa, pb = on(a).set_index("name"), on(b).set_index("name")
    for k in range(3):
        name = f"layer1/linear{k}/fwd"
        exchange = pa.loc[f"{name}/exchange"]
        pieces = math.ceil(exchange["bytes"] / exchange["tiles"] / budget)
        assert pieces > 1
        assert pb.loc[name, "cycles"] - pa.loc[name, "cycles"] == (pieces - 1) * 80
    assert low["manifest"]["run"]["available_memory_proportion"] == [0.6, 0.001, 0.6, 0.6]


def test_one_value_per_ipu_or_one_for_all(tmp_path):
    result = run_cli("run", "mnist", "-q", "--available-memory-proportion", "0.1,0.2")
    assert result.exit_code == 2
    assert "gives 2 values for 4 IPUs" in result.output
    result = run_cli("run", "mnist", "-q", "--available-memory-proportion", "0.1,x")
    assert result.exit_code == 2
    assert "comma list" in result.output


def test_poptorchs_dictionary_sets_each_ipu():
    from engine import RunOptions

    o = RunOptions().setAvailableMemoryProportion({"IPU0": 0.1, "IPU2": 0.3})
    assert o.available_memory_proportion == (0.1, 0.6, 0.3)
    assert [o.memory_proportion(i) for i in range(3)] == [0.1, 0.6, 0.3]


def test_a_fix_over_other_ipus_keeps_the_strictest_proportion(tmp_path):
    # GIVEN a 4-IPU run with one proportion per IPU
    model = write_model(tmp_path, BALANCED_MODEL)
    tables = run_profile(tmp_path, model, "--available-memory-proportion", "0.2,0.1,0.3,0.4")
    run, target = tables["manifest"]["run"], tables["manifest"]["target"]
    from engine import rules
    from popvision_py.analysis.findings import fixes

    # WHEN a fix keeps the IPUs, the list stays; when it moves to 2 IPUs, the smallest value stands for all
    same = fixes.command(run, target, {"gradient_accumulation": 16}, "ga", rules)
    assert "--available-memory-proportion 0.2,0.1,0.3,0.4" in same
    fewer = fixes.command(run, target, {"stages": [{"stage": 0, "ipu": 0, "blocks": ["B0", "B1"]},
                                                   {"stage": 1, "ipu": 1, "blocks": ["B2", "B3"]}]}, "two",
                         rules)
    assert "--available-memory-proportion 0.1 " in fewer


def test_stages_on_one_ipu_are_not_reported_as_an_imbalanced_pipeline(tmp_path):
    # GIVEN a deliberately unequal split (one block, then three) on a single IPU
    path = profile_path(tmp_path, write_model(tmp_path, BALANCED_MODEL), "--stages", "B0@0 B1..B3@0",
                        "--gradient-accumulation", "4", name="one")
    # THEN the stages run one after another: no bottleneck or bubble finding
    report = run_cli("report", str(path), "--section", "summary")
    assert "bottleneck" not in report.output
    assert "fill and flush" not in report.output
