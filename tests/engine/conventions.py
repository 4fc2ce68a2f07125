"""Checks that a written profile keeps docs/profile-format.md's conventions; used by the engine tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from popvision_py.format import open_profile

PHASE_OF_TYPE = {
    "compute_set": "compute", "exchange": "exchange", "global_exchange": "exchange", "all_reduce": "exchange",
    "sync": "sync", "stream_copy": "stream", "remote_buffer_copy": "stream",
}


def check_profile(path) -> dict[str, pd.DataFrame]:
    """Assert every convention; return the tables for further checks."""
    with open_profile(path) as profile:
        tables = {name: profile.read_pandas(name) for name in profile.tables}
        target = profile.target
    trace, programs = tables["trace"], tables["programs"]
    # Trace rows tile each IPU's time line from 0 to the end of the run.
    end = trace["end_cycle"].max()
    for ipu, rows in trace.groupby("ipu"):
        rows = rows.sort_values("start_cycle", kind="stable")
        starts, ends = rows["start_cycle"].to_numpy(), rows["end_cycle"].to_numpy()
        assert starts[0] == 0, f"IPU {ipu} starts at {starts[0]}"
        assert (starts[1:] == ends[:-1]).all(), f"IPU {ipu}: a gap or overlap in the trace"
        assert ends[-1] == end, f"IPU {ipu} ends at {ends[-1]}, the run at {end}"
        assert (ends > starts).all()
    # Phases follow program types; each execution lasts its program step's cycles.
    merged = trace[trace["step"] >= 0].merge(programs, on=["ipu", "step"], suffixes=("", "_p"))
    assert len(merged) == (trace["step"] >= 0).sum()
    assert (merged["phase"].astype(str) == merged["type"].astype(str).map(PHASE_OF_TYPE)).all()
    assert ((merged["end_cycle"] - merged["start_cycle"]) == merged["cycles"]).all()
    idle = trace[trace["step"] < 0]
    assert (idle["phase"].astype(str) == "idle").all()
    # A compute set's cycles are its slowest tile's.
    slowest = tables["tile_cycles"].groupby(["ipu", "step"])["cycles"].max()
    cs = programs[programs["type"].astype(str) == "compute_set"].set_index(["ipu", "step"])["cycles"]
    assert slowest.reindex(cs.index).eq(cs).all()
    # Steps are numbered per IPU from 0.
    for ipu, rows in programs.groupby("ipu"):
        assert (rows["step"].to_numpy() == np.arange(len(rows))).all()
    # Tile memory: each tile's rows sum to its peak = always-live + worst not-always-live step.
    tm = tables["tile_memory"]
    assert (tm["bytes"] > 0).all()
    assert tm["tile"].between(0, target["tiles_per_ipu"] - 1).all()
    liveness = tables["liveness"]
    for ipu, rows in liveness.groupby("ipu"):
        per_tile = tm[tm["ipu"] == ipu].groupby("tile")["bytes"].sum()
        assert rows["worst_tile_bytes"].max() == per_tile.max()
        always = tm[(tm["ipu"] == ipu) & tm["always_live"]]["bytes"].sum()
        assert (rows["always_live_bytes"] == always).all()
    return tables
