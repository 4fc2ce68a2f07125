"""Memory in depth, each figure recomputed here from the profile's raw tables with pandas: the tile map's
dominant category, a variable's bytes per tile, one tile's compute sets, vertices, exchanges and
variables, and the fullest tiles' memory over the program steps (against ``liveness``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import popvision_py as pv
from popvision_py.analysis.ipu.memory_depth import NOT_RECORDED
from popvision_py.errors import OutOfRangeError
from popvision_py.format.schema import MEMORY_CATEGORIES
from tests.engine.helpers import run_cli


@pytest.fixture(scope="module")
def mnist(tmp_path_factory: pytest.TempPathFactory) -> pv.Report:
    """A real emulated run: mnist pipelined over 4 IPUs of 1,472 tiles (schema 2: vertices recorded)."""
    folder = tmp_path_factory.mktemp("memdepth")
    result = run_cli("run", "mnist", "--strategy", "pipelined", "--profile", "--profile-dir", str(folder), "-q",
                     "--input", "synthetic")
    assert result.exit_code == 0, result.output
    return pv.open(folder / "profile.pop")


def raw(report: pv.Report, table: str) -> pd.DataFrame:
    frame = report.profile.read_pandas(table)
    return frame.assign(**{c: frame[c].astype(str) for c in frame.columns
                           if isinstance(frame[c].dtype, pd.CategoricalDtype)})


def share_by_hand(nbytes: int, tiles: int) -> list[int]:
    """The emulator's split at one grain per tile: tile k holds floor(b (k+1) / n) - floor(b k / n)."""
    return [nbytes * (k + 1) // tiles - nbytes * k // tiles for k in range(tiles)]


def test_each_tiles_dominant_category_is_its_largest(mnist):
    # GIVEN tile_memory's rows summed per tile and category (always-live or not) for IPU 0
    memory = raw(mnist, "tile_memory")
    sums = memory[memory["ipu"] == 0].groupby(["tile", "category"])["bytes"].sum().unstack(fill_value=0)
    rank = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}
    sums = sums[sorted(sums.columns, key=rank.get)]  # ties: the category the schema lists first
    # WHEN the map's colouring is asked for
    dominant = mnist.memory.depth.dominant(0).frame().set_index("tile")
    # THEN each tile's category is the one with most bytes, with its share of the tile
    assert (dominant.loc[sums.index, "category"] == sums.idxmax(axis=1)).all()
    assert (dominant.loc[sums.index, "category_bytes"] == sums.max(axis=1)).all()
    assert np.allclose(dominant.loc[sums.index, "category_pct"], 100 * sums.max(axis=1) / sums.sum(axis=1))
    assert len(dominant) == mnist.target["tiles_per_ipu"]


def test_a_variables_footprint_is_the_emulators_split_over_its_range(mnist):
    # GIVEN IPU 1's largest variable
    variables = raw(mnist, "variables")
    largest = variables[variables["ipu"] == 1].sort_values(["bytes", "var_id"], ascending=[False, True]).iloc[0]
    choices = mnist.memory.depth.choices(1).frame()
    assert choices.iloc[0]["var_id"] == largest["var_id"]
    assert choices["bytes"].is_monotonic_decreasing
    # WHEN its footprint is asked for
    footprint = mnist.memory.depth.footprint(int(largest["var_id"])).frame()
    # THEN it covers its tiles from start_tile, each with its share, summing to its bytes
    assert footprint["tile"].tolist() == list(range(largest["start_tile"], largest["start_tile"] + largest["tiles"]))
    assert footprint["bytes"].tolist() == share_by_hand(int(largest["bytes"]), int(largest["tiles"]))
    assert footprint["bytes"].sum() == largest["bytes"]


