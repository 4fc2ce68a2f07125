"""Memory: optimiser offload, activation stash per stage, recomputation, out-of-memory tiles."""

from __future__ import annotations

from tests.engine.helpers import BALANCED_MODEL, run_cli, run_profile, write_model

MNIST_PARAMS = (1 * 25 * 10 + 10) + (10 * 25 * 20 + 20) + (320 * 256 + 256) + (256 * 10 + 10)  # 90,026


def _category(tables, category: str, always_live: bool) -> int:
    tm = tables["tile_memory"]
    rows = tm[(tm["category"].astype(str) == category) & (tm["always_live"] == always_live)]
    return int(rows["bytes"].sum())


def test_mnist_has_the_tutorials_parameters(tmp_path):
    tables = run_profile(tmp_path, "mnist")
    assert tables["manifest"]["run"]["parameters"] == MNIST_PARAMS


def test_offloading_the_optimiser_lowers_always_live_memory_and_adds_remote_buffer_traffic(tmp_path):
    # a host whose data loader keeps up, so that the device's time shows (mnist is host-bound)
    fast_host = ("--input", "synthetic")
    on_chip = run_profile(tmp_path, "mnist", *fast_host, name="on")
    off_chip = run_profile(tmp_path, "mnist", "--offload-optimiser", *fast_host, name="off")
    # AdamW keeps two FP32 moments: 8 bytes per parameter, always live when on chip
    assert _category(on_chip, "optimiser_state", True) == 8 * MNIST_PARAMS
    assert _category(off_chip, "optimiser_state", True) == 0
    always = lambda t: int(t["liveness"].groupby("ipu")["always_live_bytes"].first().sum())  # noqa: E731
    assert always(off_chip) < always(on_chip)
    # each weight update streams the state in and back out: 2 x 8 bytes per parameter
    ex = off_chip["exchanges"]
    remote = ex[ex["kind"].astype(str) == "remote_buffer"]
    assert int(remote["bytes"].sum()) == 2 * 8 * MNIST_PARAMS
    assert not (on_chip["exchanges"]["kind"].astype(str) == "remote_buffer").any()
    # and the update takes longer
    assert off_chip["trace"]["end_cycle"].max() > on_chip["trace"]["end_cycle"].max()


def test_earlier_pipeline_stages_stash_more_activations(tmp_path):
    # GIVEN four identical stages: stage s holds 2(N-1-s)+1 micro-batches in flight = 7, 5, 3, 1
    tables = run_profile(tmp_path, write_model(tmp_path, BALANCED_MODEL))
    v = tables["variables"]
    stash = v[v["category"].astype(str) == "stash"].groupby("ipu")["bytes"].sum()
    assert list(stash.index) == [0, 1, 2, 3]
    assert stash[0] > stash[1] > stash[2] > stash[3]
    assert [stash[i] / stash[3] for i in range(4)] == [7, 5, 3, 1]


def test_recomputation_lowers_the_peak_and_adds_compute(tmp_path):
    model = write_model(tmp_path, BALANCED_MODEL)
    plain = run_profile(tmp_path, model, name="plain")
    recomputed = run_profile(tmp_path, model, "--recompute", name="recompute")
    peak = lambda t: int(t["tile_memory"].groupby(["ipu", "tile"])["bytes"].sum().max())  # noqa: E731
    assert peak(recomputed) < peak(plain)
    compute = lambda t: int(t["programs"].query("type == 'compute_set'")["cycles"].sum())  # noqa: E731
    assert compute(recomputed) > compute(plain)
    names = recomputed["programs"]["name"].astype(str)
    assert names.str.endswith("/recompute").sum() == 16  # each of the 16 ops recomputed once
    assert recomputed["manifest"]["run"]["recompute"] is True


OOM_MODEL = """
from engine import Layout, Model, ModelBlock, StageSpec

def build(options):
    m = Model("too-big", options)
    x = m.input((8192,))
    with ModelBlock("B0"):
        m.linear(x, 8192, name="huge")
    return m.set_default_layout(Layout("sharded", [StageSpec("B0", ipu=0)]))
"""


def test_a_model_too_big_still_gives_a_profile_naming_its_out_of_memory_tiles(tmp_path):
    # GIVEN one 8192 x 8192 linear on one IPU: 67M parameters x (2 + 2 + 8) bytes > 900 MB
    model = write_model(tmp_path, OOM_MODEL)
    out = tmp_path / "oom"
    result = run_cli("run", model, "--profile", "--profile-dir", str(out), "-q")
    assert result.exit_code == 0
    assert "tiles out of memory" in result.output
    tables = run_profile(tmp_path, model, name="oom2")
    capacity = tables["manifest"]["target"]["bytes_per_tile"]
    per_tile = tables["tile_memory"].groupby(["ipu", "tile"])["bytes"].sum()
    over = per_tile[per_tile > capacity]
    assert len(over) > 0
    assert f"tile {over.idxmax()[1]}" in result.output
