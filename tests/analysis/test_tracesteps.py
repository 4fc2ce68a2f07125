"""A long trace's supersteps and Gantt bars settled as its row groups are folded (``trace.steps``) equal the
ones cut once from all its runs of rows, and the figures recomputed from the raw rows."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import popvision_py as pv
from popvision_py.analysis.pipeline import critical_path, stages
from popvision_py.analysis.trace import retime
from popvision_py.analysis.trace import groups as tracegroups
from popvision_py.analysis.trace import scan as tracescan
from popvision_py.analysis.trace import steps as tracesteps
from popvision_py.analysis.common.tables import PASS, PASSES
from popvision_py.render import jsonout
from popvision_py.render.document import build_report
from tests.analysis.test_tracescan import _batches, _trace


def _in_time_order(frame: pd.DataFrame, block: int = 40_000) -> pd.DataFrame:
    """The rows as the engine writes them: a stretch of time at once, IPU by IPU (row groups in time order)."""
    key = frame.assign(block=frame["start_cycle"] // block)
    return key.sort_values(["block", "ipu", "start_cycle"], kind="stable").drop(columns="block").reset_index(drop=True)


def _folds(frame: pd.DataFrame, limit: int, bars: int | None = None, monkeypatch=None):
    """(the fold cutting every run at the end, the fold settling every ``limit`` runs), 2 threads, 700-row groups."""
    groups = _batches(frame, 700)
    bounds = {c: (int(frame[c].min()), int(frame[c].max())) for c in tracescan.BOUND_COLUMNS}
    starts = np.array([int(g.column("start_cycle").to_numpy().min()) for g in groups])
    if bars is not None:
        monkeypatch.setattr(tracesteps, "GANTT_BARS", bars)
    whole = tracegroups.summarise_groups(lambda g: [groups[g]], len(groups), bounds, workers=2)
    settled = tracegroups.summarise_groups(lambda g: [groups[g]], len(groups), bounds, workers=2, starts=starts,
                                           settle_runs=limit)
    return whole, settled


@pytest.mark.parametrize("limit", [300, 2000])
def test_settled_supersteps_equal_the_ones_cut_at_the_end_and_the_raw_rows(limit):
    # GIVEN a random trace of 9,000 rows in time order, as 13 row groups
    frame = _in_time_order(_trace())
    # WHEN it is folded with its runs settled every few hundred runs, and with them all kept to the end
    whole, settled = _folds(frame, limit)
    s, exact = settled.supersteps, retime.supersteps(whole.slots, whole.start_cycle, whole.end_cycle)
    # THEN the supersteps were settled as the trace came, and stand for the same supersteps
    assert s is not None and whole.supersteps is None
    assert s.weight.sum() == len(exact.cycles)
    assert s.total_cycles == exact.total_cycles == frame["end_cycle"].max() - frame["start_cycle"].min()
    # and their work is the raw rows': fixed work per IPU (busy rows that no stage's micro-batch moves) ...
    idle = frame["phase"] == "idle"
    movable = ((frame["stage"] >= 0) & (frame["micro_batch"] >= 0) & ~idle
               & frame["pass"].isin(["forward", "backward"]))
    cycles = frame["end_cycle"] - frame["start_cycle"]
    want_fixed = cycles[~idle & ~movable].groupby(frame["ipu"]).sum().reindex(range(s.num_ipus), fill_value=0)
    np.testing.assert_array_equal((s.fixed * s.weight[:, None]).sum(axis=0), want_fixed.to_numpy())
    # ... and each stage's forward and backward work
    n_stage = int(frame["stage"].max()) + 1
    want = cycles[movable].groupby([frame["stage"], frame["pass"] == "backward"]).sum()
    work = s.stage_work(n_stage)
    for (stage, backward), total in want.items():
        assert work[stage, int(backward)] == total
    np.testing.assert_array_equal(work, exact.stage_work(n_stage))
    # and every figure re-timed from them is the one from all the supersteps
    ipus = np.arange(s.num_ipus)
    assert retime.length(s, np.ones(len(s.cell_cycles))) == retime.length(exact, np.ones(len(exact.cell_cycles)))
    assert retime.balance(s, ipus).total_cycles == pytest.approx(retime.balance(exact, ipus).total_cycles, rel=1e-12)
    (a, totals_a, culprits_a), (b, totals_b, culprits_b) = critical_path.bsp_path(s, ipus), critical_path.bsp_path(
        exact, ipus)
    assert totals_a == totals_b
    pd.testing.assert_frame_equal(a.frame(), b.frame())
    np.testing.assert_allclose(culprits_a["saves_cycles"], culprits_b["saves_cycles"], rtol=1e-12)
    for name in ("cube", "executions", "micro_batches"):
        np.testing.assert_array_equal(getattr(settled, name), getattr(whole, name))


def _raw_bars(frame: pd.DataFrame) -> pd.DataFrame:
    """The Gantt bars grouped directly from the raw rows: each its rows' first start and last end."""
    rows = frame[(frame["stage"] >= 0) & (frame["micro_batch"] >= 0) & (frame["phase"] != "idle")].assign(
        g=lambda f: f["run"] * 4 + f["iteration"], p=lambda f: f["pass"].map(PASSES.index))
    return rows.groupby(["ipu", "stage", "p", "g", "micro_batch"]).agg(
        start_cycle=("start_cycle", "min"), end_cycle=("end_cycle", "max")).reset_index()


