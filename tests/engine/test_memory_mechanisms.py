"""Memory mechanisms: vertex state per vertex, outlining of identical layers, optimiser state spread
over the tiles, the optimiser state's precision, SGD's combined velocity, LARS."""

from __future__ import annotations

import pandas as pd

from engine.options import RunOptions
from popvision_py.errors import ConfigError
from tests.engine.helpers import run_cli, run_profile, write_model

MNIST_PARAMS = (1 * 25 * 10 + 10) + (10 * 25 * 20 + 20) + (320 * 256 + 256) + (256 * 10 + 10)  # 90,026
WORKERS = 6  # worker contexts per tile (public)
VERTEX_STATE = 24  # vertex_state_bytes_per_vertex's default
GRAIN_PARAMS = 64  # state is laid out in grains of 64 parameters


def _always(tables, category: str) -> pd.Series:
    """Always-live bytes of ``category`` per (ipu, tile)."""
    tm = tables["tile_memory"]
    rows = tm[(tm["category"].astype(str) == category) & tm["always_live"]]
    return rows.groupby(["ipu", "tile"])["bytes"].sum()


def _code(tables) -> int:
    return sum(int(_always(tables, c).sum()) for c in ("vertex_state", "exchange_code", "control_code"))


def _update_flops(tables) -> int:
    ops = tables["ops"]
    return int(ops[ops["pass"].astype(str) == "update"]["flops"].sum())


def test_vertex_state_does_not_grow_with_the_micro_batch(tmp_path):
    # GIVEN resnet50 at micro-batch 1 and at micro-batch 20 (20 times the grains of work)
    small = run_profile(tmp_path, "resnet50", "--batch-size", "1", "--no-ranges", name="mb1")
    large = run_profile(tmp_path, "resnet50", "--batch-size", "20", "--no-ranges", name="mb20")
    # THEN the vertex state grows far less than the batch: only as ops spread over more tiles
    ratio = _always(large, "vertex_state").sum() / _always(small, "vertex_state").sum()
    assert ratio < 4
    # AND no tile holds more than one vertex per worker for each compute set its IPU runs
    programs = large["programs"]
    compute_sets = programs[programs["type"].astype(str) == "compute_set"].groupby("ipu").size()
    per_tile = _always(large, "vertex_state").groupby(level="ipu").max()
    for ipu, most in per_tile.items():
        assert most <= compute_sets[ipu] * WORKERS * VERTEX_STATE


ONE_LINEAR = """
from engine import Layout, Model, ModelBlock, StageSpec

def build(options):
    m = Model("one-linear", options)
    x = m.input((4096,))
    with ModelBlock("B0"):
        m.loss(m.linear(x, 4096), block="B0")
    return m.set_default_layout(Layout("sharded", [StageSpec("B0", ipu=0)]))
"""


def test_a_bigger_micro_batch_lengthens_worklists_not_vertices(tmp_path):
    # GIVEN one 4096 x 4096 linear whose 16 x 16 output blocks give every tile at least six grains
    # (micro-batch 1,024: 16,384 blocks, 11 per tile; 8,192: 131,072 blocks, 89 per tile)
    model = write_model(tmp_path, ONE_LINEAR)
    small = run_profile(tmp_path, model, "--batch-size", "1024", name="small")
    large = run_profile(tmp_path, model, "--batch-size", "8192", name="large")
    # THEN each tile holds the same vertex state at both: six vertices per compute set it runs
    assert _always(large, "vertex_state").equals(_always(small, "vertex_state"))
    assert _always(large, "vertex_state").max() % (WORKERS * VERTEX_STATE) == 0


def test_identical_layers_share_their_code_when_outlined(tmp_path):
    # GIVEN bert-base with 2 and with 4 layers on one IPU
    runs = {(layers, flag): run_profile(tmp_path, "bert-base", "--layers", str(layers), "--ipus", "1", flag,
                                        "--no-ranges", name=f"{layers}{flag}")
            for layers in (2, 4) for flag in ("--outline", "--no-outline")}
    # THEN outlined, twice the layers hold less than twice the code and vertex state
    outlined = _code(runs[(4, "--outline")]) / _code(runs[(2, "--outline")])
    assert outlined < 1.2
    # AND without outlining each layer brings its own (the two extra layers are most of the model's code)
    inlined = _code(runs[(4, "--no-outline")]) / _code(runs[(2, "--no-outline")])
    assert inlined > 1.5
    assert _code(runs[(4, "--outline")]) < _code(runs[(4, "--no-outline")])


