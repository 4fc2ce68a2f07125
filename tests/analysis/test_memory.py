"""Memory figures on the out-of-memory profile, checked by hand (tests/synthetic.oom_pipeline)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from popvision_py.analysis.ipu.memory import BY_IPU_COLUMNS, BY_TILE_COLUMNS, bytes_on_tile
from popvision_py.errors import OutOfRangeError

# IPU 0, each of 4 tiles: 100 code + 3,000/4 weights + 1,000/4 optimiser + 200/4 activations = 1,150 > 1,000
# IPU 1, each tile: 100 + 100 + 25 + 50 = 275


def test_by_tile(oom):
    t = oom.memory.by_tile()
    assert list(t.columns) == BY_TILE_COLUMNS
    assert len(t) == 8
    ipu0 = t[t["ipu"] == 0]
    assert (ipu0["always_live_bytes"] == 1100).all() and (ipu0["not_always_live_bytes"] == 50).all()
    assert (ipu0["excess_bytes"] == 150).all() and ipu0["oom"].all()
    assert (t[t["ipu"] == 1]["total_bytes"] == 275).all()


def test_by_ipu(oom):
    m = oom.memory.by_ipu()
    assert list(m.columns) == BY_IPU_COLUMNS
    r0, r1 = m.iloc[0], m.iloc[1]
    assert (r0["always_live_bytes"], r0["not_always_live_bytes"], r0["total_bytes"]) == (4400, 200, 4600)
    assert (r0["capacity_bytes"], r0["headroom_bytes"], r0["max_tile_bytes"], r0["oom_tiles"]) == (4000, -600, 1150, 4)
    assert r0["used_pct"] == pytest.approx(115.0)
    assert (r1["total_bytes"], r1["headroom_bytes"], r1["oom_tiles"]) == (1100, 2900, 0)


def test_distribution_and_out_of_memory(oom):
    d = oom.memory.distribution().set_index("ipu")
    assert d.loc[0, "min_bytes"] == d.loc[0, "p99_bytes"] == d.loc[0, "max_bytes"] == 1150
    assert d.loc[1, "median_bytes"] == 275
    o = oom.memory.out_of_memory()
    assert list(o.columns) == ["ipu", "tile", "total_bytes", "excess_bytes"]
    assert list(o["tile"]) == [0, 1, 2, 3] and (o["excess_bytes"] == 150).all()


def test_distribution_percentile_on_uneven_tiles():
    from popvision_py.analysis.ipu.memory import TileTotals, distribution

    tiles = TileTotals({"ipu": np.zeros(101, np.int64), "total_bytes": np.arange(101)}, ipus=np.array([0]))
    d = distribution(tiles).frame().iloc[0]
    assert (d["min_bytes"], d["median_bytes"], d["p99_bytes"], d["max_bytes"]) == (0, 50, 99, 100)


def test_by_category_and_variables(oom):
    c = oom.memory.by_category(0)
    assert list(c["category"]) == ["weights", "optimiser_state", "vertex_code", "activations"]
    assert list(c["bytes"]) == [3000, 1000, 400, 200]
    assert list(c["always_live"]) == [True, True, True, False]
    v = oom.memory.largest_variables(2)
    assert list(v["name"]) == ["B1/weight", "B1/optimiser"] and list(v["bytes"]) == [3000, 1000]
    tv = oom.memory.tile_variables(0, 0)
    assert list(tv["name"]) == ["B1/weight", "B1/optimiser", "IPU0/code", "B1/activation"]
    assert list(tv["bytes_on_tile"]) == [750, 250, 100, 50]
    b = oom.memory.tile_breakdown(0, 3)
    assert b["bytes"].sum() == 1150


def test_bytes_on_tile_is_the_emulators_split_with_one_grain_per_tile():
    # GIVEN 1,001 bytes over tiles 2..5; the emulator's split (engine.mapping.Mapping.share) of one grain a tile
    from engine.mapping import Mapping

    v = pd.DataFrame({"bytes": [1001], "tiles": [4], "start_tile": [2]})
    emulator = Mapping(2, np.ones(4, np.int64)).share(1001)
    # THEN each tile's cumulative share rounded down: 250, 500, 750, 1001
    assert [int(bytes_on_tile(v, t)[0]) for t in range(7)] == [0, 0, 250, 250, 250, 251, 0] == [0, 0, *emulator, 0]
    assert bytes_on_tile(v, np.arange(7)).ravel().tolist() == [0, 0, 250, 250, 250, 251, 0]


def test_unknown_tile_is_one_sentence(oom):
    with pytest.raises(OutOfRangeError):
        oom.memory.tile_breakdown(0, 4)
    with pytest.raises(OutOfRangeError):
        oom.memory.tile_variables(7, 0)


def test_summary_says_it_does_not_fit(oom):
    s = oom.summary.figures()
    assert (s.fits, s.oom_tiles, s.worst_ipu, s.worst_tile, s.worst_tile_bytes) == (False, 4, 0, 0, 1150)


def test_oom_insights_with_the_worst_tile_each_fix_leaves(oom):
    i = oom.summary.insights()
    assert list(i.columns) == ["severity", "topic", "finding", "suggestion", "effect", "command"]
    memory = i[i["topic"] == "memory"]
    assert (memory["severity"] == "error").all()
    assert "150 bytes over" in memory["finding"].iloc[0]
    by_fix = {s.split()[0]: (e, c) for s, e, c in zip(memory["suggestion"], memory["effect"], memory["command"])}
    # IPU 0's tiles hold 750 weights + 250 optimiser state + 100 code + 50 activations = 1,150 bytes
    assert "worst tile 1,150 bytes -> about 900 bytes (90.0% of 1,000 bytes: fits" in by_fix["Offload"][0]
    assert " --offload-optimiser " in by_fix["Offload"][1]
    # halving the micro-batch halves the 50 bytes of activations: 1,125, still 125 over
    assert "about 1,125 bytes (112.5% of 1,000 bytes: still 125 bytes over)" in by_fix["Halve"][0]
    assert " --batch-size 1 --gradient-accumulation 8 " in by_fix["Halve"][1]
    # two blocks cannot make three stages, and nothing is stashed: neither fix is offered
    assert set(by_fix) == {"Offload", "Halve"}
