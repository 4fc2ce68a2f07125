"""Tiles: balance per compute set and IPU, the busiest tiles, chosen tiles in time, each recomputed here
from the raw tables (trace, tile_cycles, programs) row by row, with pandas, as a person would."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import popvision_py as pv
from popvision_py.analysis.ipu import tiles as T
from popvision_py.analysis.trace.timeline import TimelineIndex
from popvision_py.errors import OutOfRangeError
from tests import synthetic

SAMPLES = Path(__file__).resolve().parents[2] / "sample_profiles"


@pytest.fixture(scope="module", params=["synthetic", "mnist"])
def report(request, tmp_path_factory):
    """A synthetic pipeline (tile t computes c × (T − t) // T: every compute set unbalanced) and the engine's
    mnist (compute sets over a part of the IPU's tiles)."""
    if request.param == "synthetic":
        path = synthetic.write_pipeline_profile(tmp_path_factory.mktemp("tiles") / "p.pop", [100, 60, 40, 120],
                                                stages=[2, 2], micro_batches=6, iterations=2, tiles_per_ipu=64,
                                                exchange_cycles=50, sync_cycles=5, host_cycles=20)
    else:
        path = SAMPLES / "mnist_pipelined" / "profile.pop"
    with pv.open(path) as opened:
        yield opened


@pytest.fixture(scope="module")
def raw(report):
    """The raw tables, and each tile_cycles row's cycles clipped to its step's (the format makes a compute set's
    cycles the largest of its tiles': the clip changes nothing on a profile that keeps it)."""
    trace = report.profile.read_pandas("trace")
    trace["phase"] = trace["phase"].astype(str)
    programs = report.profile.read_pandas("programs")
    tiles = report.profile.read_pandas("tile_cycles").merge(
        programs[["ipu", "step", "cycles"]].rename(columns={"cycles": "step_cycles"}), on=["ipu", "step"])
    assert (tiles["cycles"] <= tiles["step_cycles"]).all()
    return trace, programs, tiles


def test_balance_per_compute_set_equals_its_rows(report, raw):
    trace, programs, tiles = raw
    # GIVEN each compute set's tile rows, how often the trace ran it, and the run's length
    executions = trace.groupby(["ipu", "step"]).size().rename("executions")
    run = trace["end_cycle"].max() - trace["start_cycle"].min()
    want = tiles.groupby(["ipu", "step"]).agg(tiles=("tile", "size"), low=("cycles", "min"), mean=("cycles", "mean"),
                                              high=("cycles", "max"), step_cycles=("step_cycles", "first"))
    want = want.join(executions).fillna({"executions": 0}).reset_index()
    # WHEN the report answers
    got = report.tiles.balance()
    # THEN every compute set is there with its spread, imbalance, idle share and share of the run
    assert len(got) == len(want)
    merged = got.merge(want, on=["ipu", "step"])
    assert len(merged) == len(want)
    assert (merged["tiles_x"] == merged["tiles_y"]).all()
    assert (merged["min_tile_cycles"] == merged["low"]).all() and (merged["max_tile_cycles"] == merged["high"]).all()
    np.testing.assert_allclose(merged["mean_tile_cycles"], merged["mean"])
    assert (merged["executions_x"] == merged["executions_y"]).all()
    np.testing.assert_allclose(merged["imbalance"], merged["high"] / merged["mean"])
    np.testing.assert_allclose(merged["idle_pct"], 100 * (1 - merged["mean"] / merged["step_cycles_y"]))
    np.testing.assert_allclose(merged["run_pct"], 100 * merged["executions_y"] * merged["step_cycles_y"] / run)
    # AND the worst balance comes first
    assert got["imbalance"].is_monotonic_decreasing
    names = programs.set_index(["ipu", "step"])["name"].astype(str)
    assert list(got["name"]) == [names[(i, s)] for i, s in zip(got["ipu"], got["step"])]


def test_busiest_tiles_and_per_ipu_balance_equal_their_rows(report, raw):
    trace, programs, tiles = raw
    executions = trace.groupby(["ipu", "step"]).size().rename("executions")
    rows = tiles.join(executions, on=["ipu", "step"]).fillna({"executions": 0})
    rows["run_cycles"] = rows["cycles"] * rows["executions"]
    per_tile = rows.groupby(["ipu", "tile"])["run_cycles"].sum().sort_values(ascending=False, kind="stable")
    run = trace["end_cycle"].max() - trace["start_cycle"].min()
    # WHEN the 5 busiest tiles are asked for THEN they hold the most compute cycles over the run
    busiest = report.tiles.busiest(5)
    assert list(busiest["compute_cycles"]) == list(per_tile.head(5))
    for r in busiest.itertuples():
        assert per_tile[(r.ipu, r.tile)] == r.compute_cycles
        assert r.busy_pct == pytest.approx(100 * r.compute_cycles / run)
        assert r.compute_sets == ((tiles["ipu"] == r.ipu) & (tiles["tile"] == r.tile)).sum()
    # AND per IPU: the compute sets' time, the tiles' busy share of it, the busiest tile
    n_tiles = int(report.target["tiles_per_ipu"])
    sets = programs[programs["type"].astype(str) == "compute_set"].join(executions, on=["ipu", "step"]).fillna(
        {"executions": 0})
    for r in report.tiles.by_ipu().itertuples():
        set_cycles = (sets.loc[sets["ipu"] == r.ipu, "cycles"] * sets.loc[sets["ipu"] == r.ipu, "executions"]).sum()
        mine = per_tile.loc[r.ipu]
        assert r.compute_set_cycles == set_cycles
        assert r.tiles_used == tiles.loc[tiles["ipu"] == r.ipu, "tile"].nunique()
        assert r.tile_busy_pct == pytest.approx(100 * mine.sum() / (n_tiles * set_cycles))
        assert r.busiest_tile_cycles == mine.max() and mine[r.busiest_tile] == mine.max()
        assert r.mean_tile_cycles == pytest.approx(mine.sum() / n_tiles)


def _tile_rows(trace: pd.DataFrame, tiles: pd.DataFrame, ipu: int, tile: int) -> pd.DataFrame:
    """The IPU's trace rows as one tile lives them (docs/reports.md "Tiles"): ``busy_end`` is where its compute
    ends in a compute set (its tile_cycles row, 0 without one)."""
    rows = trace[trace["ipu"] == ipu].copy()
    mine = tiles[(tiles["ipu"] == ipu) & (tiles["tile"] == tile)].set_index("step")["cycles"]
    c = rows["step"].map(mine).fillna(0).astype(np.int64)
    rows["busy_end"] = np.where(rows["phase"] == "compute",
                                rows["start_cycle"] + np.minimum(c, rows["end_cycle"] - rows["start_cycle"]),
                                rows["start_cycle"])
    return rows


def _overlap(start: pd.Series, end: pd.Series, a, b) -> np.ndarray:
    """Cycles of the intervals [start, end) inside [a, b), summed: one figure per (a, b) given."""
    start, end = np.asarray(start)[:, None], np.asarray(end)[:, None]
    return np.clip(np.minimum(end, np.atleast_1d(b)) - np.maximum(start, np.atleast_1d(a)), 0, None).sum(axis=0)


def _brute_bins(rows: pd.DataFrame, a, b) -> dict[str, np.ndarray]:
    """A tile's cycles per phase in each [a, b), from its rows."""
    compute = rows[rows["phase"] == "compute"]
    out = {"compute": _overlap(compute["start_cycle"], compute["busy_end"], a, b),
           "wait": _overlap(compute["busy_end"], compute["end_cycle"], a, b)}
    for phase in ("sync", "exchange", "stream", "idle"):
        part = rows[rows["phase"] == phase]
        out[phase] = _overlap(part["start_cycle"], part["end_cycle"], a, b)
    return out


def _chosen(report, ipu: int) -> list[int]:
    """Tiles that compute little, much and not at all: the busiest two, the least busy of those used, one unused."""
    busiest = list(report.tiles.busiest(2, ipu)["tile"])
    used = report.tiles.step_balance(ipu, int(report.tiles.balance().query("ipu == @ipu")["step"].iloc[0]))
    idle = [int(t) for t in used.loc[used["cycles"] == 0, "tile"][:1]]
    return list(dict.fromkeys(busiest + [int(used["tile"].iloc[-1])] + idle))


@pytest.mark.parametrize("block", [4, 1024])
def test_a_tile_in_bins_equals_its_rows_in_each_bin(report, raw, block):
    # GIVEN the index with compute-set counts every few rows (block 4: the running counts and the rows after
    # them both count) and windows whose edges fall inside compute sets
    trace, programs, tiles = raw
    index = report.trace._index()
    arrays = report.tiles.arrays()
    start, end = report.trace.extent()
    for ipu in (0, 1):
        time = T.TileTimeIndex(index.ipu(ipu), T.compute_steps(arrays, ipu), block=block)
        chosen = _chosen(report, ipu)
        lived = {tile: _tile_rows(trace, tiles, ipu, tile) for tile in chosen}
        # the second window from a third to a half of the IPU's rows (not of its time: a host call's wait
        # can fill a third of the run), its edges a few cycles inside rows
        rows = index.ipu(ipu).start
        for a, b in ((start, end), (int(rows[len(rows) // 3]) + 7, int(rows[len(rows) // 2]) + 3)):
            # WHEN the tiles' time line is asked for in bins
            got = T.tile_timeline(index, time, arrays, ipu, chosen, a, b, max_bins=9)
            assert got.level == "bins"
            edges = np.unique(got.frame["start_cycle"].tolist() + got.frame["end_cycle"].tolist())
            # THEN each tile's cycles per phase in each bin are its rows' overlap with the bin
            for tile in chosen:
                want = _brute_bins(lived[tile], edges[:-1], edges[1:])
                mine = got.frame[got.frame["tile"] == tile]
                for phase, cycles in want.items():
                    here = mine[mine["phase"].astype(str) == phase]
                    have = here.set_index("start_cycle")["cycles"].reindex(edges[:-1], fill_value=0)
                    assert have.tolist() == cycles.tolist(), (ipu, tile, phase)


def test_a_tile_at_events_level_is_each_execution_split_at_its_tile_cycles(report, raw):
    trace, programs, tiles = raw
    ipu = 0
    chosen = _chosen(report, ipu)
    rows_ipu = trace[trace["ipu"] == ipu].sort_values("start_cycle")
    # GIVEN a window of a few dozen rows around the IPU's busiest compute set
    compute = rows_ipu[rows_ipu["phase"] == "compute"]
    middle = compute.iloc[len(compute) // 2]
    start, length = int(middle["start_cycle"]), int(middle["end_cycle"] - middle["start_cycle"])
    a, b = start - 1, start + 40 * length
    # WHEN the chosen tiles are asked for with a budget above its rows
    got = report.tiles.timeline(ipu, chosen, a, b, max_bins=800).frame
    # THEN each row becomes a bar of its phase, or (a compute set) the tile's compute then its wait
    window = rows_ipu[(rows_ipu["end_cycle"] > a) & (rows_ipu["start_cycle"] < b)]
    for tile in chosen:
        rows = _tile_rows(window, tiles, ipu, tile)
        want = []
        for r in rows.itertuples():
            if r.phase != "compute":
                want.append((r.start_cycle, r.end_cycle, r.phase, -1))
                continue
            if r.busy_end > r.start_cycle:
                want.append((r.start_cycle, r.busy_end, "compute", r.step))
            if r.busy_end < r.end_cycle:
                want.append((r.busy_end, r.end_cycle, "wait", r.step))
        mine = got[got["tile"] == tile]
        have = list(zip(mine["start_cycle"], mine["end_cycle"], mine["phase"].astype(str), mine["step"]))
        assert have == want
        assert (mine["cycles"] == mine["end_cycle"] - mine["start_cycle"]).all()


def test_the_balance_in_a_window_is_each_tiles_compute_there(report, raw):
    trace, programs, tiles = raw
    start, end = report.trace.extent()
    ipu = 1
    # WHEN the whole run is the window THEN the tiles' busy share is the IPU's, as the report gives it
    whole, set_cycles = report.tiles.window_balance(ipu)
    by_ipu = report.tiles.by_ipu().set_index("ipu")
    assert set_cycles == by_ipu.loc[ipu, "compute_set_cycles"]
    assert whole["cycles"].sum() / (len(whole) * set_cycles) * 100 == pytest.approx(by_ipu.loc[ipu, "tile_busy_pct"])
    # AND in a window cutting compute sets: each tile's compute overlapping it, over the compute sets' cycles there
    # (from a fifth to a half of the IPU's compute rows, not of its time: a host call's wait can fill much of it)
    compute = trace[(trace["ipu"] == ipu) & (trace["phase"] == "compute")].sort_values("start_cycle")
    starts = compute["start_cycle"].to_numpy()
    a, b = int(starts[len(starts) // 5]) + 11, int(starts[len(starts) // 2]) + 5
    assert start <= a < b <= end
    got, set_cycles = report.tiles.window_balance(ipu, a, b)
    assert set_cycles == _overlap(compute["start_cycle"], compute["end_cycle"], a, b)[0]
    for tile in _chosen(report, ipu):
        rows = _tile_rows(trace, tiles, ipu, tile)
        busy = _brute_bins(rows, a, b)["compute"][0]
        assert got.loc[got["tile"] == tile, "cycles"].item() == busy
        assert got.loc[got["tile"] == tile, "busy_pct"].item() == pytest.approx(100 * busy / set_cycles)


def test_one_compute_sets_balance_is_each_tiles_share_of_the_step(report, raw):
    trace, programs, tiles = raw
    top = report.tiles.balance().iloc[0]
    ipu, step = int(top["ipu"]), int(top["step"])
    got = report.tiles.step_balance(ipu, step)
    rows = tiles[(tiles["ipu"] == ipu) & (tiles["step"] == step)].set_index("tile")["cycles"]
    assert len(got) == int(report.target["tiles_per_ipu"])
    assert got["cycles"].tolist() == [int(rows.get(t, 0)) for t in range(len(got))]
    np.testing.assert_allclose(got["busy_pct"], 100 * got["cycles"] / top["step_cycles"])


def test_the_index_keeps_each_compute_rows_step(report, raw):
    trace = raw[0]
    index = report.trace._index()
    for ipu in index.ipus:
        rows = trace[trace["ipu"] == ipu].sort_values("start_cycle", kind="stable")
        want = rows.loc[rows["phase"] == "compute", "step"].to_numpy()
        np.testing.assert_array_equal(index.ipu(ipu).compute_step, want)
    # an index built from arrays without steps says -1 for each
    assert (TimelineIndex.from_ipus({0: (np.array([0, 5]), np.array([5, 9]), np.array([0, 1], np.int8))})
            .ipu(0).compute_step == -1).all()


def test_choosing_tiles_by_number_range_or_the_busiest(report):
    top = report.tiles.busiest(8, 0)["tile"].tolist()
    assert report.tiles.choose(0, "0,5,17") == [0, 5, 17]
    assert report.tiles.choose(0, " 30 - 33, 5 ,31") == [30, 31, 32, 33, 5]
    assert report.tiles.choose(0, "worst 8") == top == report.tiles.choose(0, "Busiest 8")
    n = int(report.target["tiles_per_ipu"])
    wrong = [("abc", "'abc' is not a tile"), (f"{n}", f"Tile {n} is not on the IPU"), ("9-3", "ends before it starts"),
             ("worst 0", "between 1 and 64"), ("worst 65", "between 1 and 64"), ("", "Name tiles")]
    if n > 64:
        wrong.append(("0-40, 41-64", "at most 64 tiles; 65 are named"))
    for spec, words in wrong:
        with pytest.raises(OutOfRangeError, match=words):
            report.tiles.choose(0, spec)


def test_an_imported_profile_has_no_tiles_in_its_report():
    from popvision_py.render.document import build_report

    with pv.open(SAMPLES / "pytorch_gpipe" / "profile.pop") as imported:
        doc = build_report(imported, "tiles")
    (block,) = doc.blocks
    assert block.empty == T.NO_TILES and block.empty.startswith("A rank has no tiles")