def test_the_always_live_variables_bytes_per_tile_add_up_to_tile_memory(mnist):
    # GIVEN IPU 1 (whose variables each split into no more grains than tiles), its always-live weights
    variables = raw(mnist, "variables")
    weights = variables[(variables["ipu"] == 1) & variables["always_live"] & (variables["category"] == "weights")]
    memory = raw(mnist, "tile_memory")
    recorded = memory[(memory["ipu"] == 1) & (memory["category"] == "weights")].groupby("tile")["bytes"].sum()
    # WHEN every weight's footprint is laid on the tiles
    laid = pd.concat([mnist.memory.depth.footprint(int(v)).frame() for v in weights["var_id"]])
    laid = laid.groupby("tile")["bytes"].sum()
    # THEN each tile holds what tile_memory records for it
    assert laid.reindex(recorded.index, fill_value=0).tolist() == recorded.tolist()


def test_a_tiles_compute_sets_vertices_and_exchanges(mnist):
    # GIVEN IPU 0's fullest tile and the raw tile_cycles, programs, ops and exchanges
    tile = int(mnist.memory.depth.fullest(1).frame().query("ipu == 0")["tile"].iloc[0])
    cycles, programs, ops, exchanges = (raw(mnist, t) for t in ("tile_cycles", "programs", "ops", "exchanges"))
    mine = cycles[(cycles["ipu"] == 0) & (cycles["tile"] == tile)].merge(
        programs[programs["ipu"] == 0], on=["ipu", "step"], suffixes=("", "_step")).sort_values("step")
    # WHEN its tabs are asked for
    depth = mnist.memory.depth
    compute = depth.compute_sets(0, tile).frame()
    # THEN the compute sets are its tile_cycles rows with their step's name, length and vertices
    assert compute["step"].tolist() == mine["step"].tolist()
    assert compute["name"].tolist() == mine["name"].tolist()
    assert compute["cycles"].tolist() == mine["cycles"].tolist()
    assert compute["step_cycles"].tolist() == mine["cycles_step"].tolist()
    assert compute["vertices"].tolist() == mine["vertices"].tolist()
    assert np.allclose(compute["busy_pct"], 100 * mine["cycles"].to_numpy() / mine["cycles_step"].to_numpy())
    # AND the vertices tab groups them by the op's kind and pass
    kinds = ops.drop_duplicates("op_id").set_index("op_id")["kind"]
    expected = (mine.assign(kind=mine["op_id"].map(kinds)).groupby(["kind", "pass"])["vertices"]
                .agg(["count", "sum", "max"]))
    vertices = depth.vertices(0, tile).frame().set_index(["kind", "pass"]).sort_index()
    assert vertices["compute_sets"].tolist() == expected["count"].tolist()
    assert vertices["vertices"].tolist() == expected["sum"].tolist()
    assert vertices["max_vertices"].tolist() == expected["max"].tolist()
    # AND the exchanges are the IPU's exchange steps of the ops and passes whose compute sets it runs,
    # or of every tile
    steps = exchanges[exchanges["ipu"] == 0].merge(programs[programs["ipu"] == 0], on=["ipu", "step"],
                                                   suffixes=("", "_step"))
    runs = set(zip(mine["op_id"], mine["pass"]))
    takes_part = [(o, p) in runs and o >= 0 or t >= mnist.target["tiles_per_ipu"]
                  for o, p, t in zip(steps["op_id"], steps["pass"], steps["tiles"])]
    assert depth.exchanges(0, tile).frame()["step"].tolist() == sorted(steps[takes_part]["step"].tolist())
    assert len(depth.exchanges(0, tile).frame()) > 0