def _assert_first_iterations_bars(agg: tracescan.Aggregates, frame: pd.DataFrame, bars: int) -> None:
    """``agg``'s bars are those of the trace's first iterations, whole, at most ``bars``, as the raw rows give them."""
    got = pd.DataFrame(tracescan.gantt_bars(agg))
    want = _raw_bars(frame)
    kept = np.unique(got["iteration"])
    assert len(got) <= bars and 0 < len(kept) < want["g"].nunique()
    np.testing.assert_array_equal(kept, np.arange(len(kept)))  # the first iterations
    want = want[want["g"].isin(kept)]
    got = got.rename(columns={"pass": "p", "iteration": "g"}).sort_values(
        ["ipu", "stage", "p", "g", "micro_batch"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got[want.columns].astype("int64"), want.reset_index(drop=True).astype("int64"))


def test_settled_bars_are_the_first_iterations_bars(monkeypatch):
    # GIVEN a trace in time order folded with its runs settled, keeping at most 200 bars
    frame = _in_time_order(_trace())
    whole, settled = _folds(frame, 300, bars=200, monkeypatch=monkeypatch)
    # THEN the bars kept are those of the first iterations, whole, at most 200, each its rows' first
    # start and last end (grouped directly from the raw rows)
    _assert_first_iterations_bars(settled, frame, 200)
    assert settled.first_bars and not whole.first_bars
    assert len(tracescan.gantt_bars(whole)["ipu"]) == len(_raw_bars(frame))


def test_a_trace_not_cut_into_supersteps_keeps_its_first_iterations_bars_only(monkeypatch):
    # GIVEN a trace written IPU after IPU, as an import writes its ranks (no horizon ever passes), in 700-row groups
    frame = _trace()
    groups = _batches(frame, 700)
    bounds = {c: (int(frame[c].min()), int(frame[c].max())) for c in tracescan.BOUND_COLUMNS}
    monkeypatch.setattr(tracesteps, "GANTT_BARS", 200)
    whole = tracegroups.summarise_groups(lambda g: [groups[g]], len(groups), bounds, workers=2)
    # WHEN it is folded without cutting supersteps (a run that is not bulk-synchronous)
    bars = tracegroups.summarise_groups(lambda g: [groups[g]], len(groups), bounds, workers=2, cut=False)
    # THEN no supersteps are cut, and only the first iterations' bars are kept, as the raw rows give them
    assert bars.supersteps is None and bars.first_bars
    _assert_first_iterations_bars(bars, frame, 200)
    # and every other figure is the whole fold's
    for name in ("cube", "executions", "micro_batches"):
        np.testing.assert_array_equal(getattr(bars, name), getattr(whole, name))
    assert (bars.iterations, bars.rows, bars.start_cycle, bars.end_cycle) == (
        whole.iterations, whole.rows, whole.start_cycle, whole.end_cycle)


def test_row_groups_out_of_time_order_give_the_same_figures():
    # GIVEN a trace written IPU after IPU (each IPU's first row group starts at cycle 0: the horizon
    # moves only once the last IPU's are folded)
    frame = _trace()
    whole, settled = _folds(frame, 300)
    # THEN whatever was settled, the supersteps and bars are those cut from all the runs at the end
    exact = retime.supersteps(whole.slots, whole.start_cycle, whole.end_cycle)
    s = settled.supersteps if settled.supersteps is not None else retime.supersteps(
        settled.slots, settled.start_cycle, settled.end_cycle)
    assert (s.weight.sum() if s.weight is not None else len(s.cycles)) == len(exact.cycles)
    np.testing.assert_array_equal(s.stage_work(4), exact.stage_work(4))
    assert retime.length(s, np.ones(len(s.cell_cycles))) == exact.total_cycles
    for name, column in tracescan.gantt_bars(whole).items():
        np.testing.assert_array_equal(tracescan.gantt_bars(settled)[name], column)


def test_a_report_is_the_same_with_its_runs_settled(several_row_groups, monkeypatch):
    # GIVEN a profile of several row groups, its iterations alike
    path = several_row_groups

    def report(settle_runs: int) -> bytes:
        monkeypatch.setattr(tracesteps, "SETTLE_RUNS", settle_runs)
        monkeypatch.setattr(tracegroups, "workers_for", lambda groups: min(2, groups))
        with pv.open(path) as r:
            if settle_runs < 1 << 20:  # a few distinct supersteps stand for all of them
                s = r.trace_summary().supersteps
                assert s is not None and len(s.cycles) < s.weight.sum() / 100
            return jsonout.render(build_report(r, "all"))

    # WHEN every section is reported with the runs settled every 5,000 runs, and kept to the end
    # THEN the JSON reports are byte for byte the same
    assert report(5000) == report(1 << 30)
    assert PASS["backward"] == PASSES.index("backward")


def test_distinct_rows_are_numpys_distinct_rows_in_the_same_numbering():
    # supersteps as rows: many repeats, a -0.0 where another copy has 0.0 (one superstep: equal as floats)
    rng = np.random.default_rng(7)
    kinds = rng.integers(0, 50, (40, 9)).astype(np.float64)
    kinds[3, 4] = 0.0
    rows = kinds[rng.integers(0, 40, 5000)]
    rows[np.flatnonzero((rows == kinds[3]).all(axis=1))[1::2], 4] = -0.0
    first, which = tracesteps._distinct_rows(rows)
    _, numpy_first, numpy_which = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    # numbered alike up to the order of the groups: the same first rows, and each row in its first row's group
    assert sorted(first.tolist()) == sorted(numpy_first.tolist())
    assert (rows[first[which]] == rows).all()
    assert (first[which] == numpy_first[numpy_which.reshape(-1)]).all()
    assert len(first) == len(np.unique(kinds, axis=0))


@pytest.mark.parametrize("spread", [10, 2**40])
def test_packed_keys_order_rows_as_their_columns_do(spread):
    # bars' keys (ipu, stage, pass, run, iteration, micro-batch); 2**40 per column passes int64 packed,
    # and the keys are then the rows' ranks
    rng = np.random.default_rng(3)
    columns = [rng.integers(0, spread, 3000) for _ in range(6)]
    columns[0][:10] = 0  # repeats
    for c in columns:
        c[10:20] = c[:10]
    key = tracesteps._packed(columns)
    order = np.lexsort(columns[::-1])
    stacked = np.stack(columns)[:, order]
    same_as_next = (stacked[:, 1:] == stacked[:, :-1]).all(axis=0)
    assert (np.diff(key[order])[same_as_next] == 0).all()
    assert (np.diff(key[order])[~same_as_next] > 0).all()


def test_a_row_group_handed_in_during_a_settle_is_settled_after_it():
    # GIVEN a trace of two row groups whose footers both say they start at its first cycle (so nothing
    # can settle until both are folded), and a settle the first worker begins, held open
    frame = _in_time_order(_trace())
    groups = _batches(frame, (len(frame) + 1) // 2)
    bounds = {c: (int(frame[c].min()), int(frame[c].max())) for c in tracescan.BOUND_COLUMNS}
    parts = []
    for g, batch in enumerate(groups):
        fold = tracescan._Fold(bounds)
        fold.add(tracescan.arrays(batch, tracescan.SUMMARY_COLUMNS), (g, 0))
        parts.append(fold.slots.parts)
    entered, release = threading.Event(), threading.Event()

    class Held(tracesteps.Settler):
        def _settle(self, pending, horizon):
            if horizon is not None and not entered.is_set():
                entered.set()
                assert release.wait(10)
            return super()._settle(pending, horizon)

    settler = Held(np.full(2, bounds["start_cycle"][0]), bounds, bounds["iteration"][1] + 1, limit=1)
    first = threading.Thread(target=settler.add, args=(0, parts[0]))
    first.start()
    assert entered.wait(10)
    # WHEN the second worker hands in the last row group while that settle is under way
    settler.add(1, parts[1])  # returns at once: a settle is under way
    release.set()
    first.join(10)
    # THEN the settling worker settles again for it, now that every row group is done: the runs are
    # settled as they would be by one worker (before, nothing retried and the fold kept every run)
    alone = tracesteps.Settler(np.full(2, bounds["start_cycle"][0]), bounds, bounds["iteration"][1] + 1, limit=1)
    alone.add(0, parts[0])
    alone.add(1, parts[1])
    assert alone.settled and settler.settled
    assert settler.held == alone.held and settler.boundary == alone.boundary


def test_an_imported_profiles_trace_is_folded_into_its_bars_without_supersteps():
    # GIVEN a GPipe run imported from PyTorch traces (ranks that wait only at their transfers)
    profile = Path(__file__).resolve().parents[2] / "sample_profiles" / "pytorch_gpipe" / "profile.pop"
    with pv.open(profile) as r:
        # WHEN its trace is folded for the reports
        agg = r.trace_summary()
        gantt = r.stages.gantt()
        # a fold of every run of rows kept to the end, to check against
        batches = r.profile.iter_batches("trace", tracescan.SUMMARY_COLUMNS)
        every_run = tracescan.summarise(batches)
    # THEN no supersteps are cut, and the bars are the ones of all its runs of rows
    assert agg.supersteps is None and agg.first_bars and every_run.supersteps is None
    want = stages.gantt(tracescan.gantt_bars(every_run))
    assert len(gantt) == len(want) > 0

    def ordered(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.sort_values(list(frame.columns)).reset_index(drop=True)

    pd.testing.assert_frame_equal(ordered(gantt), ordered(want))
