"""The System page's zoom windows (``host.system.window``) on a timeline written by hand: each event's row, words
and times, in row then start order, and the bins' times and counts, whatever the number of groups."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from popvision_py.analysis.host import system
from popvision_py.format import system as S


def _timeline(rows: list[tuple]) -> system.SystemIndex:
    """An index of events given as (process, thread, channel, name, kind, start, end, value)."""
    return system.SystemIndex(_events(rows))


def _events(rows: list[tuple]) -> system.Events:
    """Events given as (process, thread, channel, name, kind, start, end, value)."""
    columns = list(zip(*rows))
    table = pa.table({
        "process": pa.array(columns[0]), "pid": pa.array([int(p[5:]) for p in columns[0]], pa.int64()),
        "thread": pa.array(columns[1]), "channel": pa.array(columns[2]), "name": pa.array(columns[3]),
        "kind": pa.array(columns[4]), "start_ns": pa.array(columns[5], pa.int64()),
        "end_ns": pa.array(columns[6], pa.int64()), "value": pa.array(columns[7], pa.float64())},
        schema=S.SCHEMA)
    return system.load_tables([table])


RUN = [
    ("rank-0", "MainThread", "pytorch", "ProfilerStep#1", "span", 0, 100, 0.0),
    ("rank-0", "MainThread", "pytorch", "ProfilerStep#2", "span", 100, 200, 0.0),
    ("rank-0", "MainThread", "pytorch", "ProfilerStep#3", "span", 200, 300, 0.0),
    ("rank-0", "MainThread", "annotation", "Forward", "span", 10, 50, 0.0),
    ("rank-0", "MainThread", "annotation", "mark", "instant", 150, 150, 0.0),
    ("rank-1", "MainThread", "pytorch", "ProfilerStep#1", "span", 5, 105, 0.0),
    ("rank-1", "MainThread", "memory", "allocated", "counter", 0, 0, 1.0),
    ("rank-1", "MainThread", "memory", "allocated", "counter", 120, 120, 3.0),
    ("rank-1", "MainThread", "memory", "allocated", "counter", 250, 250, 5.0),
]


def test_a_zoom_lists_each_event_it_overlaps_in_row_then_start_order_with_its_words():
    # GIVEN two ranks' timelines: steps, an annotation, an instant and a counter
    index = _timeline(RUN)
    # WHEN the window [90, 160) is asked for, each event
    w = system.window(index, 90, 160)
    f = w.frame
    # THEN it holds the spans that overlap it, the instant inside it, and the counter's point inside it with one
    # on each side (its line reaches the edges); rank 0's row first, each row's events by start
    assert w.level == "events"
    assert list(zip(f["process"], f["name"], f["kind"], f["start_ns"], f["end_ns"])) == [
        ("rank-0", "ProfilerStep#1", "span", 0, 100), ("rank-0", "ProfilerStep#2", "span", 100, 200),
        ("rank-0", "mark", "instant", 150, 150),
        ("rank-1", "allocated", "counter", 0, 0), ("rank-1", "ProfilerStep#1", "span", 5, 105),
        ("rank-1", "allocated", "counter", 120, 120), ("rank-1", "allocated", "counter", 250, 250)]
    # AND each row carries its thread, channel, family, the counter its values, and a span its time
    assert set(f["thread"]) == {"MainThread"}
    assert list(f["channel"]) == ["pytorch", "pytorch", "annotation", "memory", "pytorch", "memory", "memory"]
    assert list(f["family"]) == [system.family(n) for n in f["name"]]
    assert list(f.loc[f["kind"] == "counter", "value"]) == [1.0, 3.0, 5.0]
    assert list(f["time_ns"]) == [100, 100, 0, 0, 100, 0, 0] and set(f["events"]) == {1}
    assert list(f.columns) == system.WINDOW_COLUMNS


def test_bins_give_each_groups_time_and_events_in_each_bin():
    # GIVEN the same run, binned in three bins of 100 ns (no event shown alone)
    index = _timeline(RUN)
    f = system.window(index, 0, 300, max_events=0, max_bins=3).frame
    steps = f[(f["process"] == "rank-0") & (f["family"] == "ProfilerStep")]
    # THEN each of rank 0's steps fills the one bin it spans, one event there, binned as their family (a step a
    # name: a long run's thousands would each be bars of their own)
    assert list(zip(steps["name"], steps["start_ns"], steps["time_ns"], steps["events"])) == [
        ("ProfilerStep", 0, 100, 1), ("ProfilerStep", 100, 100, 1), ("ProfilerStep", 200, 100, 1)]
    assert list(f.loc[f["kind"] == "span", "name"]).count("Forward") == 1  # a name without a number: its own
    # AND rank 1's step runs 95 ns into the first bin and 5 into the second; the counter's mean in each bin
    one = f[(f["process"] == "rank-1") & (f["kind"] == "span")]
    assert list(zip(one["start_ns"], one["time_ns"], one["events"])) == [(0, 95, 1), (100, 5, 1)]
    counter = f[f["kind"] == "counter"]
    assert list(zip(counter["start_ns"], counter["value"])) == [(0, 1.0), (100, 3.0), (200, 5.0)]
    # AND in one bin of the whole run, rank 0's three steps are one bar of 300 ns and three events
    one_bin = system.window(index, 0, 300, max_events=0, max_bins=1).frame
    steps = one_bin[one_bin["family"] == "ProfilerStep"]
    assert list(zip(steps["process"], steps["name"], steps["time_ns"], steps["events"])) == [
        ("rank-0", "ProfilerStep", 300, 3), ("rank-1", "ProfilerStep", 100, 1)]


def test_a_long_runs_thousand_steps_each_keep_their_own_name_and_place():
    # GIVEN one rank of 1,000 steps, a name each (a group each), and a second rank of one span
    run = [("rank-0", "MainThread", "pytorch", f"ProfilerStep#{k}", "span", 10 * k, 10 * k + 7, 0.0)
           for k in range(1000)]
    run.append(("rank-1", "MainThread", "pytorch", "ProfilerStep#0", "span", 3, 9_000, 0.0))
    index = _timeline(run)
    # WHEN the whole run is shown event by event, then steps 500 to 509's window
    whole = system.window(index, max_events=10_000).frame
    zoom = system.window(index, 5_000, 5_100).frame
    # THEN every step is a row, in its place, with its own name and times (event by event, not in bins)
    zero = whole[whole["process"] == "rank-0"]
    assert list(zero["name"]) == [f"ProfilerStep#{k}" for k in range(1000)]
    assert (zero["start_ns"].to_numpy() == 10 * np.arange(1000)).all() and (zero["time_ns"] == 7).all()
    assert list(whole["process"]).count("rank-1") == 1
    assert list(zoom["name"]) == [f"ProfilerStep#{k}" for k in range(500, 510)] + ["ProfilerStep#0"]
    # AND the steps, groups of one span each, are held as the index's arrays, not made groups one by one
    assert len(index.groups) == 1001 and all(g is None for g in index.groups)
    assert len(index.single) == 1001 and not len(index.others)


NESTED = [  # one thread's spans of one name: a call [0, 100) holding [10, 40) (recursion), then [30, 60) inside both
    ("rank-0", "MainThread", "pytorch", "aten::copy_", "span", 0, 100, 0.0),
    ("rank-0", "MainThread", "pytorch", "aten::copy_", "span", 10, 40, 0.0),
    ("rank-0", "MainThread", "pytorch", "aten::copy_", "span", 30, 60, 0.0),
    ("rank-0", "MainThread", "pytorch", "aten::copy_", "span", 150, 160, 0.0),
    # and spans of one name one after the other, the first two end to start
    ("rank-0", "MainThread", "pytorch", "aten::mm", "span", 0, 20, 0.0),
    ("rank-0", "MainThread", "pytorch", "aten::mm", "span", 20, 50, 0.0),
    ("rank-0", "MainThread", "pytorch", "aten::mm", "span", 70, 80, 0.0),
]


def test_spans_of_one_name_inside_each_other_count_once_in_a_bins_time_and_each_in_its_events():
    # GIVEN nested spans of one name on a thread, and disjoint spans of another
    index = _timeline(NESTED)
    # WHEN [45, 155) is asked for: THEN the spans that overlap it: of the nested ones the outer call and [30, 60)
    # (not [10, 40), over by 45) and the last one; of the others [20, 50) and [70, 80) (not [0, 20))
    assert index.count(45, 155) == 5
    f = system.window(index, 45, 155).frame
    assert sorted(zip(f["name"], f["start_ns"], f["end_ns"])) == [
        ("aten::copy_", 0, 100), ("aten::copy_", 30, 60), ("aten::copy_", 150, 160),
        ("aten::mm", 20, 50), ("aten::mm", 70, 80)]
    # AND in bins of 50 ns the nested spans' time is their union's, each span counted in every bin it overlaps:
    # [0, 50) copy_ 50 ns (3 spans), mm 20 + 30 = 50 ns (2); [50, 100) copy_ 50 ns (2), mm 10 ns (1);
    # [100, 150) nothing of either; [150, 200) copy_ 10 ns (1)
    bins = system.window(index, 0, 200, max_events=0, max_bins=4).frame
    got = sorted(zip(bins["name"], bins["start_ns"], bins["time_ns"], bins["events"]))
    assert got == [("aten::copy_", 0, 50, 3), ("aten::copy_", 50, 50, 2), ("aten::copy_", 150, 10, 1),
                   ("aten::mm", 0, 50, 2), ("aten::mm", 50, 10, 1)]


def test_each_events_row_is_its_process_and_thread_however_many_threads_the_processes_name():
    # GIVEN 40 processes each of its own thread name (1,600 pairs that might be: more than the events count),
    # and 3 processes sharing two thread names
    many = [(f"rank-{p}", f"worker-{p}", "pytorch", "step", "span", p, p + 1, 0.0) for p in range(40)]
    few = [(f"rank-{p}", t, "pytorch", "step", "span", p, p + 1, 0.0) for p in range(3) for t in ("MainThread", "io")]
    for run in (many, few):
        events = _events(run)
        # THEN the rows are the pairs the events hold, processes in natural order, the main thread first
        pairs = sorted({(int(r[0][5:]), r[1]) for r in run}, key=lambda pt: (pt[0], pt[1] != "MainThread", pt[1]))
        assert [(int(events.processes[p][5:]), t) for p, t in events.rows] == pairs
        # AND each event's row is its own pair
        got = [(int(events.processes[events.rows[r][0]][5:]), events.rows[r][1]) for r in events.row]
        assert sorted(got) == sorted((int(r[0][5:]), r[1]) for r in run)


@pytest.mark.parametrize("block", [1, 7, 1 << 16])
def test_the_events_by_name_are_each_process_channel_family_and_kinds_count_total_and_longest(monkeypatch, block):
    # GIVEN 400 random events of three ranks, two threads, three channels and numbered names (families), grouped
    # `block` events at a time
    monkeypatch.setattr(system, "NAME_BLOCK", block)
    rng = np.random.default_rng(3)
    rows = []
    for _ in range(400):
        start = int(rng.integers(0, 10_000))
        kind = str(rng.choice(S.KINDS))
        rows.append((f"rank-{rng.integers(0, 3)}", str(rng.choice(["MainThread", "pt_autograd_0"])),
                     str(rng.choice(["pytorch", "annotation", "memory"])),
                     f"{rng.choice(['ProfilerStep#', 'Forward ', 'aten::mm'])}{rng.integers(0, 4)}", kind, start,
                     start + int(rng.integers(0, 500)) * (kind == "span"), float(rng.integers(0, 9))))
    frame = pd.DataFrame(RUN + rows, columns=["process", "thread", "channel", "name", "kind", "start", "end", "v"])
    frame["family"], frame["took"] = frame["name"].map(system.family), frame["end"] - frame["start"]
    columns = list(zip(*(RUN + rows)))
    table = pa.table({
        "process": pa.array(columns[0]), "pid": pa.array([int(p[5:]) for p in columns[0]], pa.int64()),
        "thread": pa.array(columns[1]), "channel": pa.array(columns[2]), "name": pa.array(columns[3]),
        "kind": pa.array(columns[4]), "start_ns": pa.array(columns[5], pa.int64()),
        "end_ns": pa.array(columns[6], pa.int64()), "value": pa.array(columns[7], pa.float64())}, schema=S.SCHEMA)
    events = system.load_tables([table])
    # WHEN its spans and instants are summed by name
    got = system.by_name(events).frame()
    # THEN each (process, channel, family, kind) is a row with pandas' count of it; a span its total, mean and
    # longest time in ms and its share of its process's first-to-last time; an instant its count alone
    shown = frame[frame["kind"] != "counter"]
    want = shown.groupby(["process", "channel", "family", "kind"])["took"].agg(["size", "sum", "max"])
    assert len(got) == len(want)
    wall = frame.groupby("process")["end"].max() - frame.groupby("process")["start"].min()
    for row in got.itertuples():
        size, total, most = want.loc[(row.process, row.channel, row.name, row.kind)]
        assert row.count == size
        if row.kind == "span":
            assert (row.total_ms, row.max_ms) == (total / 1e6, most / 1e6)
            assert row.wall_pct == pytest.approx(100 * total / wall[row.process])
        else:
            assert np.isnan(row.total_ms) and np.isnan(row.max_ms)
    # AND each process's rows come together, its largest total first
    for _, part in got.groupby("process", sort=False):
        spans = part[part["kind"] == "span"]["total_ms"].tolist()
        assert spans == sorted(spans, reverse=True)


def test_codes_held_narrow_are_keyed_in_int64_where_rows_times_names_pass_two_to_the_32():
    # GIVEN two spans at the same time on rows 0 and 61,357 of 70,000, named "f22704#1" and "f00000#1" (70,000
    # names, each its own family): row x 70,000 + name is 22,704 for both where it is worked out in int32 (61,357 x
    # 70,000 wraps to 22,704), for the index's (row, name, kind) key and for the bins' (row, family, bin) one
    n = 70_000
    words = [f"f{k:05d}" for k in range(n)]
    events = system.Events(
        processes=("rank-0",), pids=np.zeros(1, np.int64), rows=tuple((0, f"t{k:05d}") for k in range(n)),
        names=tuple(f"{w}#1" for w in words), families=tuple(words), family_of=np.arange(n), channels=("pytorch",),
        row=np.array([0, 61_357], np.int32), name=np.array([22_704, 0], np.int32), channel=np.zeros(2, np.int32),
        kind=np.full(2, system.SPAN, np.int8), start=np.zeros(2, np.int64), end=np.full(2, 5, np.int64),
        value=np.zeros(2))
    # WHEN they are indexed, and drawn as bins
    index = system.SystemIndex(events)
    f = system.window(index, 0, 5, max_events=0, max_bins=1).frame
    # THEN each is a group of its own, and a bin of its own row named by its family
    assert sorted(zip(index.group_row.tolist(), index.group_name.tolist())) == [(0, 22_704), (61_357, 0)]
    assert list(zip(f["row"], f["thread"], f["name"])) == [(0, "t00000", "f22704"), (61_357, "t61357", "f00000")]
    assert f["row"].dtype == np.int64


def test_an_index_handed_its_events_in_a_list_takes_them_and_holds_their_columns_once():
    # GIVEN three ranks' timelines of 60,000 events each: steps, annotations inside them, and a counter
    rng = np.random.default_rng(3)
    rows = []
    for rank in range(3):
        starts = np.sort(rng.integers(0, 10**9, 20_000))
        rows += [(f"rank-{rank}", "MainThread", "pytorch", f"ProfilerStep#{k}", "span", int(t), int(t) + 40, 0.0)
                 for k, t in enumerate(starts)]
        rows += [(f"rank-{rank}", "MainThread", "annotation", "Forward", "span", int(t) + 5, int(t) + 20, 0.0)
                 for t in starts]
        rows += [(f"rank-{rank}", "MainThread", "memory", "allocated", "counter", int(t) + 30, int(t) + 30,
                  float(k)) for k, t in enumerate(starts)]

    def held(make):  # what ``make()`` leaves held, by tracemalloc (NumPy's arrays are traced), and what it made
        gc.collect()
        tracemalloc.start()
        made = make()
        gc.collect()
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return size, made

    # WHEN one index is handed the events in a list, another the events themselves (which stay held)
    given = [_events(rows)]
    taken = system.SystemIndex(given)
    alone, _ = held(lambda: system.SystemIndex([_events(rows)]))
    both, (events, kept) = held(lambda: (lambda e: (e, system.SystemIndex(e)))(_events(rows)))
    # THEN the list is emptied, and the index that took the events holds less by about the events' own columns
    columns = sum(getattr(events, c).nbytes for c in ("row", "name", "channel", "kind", "start", "end", "value"))
    assert given == [] and len(taken) == len(kept) == len(events) == 180_000
    assert alone < both - 0.9 * columns, (alone, both, columns)
    # AND both give the same windows: the whole run in bins, and a zoom onto each of a few events
    for a, b in ((None, None), (4 * 10**8, 4 * 10**8 + 20_000)):
        pd.testing.assert_frame_equal(system.window(taken, a, b).frame, system.window(kept, a, b).frame)
    assert system.window(taken, 4 * 10**8, 4 * 10**8 + 20_000).level == "events"
    assert taken.events.names == kept.events.names and len(taken.events) == 0
