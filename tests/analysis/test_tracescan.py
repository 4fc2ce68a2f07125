"""The trace folded batch by batch equals the whole trace computed directly (pandas, by brute force)."""

from __future__ import annotations

import io
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import popvision_py as pv
from popvision_py.analysis.trace import rows as tracerows
from popvision_py.analysis.trace import scan as tracescan
from popvision_py.analysis.trace.cube import Cube
from popvision_py.analysis.common.tables import PASSES, PHASES
from popvision_py.analysis.trace.timeline import BLOCK, TimelineIndex, cycles_before, timeline
from popvision_py.errors import ValueRangeError
from popvision_py.format import Profile
from popvision_py.format import schema as S
from popvision_py.render.document import build_report


def _trace(rows_per_ipu: int = 3000, ipus: int = 3, seed: int = 1) -> pd.DataFrame:
    """A random trace tiling each IPU's time line, with runs, iterations, stages, micro-batches and idle rows."""
    rng = np.random.default_rng(seed)
    parts = []
    for ipu in range(ipus):
        n = rows_per_ipu
        dur = rng.integers(1, 500, n)
        end = np.cumsum(dur)
        g = np.arange(n) * 12 // n  # 12 iterations, 4 per run
        phase = rng.integers(0, len(PHASES), n)
        idle = phase == PHASES.index("idle")
        parts.append(pd.DataFrame({
            "run": g // 4, "iteration": g % 4, "micro_batch": np.where(idle, -1, (np.arange(n) // 37) % 5),
            "ipu": ipu, "stage": np.where(idle, -1, ipu + (np.arange(n) // 1000) % 2),
            "pass": np.array(PASSES, dtype=object)[np.where(idle, 3, rng.integers(0, 3, n))],
            "step": np.where(idle, -1, rng.integers(0, 40, n)), "phase": np.array(PHASES, dtype=object)[phase],
            "start_cycle": end - dur, "end_cycle": end,
        }))
    return pd.concat(parts, ignore_index=True)


def _batches(frame: pd.DataFrame, size: int, shuffle: bool = False) -> list[pa.RecordBatch]:
    """The frame as the reader gives it: category columns as dictionaries, in batches of ``size`` rows."""
    if shuffle:  # IPUs interleaved and rows out of time order, as a hostile writer might leave them
        frame = frame.sample(frac=1.0, random_state=3).reset_index(drop=True)
    table = pa.Table.from_pandas(frame.astype({"pass": "category", "phase": "category"}), preserve_index=False)
    return table.to_batches(max_chunksize=size)


@pytest.mark.parametrize("size,shuffle", [(10_000_000, False), (777, False), (500, True)])
def test_summary_of_batches_equals_brute_force(size, shuffle):
    # GIVEN a trace of 9000 rows WHEN it is folded in batches (one, many, many shuffled)
    frame = _trace()
    agg = tracescan.summarise(_batches(frame, size, shuffle))
    # THEN every aggregate equals a groupby over the whole trace
    dur = frame["end_cycle"] - frame["start_cycle"]
    cube = dur.groupby([frame["ipu"], frame["stage"] + 1, frame["pass"].map(PASSES.index),
                        frame["phase"].map(PHASES.index)]).sum()
    dense = np.asarray(agg.cube)
    assert dense.sum() == dur.sum()
    for (ipu, stage, pass_, phase), cycles in cube.items():
        assert dense[ipu, stage, pass_, phase] == cycles
    execs = frame[frame["step"] >= 0].groupby(["ipu", "step"]).size()
    assert agg.executions.sum() == execs.sum()
    assert all(agg.executions[i, s] == n for (i, s), n in execs.items())
    busy = frame[(frame["stage"] >= 0) & (frame["micro_batch"] >= 0)]
    mbs = busy.drop_duplicates(["stage", "run", "iteration", "micro_batch"]).groupby("stage").size()
    assert agg.micro_batches.tolist() == [int(mbs.get(s, 0)) for s in range(len(agg.micro_batches))]
    assert agg.iterations == len(frame.drop_duplicates(["run", "iteration"])) == 12
    assert (agg.start_cycle, agg.end_cycle) == (frame["start_cycle"].min(), frame["end_cycle"].max())
    assert len(agg) == len(frame) and agg.iterations_per_run == 4


@pytest.mark.parametrize("size,shuffle", [(10_000_000, False), (613, False), (450, True)])
def test_gantt_bars_of_batches_equal_brute_force(size, shuffle):
    # GIVEN the summary of a trace folded in batches WHEN its runs of rows are merged into bars
    frame = _trace()
    agg = tracescan.summarise(_batches(frame, size, shuffle))
    bars = pd.DataFrame(tracescan.gantt_bars(agg))
    # THEN each bar is its rows' first start and last end, grouped directly
    rows = frame[(frame["stage"] >= 0) & (frame["micro_batch"] >= 0) & (frame["phase"] != "idle")].assign(
        g=lambda f: f["run"] * 4 + f["iteration"], p=lambda f: f["pass"].map(PASSES.index))
    want = rows.groupby(["ipu", "stage", "p", "g", "micro_batch"]).agg(
        start_cycle=("start_cycle", "min"), end_cycle=("end_cycle", "max")).reset_index()
    got = bars.rename(columns={"pass": "p", "iteration": "g"}).sort_values(
        ["ipu", "stage", "p", "g", "micro_batch"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got[want.columns].astype("int64"), want.astype("int64"))


@pytest.mark.parametrize("shuffle", [False, True])
def test_timeline_of_batches_matches_brute_force(shuffle):
    # GIVEN the index built from batches (IPUs interleaved, out of order when shuffled)
    frame = _trace()
    index = TimelineIndex.from_ipus(tracerows.timeline_arrays(_batches(frame, 700, shuffle)))
    lo, hi = 12_345, 600_000
    t = timeline(index, lo, hi, max_bins=300)
    # THEN each bin's cycles per phase equal the rows' overlap with it, computed directly
    assert t.level == "bins"
    s, e = frame["start_cycle"].to_numpy(), frame["end_cycle"].to_numpy()
    for r in t.frame.sample(200, random_state=0).itertuples():
        mask = (frame["ipu"].to_numpy() == r.ipu) & (frame["phase"].to_numpy() == r.phase)
        overlap = np.clip(np.minimum(e[mask], r.end_cycle) - np.maximum(s[mask], r.start_cycle), 0, None)
        assert r.cycles == overlap.sum() and r.events == (overlap > 0).sum()
    # and a narrow window gives the raw rows
    w = timeline(index, 100_000, 101_000)
    assert w.level == "events"
    want = frame[(frame["end_cycle"] > 100_000) & (frame["start_cycle"] < 101_000)]
    assert len(w.frame) == len(want) and w.frame["cycles"].sum() == (want["end_cycle"] - want["start_cycle"]).sum()


def test_report_in_small_batches_equals_report_in_one(profiles, monkeypatch):
    # GIVEN the same profile read in one batch and in batches of 5 rows
    with pv.open(profiles["unbalanced"]) as report:
        whole = build_report(report, "all", figures=True)
        whole_timeline = report.trace.timeline(max_bins=7).frame
    original = Profile.iter_batches
    monkeypatch.setattr(Profile, "iter_batches", lambda self, table, columns=None, batch_size=5, row_groups=None:
                        original(self, table, columns, batch_size=5, row_groups=row_groups))
    with pv.open(profiles["unbalanced"]) as report:
        assert report.profile.num_rows("trace") > 20
        parts = build_report(report, "all", figures=True)
        part_timeline = report.trace.timeline(max_bins=7).frame
    # THEN every block of the report is the same
    assert len(whole.blocks) == len(parts.blocks) > 0
    for a, b in zip(whole.blocks, parts.blocks):
        if isinstance(a.data, dict):
            assert a.data == b.data
        else:
            pd.testing.assert_frame_equal(a.frame(), b.frame())
    pd.testing.assert_frame_equal(whole_timeline, part_timeline)


def test_prefetched_passes_errors_on():
    def broken():
        yield 1
        raise ValueError("bad batch")

    it = tracescan.prefetched(broken())
    assert next(it) == 1
    with pytest.raises(ValueError, match="bad batch"):
        next(it)


def test_dictionary_in_another_order_is_recoded():
    # a writer may order a category's words differently: codes follow the schema's order
    phase = pa.array(["idle", "compute", "idle"]).dictionary_encode()
    assert phase.dictionary.to_pylist() == ["idle", "compute"]
    assert tracescan._codes(phase, S.PHASES).tolist() == [4, 0, 4]


@pytest.mark.parametrize("size", [700, 10_000_000])
def test_index_gathered_without_a_sort_equals_the_index_of_a_shuffled_trace(size):
    # GIVEN the same trace read in IPU-major order (no sort needed: each IPU's rows come in time
    # order, so they are only cut into slices) and shuffled (IPUs interleaved, rows out of order)
    frame = _trace()
    in_order = TimelineIndex.from_ipus(tracerows.timeline_arrays(_batches(frame, size)))
    shuffled = TimelineIndex.from_ipus(tracerows.timeline_arrays(_batches(frame, 500, shuffle=True)))
    # THEN both indexes hold exactly the same arrays, IPU by IPU and phase by phase
    assert in_order.ipus == shuffled.ipus == [0, 1, 2]
    assert (in_order.start_cycle, in_order.end_cycle) == (shuffled.start_cycle, shuffled.end_cycle)
    for i in in_order.ipus:
        a, b = in_order.ipu(i), shuffled.ipu(i)
        for name in ("start", "end", "phase"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        for p in range(len(PHASES)):
            np.testing.assert_array_equal(a.positions[p], b.positions[p])
            np.testing.assert_array_equal(a.cumulative[p], b.cumulative[p])
        # and the rows are the IPU's rows of the trace, sorted by start
        want = frame[frame["ipu"] == i].sort_values("start_cycle", kind="stable")
        np.testing.assert_array_equal(a.start, want["start_cycle"].to_numpy())
        np.testing.assert_array_equal(a.phase, want["phase"].map(PHASES.index).to_numpy())
        # and each compute row's step (the tile view's join with tile_cycles), in the same order
        np.testing.assert_array_equal(a.compute_step, b.compute_step)
        np.testing.assert_array_equal(a.compute_step, want.loc[want["phase"] == "compute", "step"].to_numpy())


@pytest.mark.parametrize("rows_per_ipu", [3, 5000])
def test_cycles_before_equal_the_running_sum_at_every_row(rows_per_ipu):
    # GIVEN an index whose phases hold from none to ~1,000 rows: running sums kept at every 16th row only
    frame = _trace(rows_per_ipu=rows_per_ipu, ipus=1)
    frame = frame[frame["phase"] != "stream"]
    ix = TimelineIndex.from_ipus(tracerows.timeline_arrays(_batches(frame, 777))).ipu(0)
    assert len(ix.positions[PHASES.index("stream")]) == 0
    for p in range(len(PHASES)):
        # WHEN the cycles of the phase's first j rows are asked for, for every j
        durations = (ix.end - ix.start)[ix.positions[p]]
        want = np.concatenate([[0], np.cumsum(durations)])
        # THEN they are the running sum of the phase's rows, computed directly
        np.testing.assert_array_equal(cycles_before(ix, p, np.arange(len(want))), want)
        assert len(ix.cumulative[p]) == len(durations) // BLOCK + 1


def test_index_built_in_threads_equals_the_serial_one(monkeypatch):
    # GIVEN a trace large enough for the index to be built one IPU per thread
    frame = _trace(rows_per_ipu=400_000, ipus=3)
    by_ipu = tracerows.timeline_arrays(_batches(frame, 1 << 20))
    threaded = TimelineIndex.from_ipus(by_ipu)
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    serial = TimelineIndex.from_ipus(by_ipu)
    # THEN the per-phase positions and running sums are the same
    for i in serial.ipus:
        for p in range(len(PHASES)):
            np.testing.assert_array_equal(threaded.ipu(i).cumulative[p], serial.ipu(i).cumulative[p])
            np.testing.assert_array_equal(threaded.ipu(i).positions[p], serial.ipu(i).positions[p])


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("counted", ["exact", "none", "too few", "one IPU missing"])
def test_rows_in_arrays_sized_from_the_summary_equal_rows_joined_at_the_end(shuffle, counted):
    # GIVEN each IPU's row count from the summary (exact), none, or counts a changed trace would break
    frame = _trace()
    agg = tracescan.summarise(_batches(frame, 613, shuffle))
    assert agg.ipu_rows.tolist() == frame.groupby("ipu").size().tolist()
    counts = {i: int(n) for i, n in enumerate(agg.ipu_rows)}
    counts = {"exact": counts, "none": None, "too few": {i: n - 1000 for i, n in counts.items()},
              "one IPU missing": {i: n for i, n in counts.items() if i != 1}}[counted]
    # WHEN the timeline's rows are gathered into arrays of those sizes
    rows = tracerows.timeline_arrays(_batches(frame, 613, shuffle), counts)
    # THEN each IPU's rows are its rows of the trace, sorted by start, whatever the counts said
    assert sorted(rows) == [0, 1, 2]
    for i, (start, end, phase, step) in rows.items():
        want = frame[frame["ipu"] == i].sort_values("start_cycle", kind="stable")
        np.testing.assert_array_equal(start, want["start_cycle"].to_numpy())
        np.testing.assert_array_equal(end, want["end_cycle"].to_numpy())
        np.testing.assert_array_equal(phase, want["phase"].map(PHASES.index).to_numpy())
        np.testing.assert_array_equal(step, want["step"].to_numpy())
    assert tracerows.TIMELINE_COLUMNS == ("ipu", "phase", "step", "start_cycle", "end_cycle")


def test_report_reads_the_trace_once_for_the_summary_and_gantt_and_once_for_the_timeline(profiles, monkeypatch):
    # GIVEN a fresh Report, whose trace reads are counted
    passes = []
    original = Profile.iter_batches

    def counted(self, table, columns=None, **kwargs):
        if table == "trace":
            passes.append(tuple(columns))
        return original(self, table, columns, **kwargs)

    monkeypatch.setattr(Profile, "iter_batches", counted)
    with pv.open(profiles["unbalanced"]) as report:
        # WHEN two threads ask for the timeline while the warm-up scans for everything
        import threading

        threads = [threading.Thread(target=report.trace.timeline) for _ in range(2)]
        threads.append(threading.Thread(target=lambda: (report.scan_trace(gantt=True), report.trace.levels())))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        report.stages.gantt()
        report.summary.figures()
        # THEN the trace was read once for the summary (the Gantt bars are merged from it), once for where its
        # row group, which holds every IPU, lies in the run (each IPU's stretch), and once for the window's five
        # columns (its row groups, kept), whichever thread asked first
        assert passes == [tracescan.SUMMARY_COLUMNS, ("ipu", "start_cycle", "end_cycle"), tracerows.TIMELINE_COLUMNS]
        report.trace.timeline(0, 100)
        assert len(passes) == 3


@pytest.mark.parametrize("name", ["balanced", "unbalanced", "oom", "exchange", "sharded", "inference"])
def test_bounds_from_the_footer_equal_the_scanned_ones(profiles, name):
    # GIVEN a profile whose trace footer carries row-group statistics
    profile = Profile(profiles[name])
    trace = profile.read_table("trace").to_pandas()
    # WHEN the bounds are read from the footer alone
    bounds = tracescan.column_bounds(profile.metadata("trace"), tracescan.BOUND_COLUMNS)
    # THEN they are the columns' minimum and maximum, and the summary made with them is the scanned one
    assert bounds is not None
    for column, (lo, hi) in bounds.items():
        assert (lo, hi) == (trace[column].min(), trace[column].max())
    batches = list(profile.iter_batches("trace", tracescan.SUMMARY_COLUMNS, batch_size=7))
    with_bounds, scanned = tracescan.summarise(batches, bounds), tracescan.summarise(batches)
    assert (with_bounds.start_cycle, with_bounds.end_cycle) == (scanned.start_cycle, scanned.end_cycle)
    assert with_bounds.end_cycle == trace["end_cycle"].max()
    np.testing.assert_array_equal(with_bounds.cube, scanned.cube)
    np.testing.assert_array_equal(with_bounds.executions, scanned.executions)
    np.testing.assert_array_equal(with_bounds.micro_batches, scanned.micro_batches)
    for field in ("iterations", "rows", "iterations_per_run", "micro_batch_slots", "run_slots"):
        assert getattr(with_bounds, field) == getattr(scanned, field)


def test_the_stated_extent_is_the_trace_s_first_start_and_last_end(profiles):
    # GIVEN each profile, its trace read whole
    for name, path in profiles.items():
        with pv.open(path) as report:
            trace = report.profile.read_table("trace").to_pandas()
            # WHEN its extent is taken from the verified footer, and from the summary's pass
            stated = tracescan.stated_extent(report.profile)
            # THEN both are the trace's first start and last end
            assert stated == (trace["start_cycle"].min(), trace["end_cycle"].max()) == report.trace.extent(), name


@pytest.mark.parametrize("limit", [1 << 26, 1])
@pytest.mark.parametrize("shuffle", [False, True])
def test_micro_batch_set_of_the_whole_run_equals_the_per_batch_one(monkeypatch, limit, shuffle):
    # GIVEN the trace's bounds, with and without run/iteration/micro_batch, and a cap on the whole-run set
    frame = _trace()
    monkeypatch.setattr(tracescan, "SEEN_LIMIT", limit)
    full = {c: (int(frame[c].min()), int(frame[c].max())) for c in tracescan.BOUND_COLUMNS}
    partial = {c: b for c, b in full.items() if c not in ("run", "iteration", "micro_batch")}
    # WHEN the trace is folded with the whole run's set (limit allowing), with per-batch boxes, and without bounds
    folds = [tracescan.summarise(_batches(frame, 700, shuffle), b) for b in (full, partial, None)]
    # THEN every figure is the same
    for agg in folds[1:]:
        for field in ("cube", "executions", "micro_batches"):
            np.testing.assert_array_equal(getattr(agg, field), getattr(folds[0], field))
        for field in ("iterations", "rows", "iterations_per_run", "micro_batch_slots", "run_slots", "start_cycle",
                      "end_cycle"):
            assert getattr(agg, field) == getattr(folds[0], field)


def test_no_statistics_means_no_bounds(tmp_path):
    # GIVEN a Parquet file written without statistics
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"ipu": [0, 1], "stage": [0, 1], "step": [1, 2], "start_cycle": [0, 5],
                             "end_cycle": [5, 9]}), tmp_path / "t.parquet", write_statistics=False)
    # THEN the bounds are not guessed: the fold scans for them
    assert tracescan.column_bounds(pq.ParquetFile(tmp_path / "t.parquet").metadata, tracescan.BOUND_COLUMNS) is None
    assert tracescan.column_bounds(None, tracescan.BOUND_COLUMNS) is None


def _same_aggregates(a: tracescan.Aggregates, b: tracescan.Aggregates) -> None:
    for name in ("cube", "executions", "micro_batches", "ipu_rows"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert (a.iterations, a.rows, a.start_cycle, a.end_cycle, a.iterations_per_run, a.micro_batch_slots,
            a.run_slots) == (b.iterations, b.rows, b.start_cycle, b.end_cycle, b.iterations_per_run,
                             b.micro_batch_slots, b.run_slots)
    assert a.slots.keys() == b.slots.keys()
    for name in a.slots:  # the runs of rows, in the trace's order
        assert np.array_equal(a.slots[name], b.slots[name]), name


@pytest.mark.parametrize("column", ["run", "iteration", "ipu", "stage", "micro_batch"])
def test_a_column_of_one_value_in_the_footer_cuts_the_runs_as_a_scan_does(column):
    # GIVEN a trace where one bar column holds one value, and the footer's bounds saying so
    frame = _trace().assign(**{column: 0})
    frame.loc[frame["stage"] < 0, "micro_batch"] = -1 if column != "micro_batch" else 0
    bounds = {c: (int(frame[c].min()), int(frame[c].max())) for c in tracescan.BOUND_COLUMNS}
    assert bounds[column] == (0, 0)
    # WHEN it is folded with those bounds and without any
    bounded, scanned = (tracescan.summarise(_batches(frame, 700), b) for b in (bounds, None))
    # THEN the runs of rows (and so the Gantt bars) and every figure are the same
    _same_aggregates(bounded, scanned)
    assert len(bounded.slots["ipu"]) > 12  # cut at the other columns' changes all the same


def _long_rows(durations: list[int], micro_batches: list[int]) -> dict[str, np.ndarray]:
    """Trace rows of one IPU, back to back, as the fold's arrays (codes for pass and phase)."""
    n = len(durations)
    end = np.cumsum(np.asarray(durations, np.int64))
    return {"run": np.zeros(n, np.int32), "iteration": np.zeros(n, np.int32),
            "micro_batch": np.asarray(micro_batches, np.int32), "ipu": np.zeros(n, np.int16),
            "stage": np.zeros(n, np.int16), "pass": np.full(n, PASSES.index("forward"), np.int8),
            "step": np.zeros(n, np.int32), "phase": np.full(n, PHASES.index("compute"), np.int8),
            "start_cycle": end - np.asarray(durations, np.int64), "end_cycle": end}


@pytest.mark.parametrize("micro_batches", ["one run", "a run each"])
def test_durations_summing_past_what_int64_holds_are_refused(micro_batches):
    # GIVEN rows of 2**53 cycles each (the format's longest): 2**9 of them sum to 2**62, past the
    # fold's limit, 2**10 to 2**63, past int64 itself; in one run of rows or each row a run of its own
    for rows in (2**9, 2**10):
        mb = [0] * rows if micro_batches == "one run" else list(range(rows))
        columns = _long_rows([2**53] * rows, mb)
        # WHEN they are folded THEN the summary is refused in one sentence, not wrapped around
        with pytest.raises(ValueRangeError, match="beyond what 64-bit integers hold"):
            tracescan.summarise_arrays(columns)
    # AND rows summing to just under the limit are folded, every cycle counted
    columns = _long_rows([2**53] * (2**9 - 1), [0] * (2**9 - 1))
    assert tracescan.summarise_arrays(columns).cube.cells.sum() == (2**9 - 1) * 2**53


@pytest.mark.parametrize("workers", [2, 3, 8])
@pytest.mark.parametrize("bounded,shuffle", [(False, False), (True, False), (False, True)])
def test_row_groups_folded_on_several_threads_equal_one_pass(workers, bounded, shuffle):
    # GIVEN a trace of 9000 rows as 13 "row groups" of 700 rows, each read as two batches
    from popvision_py.analysis.trace import groups as tracegroups

    frame = _trace()
    groups = _batches(frame, 700, shuffle)
    bounds = None
    if bounded:  # what the footer's statistics give
        bounds = {c: (int(frame[c].min()), int(frame[c].max())) for c in tracescan.BOUND_COLUMNS}

    def read(group: int):
        batch = groups[group]
        return [batch.slice(0, 300), batch.slice(300)]

    # WHEN they are folded by several threads, each taking the next row group it is free for
    agg = tracegroups.summarise_groups(read, len(groups), bounds, workers=workers)
    # THEN every aggregate, and the runs of rows in order, equal one pass over the same batches
    _same_aggregates(agg, tracescan.summarise([b for g in range(len(groups)) for b in read(g)], bounds))


def test_an_error_in_one_worker_is_raised_in_the_caller():
    # GIVEN row groups of which the fifth cannot be read
    from popvision_py.analysis.trace import groups as tracegroups
    from popvision_py.errors import CorruptProfileError

    groups = _batches(_trace(), 500)

    def read(group: int):
        if group == 4:
            raise CorruptProfileError("Table trace is corrupt (row group 4).")
        return [groups[group]]

    # WHEN they are folded on two threads, THEN the reader's sentence is raised in the caller
    with pytest.raises(CorruptProfileError, match="row group 4"):
        tracegroups.summarise_groups(read, len(groups), workers=2)


def test_a_report_of_several_row_groups_is_the_same_on_one_thread_and_on_several(several_row_groups, monkeypatch):
    # GIVEN a profile whose trace has several row groups
    from popvision_py.analysis.trace import groups as tracegroups
    from popvision_py.render import jsonout

    path = several_row_groups

    def report(workers: int) -> bytes:
        monkeypatch.setattr(tracegroups, "workers_for", lambda groups: min(workers, groups))
        return jsonout.render(build_report(pv.open(path), "all"))

    # WHEN every section is reported folding the trace on one thread, then on three
    # THEN the JSON reports are byte for byte the same
    assert report(3) == report(1)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_the_trace_pass_moves_a_bar_to_the_traces_rows_on_a_terminal_only(several_row_groups, monkeypatch,
                                                                           terminal):
    from popvision_py.analysis.report import Report
    from popvision_py.render import progress

    # GIVEN a trace of several row groups, and stderr a terminal (or a pipe), the bar's delay none
    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(progress, "BAR_DELAY_S", 0)
    with Report(several_row_groups) as report:
        rows = report.profile.num_rows("trace")
        counted = []
        # WHEN the summary pass runs inside the bar (each update also kept here)
        with progress.reading_trace([report]):
            bar_update = report.trace_progress
            report.trace_progress = lambda n: (counted.append(n), bar_update(n))
            report.scan_trace()
        # THEN the pass reported every row once, a row group at a time (workers) or a batch at a time
        assert sum(counted) == rows and len(counted) >= report.profile.metadata("trace").num_row_groups
        assert report.trace_progress is None  # the bar is let go with the block
    # AND the bar, drawn on the terminal only, counts towards the trace's rows
    text = stderr.getvalue()
    if terminal:
        from tqdm import tqdm

        assert "Reading the trace" in text and f"/{tqdm.format_sizeof(rows)} " in text, text[-300:]
    else:
        assert text == ""


def test_many_ranks_each_its_own_stage_hold_a_cell_a_rank_and_sum_as_the_dense_cube():
    # GIVEN 300 ranks, rank r its own stage r: 10 compute rows of r + 1 cycles, 2 idle rows of 5 outside any stage
    n = 300
    ipu = np.repeat(np.arange(n), 12)
    stage = np.where(np.tile(np.arange(12), n) < 10, ipu, -1)
    phase = np.where(stage >= 0, "compute", "idle")
    dur = np.where(stage >= 0, ipu + 1, 5)
    end = np.cumsum(dur)
    frame = pd.DataFrame({"run": 0, "iteration": 0, "micro_batch": -1, "ipu": ipu, "stage": stage,
                          "pass": "forward", "phase": phase, "step": 0, "start_cycle": end - dur, "end_cycle": end})
    # WHEN it is folded in batches of 1,000 rows
    cube = tracescan.summarise(_batches(frame, 1000)).cube
    # THEN it holds two (ipu, stage) pairs a rank, not 300 x 301 cells, and its sums are the dense cube's
    assert cube.shape[:2] == (n, n + 1) and len(cube.cells) == 2 * n
    assert cube.ipu.tolist() == np.repeat(np.arange(n), 2).tolist()
    assert cube.stage.tolist() == np.ravel(np.stack([np.zeros(n, int), np.arange(n) + 1], axis=1)).tolist()
    compute, idle, forward = PHASES.index("compute"), PHASES.index("idle"), PASSES.index("forward")
    assert cube.by_ipu()[:, forward, compute].tolist() == (10 * (np.arange(n) + 1)).tolist()
    assert cube.of_stage(0)[:, forward, idle].tolist() == [10] * n
    assert cube.by_stage()[1:, forward, compute].tolist() == (10 * (np.arange(n) + 1)).tolist()
    assert cube.total()[forward, idle] == 10 * n
    ipus, stages = cube.present()
    assert ipus.tolist() == stages.tolist() == list(range(n))
    dense = np.asarray(cube)
    assert (dense.sum(axis=1) == cube.by_ipu()).all() and (dense.sum(axis=0) == cube.by_stage()).all()
    assert (np.asarray(Cube.from_dense(dense)) == dense).all()