def test_no_tile_holds_more_than_its_share_of_optimiser_state(tmp_path):
    # GIVEN resnet50 (SGD, its velocity on chip: 4 bytes per parameter)
    tables = run_profile(tmp_path, "resnet50", "--no-ranges")
    state = _always(tables, "optimiser_state")
    v = tables["variables"]
    weighted = v[v["category"].astype(str) == "optimiser_state"].groupby("ipu")["op_id"].nunique()
    tiles = tables["manifest"]["target"]["tiles_per_ipu"]
    for ipu, per_tile in state.groupby(level="ipu"):
        # THEN each tile holds at most the IPU's mean plus one grain of 64 parameters per weighted op
        # (an op's grains split over the tiles within one grain of each other)
        mean = per_tile.sum() / tiles
        assert per_tile.max() <= mean + weighted[ipu] * GRAIN_PARAMS * 4


def test_fp16_optimiser_state_is_half_of_fp32(tmp_path):
    # GIVEN mnist with SGD: one velocity per parameter
    fp32 = run_profile(tmp_path, "mnist", "--optimiser", "sgd", name="fp32")
    fp16 = run_profile(tmp_path, "mnist", "--optimiser", "sgd", "--optimiser-state-type", "fp16", name="fp16")
    # THEN FP32 holds 4 bytes per parameter and FP16 half of that
    assert _always(fp32, "optimiser_state").sum() == 4 * MNIST_PARAMS
    assert _always(fp16, "optimiser_state").sum() == 2 * MNIST_PARAMS
    # AND Adam's two moments in FP16 are 4 bytes per parameter
    adam = run_profile(tmp_path, "mnist", "--optimiser", "adam", "--optimiser-state-type", "fp16", name="adam")
    assert _always(adam, "optimiser_state").sum() == 4 * MNIST_PARAMS


def test_sgd_accumulates_into_its_velocity(tmp_path):
    # GIVEN mnist, 10 micro-batches per weight update
    sgd = run_profile(tmp_path, "mnist", "--optimiser", "sgd", name="sgd")
    separate = run_profile(tmp_path, "mnist", "--optimiser", "sgd", "--separate-accum", name="separate")
    adamw = run_profile(tmp_path, "mnist", name="adamw")
    wide = run_profile(tmp_path, "mnist", "--accum-type", "fp32", name="wide")
    # THEN SGD's combined velocity needs no gradient accumulator
    assert _always(sgd, "gradients").sum() == 0
    # AND the separate variant, like AdamW, keeps one FP16 accumulator (the weights' type) per parameter
    assert _always(separate, "gradients").sum() == 2 * MNIST_PARAMS
    assert _always(adamw, "gradients").sum() == 2 * MNIST_PARAMS
    # AND accum_type fp32 doubles it
    assert _always(wide, "gradients").sum() == 4 * MNIST_PARAMS
    # AND the velocity is there either way
    assert _always(sgd, "optimiser_state").sum() == _always(separate, "optimiser_state").sum() == 4 * MNIST_PARAMS


def test_lars_keeps_a_velocity_and_an_accumulator_and_computes_trust_ratios(tmp_path):
    # GIVEN mnist with LARS
    lars = run_profile(tmp_path, "mnist", "--optimiser", "lars", name="lars")
    sgd = run_profile(tmp_path, "mnist", "--optimiser", "sgd", name="sgd")
    # THEN its state is one FP32 velocity per parameter
    assert _always(lars, "optimiser_state").sum() == 4 * MNIST_PARAMS
    # AND, since the trust ratio needs the whole step's gradient, a separate FP16 accumulator
    assert _always(lars, "gradients").sum() == 2 * MNIST_PARAMS
    # AND its update is SGD's 3 FLOP per parameter plus 5 for the two norms and the scaling
    assert _update_flops(sgd) == 3 * MNIST_PARAMS
    assert _update_flops(lars) == 8 * MNIST_PARAMS
    assert lars["manifest"]["run"]["optimiser"] == "lars"


def test_a_bad_state_type_is_one_sentence():
    result = run_cli("run", "mnist", "--optimiser-state-type", "bf16", "-q")
    assert result.exit_code == 2
    assert "Invalid value for '--optimiser-state-type'" in result.output
    try:
        RunOptions(optimiser_state_type="bf16").validate()
    except ConfigError as exc:
        assert str(exc) == "Unknown optimiser state type 'bf16'; choose one of fp16, fp32."
    else:
        raise AssertionError("no ConfigError")


def test_a_fix_command_writes_the_state_options_as_the_cli_spells_them():
    from popvision_py.analysis.findings.fixes import flag

    assert flag("use_combined_accum", False) == ["--separate-accum"]
    assert flag("use_combined_accum", True) == ["--combined-accum"]
    assert flag("enable_outlining", False) == ["--no-outline"]
    assert flag("first_moment_type", "fp16") == ["--first-moment-type", "fp16"]
    assert flag("accum_type", "fp32") == ["--accum-type", "fp32"]