def test_the_fullest_tiles_over_steps_agree_with_liveness_and_their_peaks(mnist):
    # GIVEN IPU 2 (every variable split into no more grains than tiles: its footprints are exact)
    variables, memory, liveness = raw(mnist, "variables"), raw(mnist, "tile_memory"), raw(mnist, "liveness")
    over = mnist.memory.depth.over_steps(2, 5).frame()
    tiles = over["tile"].unique()
    peaks = memory[memory["ipu"] == 2].groupby("tile")["bytes"].sum()
    # THEN the five tiles are the fullest, and their most over the steps is their recorded peak
    assert sorted(peaks.loc[tiles].tolist(), reverse=True) == sorted(peaks.tolist(), reverse=True)[:5]
    assert (over.groupby("tile")["total_bytes"].max().loc[tiles] == peaks.loc[tiles]).all()
    # AND at each step, a tile's bytes are its always-live bytes plus its share of each variable live there
    tile = int(tiles[0])
    always = memory[(memory["ipu"] == 2) & (memory["tile"] == tile) & memory["always_live"]]["bytes"].sum()
    nal = variables[(variables["ipu"] == 2) & ~variables["always_live"]]
    on = nal[(nal["start_tile"] <= tile) & (tile < nal["start_tile"] + nal["tiles"])]
    held = [share_by_hand(int(b), int(n))[tile - int(s)] for b, n, s in zip(on["bytes"], on["tiles"], on["start_tile"])]
    mine = over[over["tile"] == tile]
    for step, total in zip(mine["step"], mine["total_bytes"]):
        live = (on["live_from_step"] <= step) & (step <= on["live_to_step"])
        assert total == always + sum(h for h, keep in zip(held, live) if keep)
    # AND where liveness names one of them as a step's worst tile, its bytes there agree
    worst = liveness[(liveness["ipu"] == 2) & liveness["worst_tile"].isin(tiles)]
    assert len(worst) > 0
    got = over.set_index(["tile", "step"])["total_bytes"]
    assert [got[(t, s)] for t, s in zip(worst["worst_tile"], worst["step"])] == worst["worst_tile_bytes"].tolist()
    # AND the summary names each tile's peak step
    summary = mnist.memory.depth.worst().frame().query("ipu == 2")
    assert summary["peak_bytes"].tolist() == peaks.loc[summary["tile"]].tolist()


def test_the_fullest_tiles_name_the_two_categories_that_fill_them(oom):
    # GIVEN the synthetic out-of-memory profile (IPU 0's four tiles hold 1,150 bytes each)
    memory = raw(oom, "tile_memory")
    fullest = oom.memory.depth.fullest(2).frame()
    assert fullest["ipu"].tolist() == [0, 0, 1, 1]
    for row in fullest.itertuples():
        sums = memory[(memory["ipu"] == row.ipu) & (memory["tile"] == row.tile)].groupby("category")["bytes"].sum()
        rank = sums.index.map({c: i for i, c in enumerate(MEMORY_CATEGORIES)}.get)
        top = sums.iloc[np.lexsort((rank, -sums.to_numpy()))]  # ties: the category the schema lists first
        assert (row.category, row.total_bytes) == (top.index[0], sums.sum())
        assert row.category_pct == pytest.approx(100 * top.iloc[0] / sums.sum())
        assert row.second_pct == pytest.approx(100 * top.iloc[1] / sums.sum())


def test_a_tile_off_the_ipu_is_one_sentence(oom):
    with pytest.raises(OutOfRangeError, match="Tile 4 is not on the IPU: tiles run from 0 to 3."):
        oom.memory.depth.compute_sets(0, 4)


def test_a_schema_1_profile_says_its_vertices_are_not_recorded(tmp_path: Path, profiles):
    # GIVEN the synthetic profile rewritten as schema 1 (tile_cycles without vertices)
    from tests.test_format_hostile import without_vertices

    old = pv.open(without_vertices(profiles["oom"], tmp_path / "v1.pop", 1))
    # THEN the compute sets hold -1 vertices, the vertices tab nothing, and the page's words say why
    assert not old.memory.depth.vertices_recorded
    assert (old.memory.depth.compute_sets(0, 0)["vertices"] == -1).all()
    assert len(old.memory.depth.vertices(0, 0)) == 0
    assert NOT_RECORDED == "vertices: not recorded (schema 1 profile)"
