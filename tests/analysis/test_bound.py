"""analysis.imported.bound: what bound each step, the kernels worth a look, the annotations' phases and their
overlaps, from kernels and spans drawn here (times in ns), every figure worked out by hand."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pytest

from popvision_py.analysis.host import system as host
from popvision_py.analysis.imported import bound, phases
from popvision_py.analysis.imported.bound import INPUT, PHASE, STEP, TraceSpans
from popvision_py.analysis.imported.gpu import Kernels
from popvision_py.analysis.imported.intervals import idle_cuts
from popvision_py.format import system as S


def kernels(*rows: tuple) -> Kernels:
    """Kernels from (ipu, stream, name, start, end, launch start); each launch lasts 1 ns."""
    ipu, stream, name, start, end, launch = (list(c) for c in zip(*rows))
    return Kernels.build(ipu, stream, ["compute"] * len(rows), name, start, end, launch_start=launch,
                         launch_end=[a + 1 if a >= 0 else -1 for a in launch], correlation=list(range(len(rows))))


def window(*ends: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(len(ends), np.int64), np.array(ends, np.int64)


def frame(table) -> list[dict]:
    return table.frame().to_dict("records")


def test_a_kernel_queued_before_the_gpu_went_idle_is_another_wait_not_a_launch():
    # GIVEN a step [0, 100): a [0, 20) then b [50, 60), b launched at 10 (queued before a ended: the GPU waits on
    # something else from 20 to 50), then c [90, 100) launched at 70, after b ended at 60 (the queue ran dry)
    k = kernels((0, 7, "a", 0, 20, 0), (0, 7, "b", 50, 60, 10), (0, 7, "c", 90, 100, 70))
    spans = TraceSpans.build([0], [0], [100], [STEP], ["ProfilerStep#1"])
    [row] = frame(bound.step_bounds(k, spans, window(100)))
    assert (row["gpu_busy_ns"], row["other_idle_ns"], row["launch_wait_ns"]) == (40, 30, 30)
    # THEN neither wait takes more than BOUND_PCT (20%)? both take 30%: the first in order, input, launch, other
    assert row["verdict"] == "launch-bound"
    # AND with a threshold of 31% of the step, neither binds: the GPU is the bound
    assert frame(bound.step_bounds(k, spans, window(100), bound_pct=31.0))[0]["verdict"] == "gpu-bound"


def test_a_rank_without_steps_is_one_window_and_a_rank_without_kernels_waits_all_of_it():
    k = Kernels.build([0], [7], ["compute"], ["a"], [10], [30], launch_start=[5], launch_end=[6], ranks=[4, 9])
    rows = frame(bound.step_bounds(k, TraceSpans.build([], [], [], [], []), window(40, 40)))
    # THEN rank 4's window [0, 40): the launch wait before a (launched at 5, after the GPU began idle) and the
    # wait after it, which no kernel ends, 25% each (launch first on a tie); rank 9 runs nothing
    assert [(r["rank"], r["step"], r["gpu_busy_ns"], r["launch_wait_ns"], r["other_idle_ns"], r["verdict"])
            for r in rows] == [(4, -1, 20, 10, 10, "launch-bound"), (9, -1, 0, 0, 40, "other-wait")]


def test_the_input_wait_is_the_idle_time_under_a_dataloader_fetch():
    # GIVEN a fetch [0, 50) on the CPU, a kernel launched at 45 running [60, 100), a step [0, 100)
    k = kernels((0, 7, "a", 60, 100, 45))
    spans = TraceSpans.build([0, 0], [0, 0], [100, 50], [STEP, INPUT], ["ProfilerStep#7", "fetch"])
    [row] = frame(bound.step_bounds(k, spans, window(100)))
    # THEN the 60 idle ns are 50 under the fetch and 10 of the launch's wait: input-bound
    assert (row["step"], row["input_wait_ns"], row["launch_wait_ns"], row["verdict"]) == (7, 50, 10, "input-bound")


def test_short_and_many_is_by_the_launch_cost_too_and_needs_many_kernels():
    # GIVEN 100 kernels "cheap" of 15,000 ns (above SHORT_NS) each launched in 20,000 ns, and 99 "few" of 1,000 ns
    cheap = [(0, 7, "cheap", 100_000 * i, 100_000 * i + 15_000, 100_000 * i) for i in range(100)]
    few = [(0, 8, "few", 100_000 * i, 100_000 * i + 1_000, 100_000 * i) for i in range(99)]
    k = kernels(*cheap, *few)
    # launched from aten::mul 60 times, aten::add 30 times, and from no operator 10 times (a module: none)
    op = np.where(k.names[k.name] == "cheap", np.where(k.start < 9_000_000, np.where(k.start < 6_000_000,
                                                                                    "aten::mul", "aten::add"), ""), "")
    k = Kernels.build(k.ipu, k.stream, ["compute"] * len(k), k.names[k.name], k.start, k.end,
                      launch_start=k.launch_start, launch_end=k.launch_start + np.where(k.names[k.name] == "cheap",
                                                                                         20_000, 1),
                      labels={"op": op})
    rows = frame(bound.worth_a_look(k, window(10_000_000), long_kernels=0))
    # THEN only cheap: its median kernel is shorter than its median launch; few are not many (99 < 100); launched
    # from aten::mul most
    assert [(r["name"], r["reason"], r["kernels"], r["median_ns"], r["launch_median_ns"], r["op"], r["module"])
            for r in rows] == [("cheap", "short and many", 100, 15_000, 20_000, "aten::mul", "")]
    assert rows[0]["why"] == ("100 launches of 15.0 us each on the GPU (median), each launch 20.0 us on the CPU: "
                              "launch overhead, worth fusing or a CUDA graph")


def test_a_nested_phase_is_measured_against_what_ran_beside_it_not_the_phase_that_holds_it():
    # GIVEN "forward" open on the CPU [0, 100) launching k0 (stream 7, [200, 300)) at 10 and, inside "attn(F)"
    # [20, 40), k1 (stream 7, [300, 400)) at 30; "mlp(B)" [100, 120) launching k2 (stream 8, [240, 350)) at 110
    k = kernels((0, 7, "k0", 200, 300, 10), (0, 7, "k1", 300, 400, 30), (0, 8, "k2", 240, 350, 110))
    spans = TraceSpans.build([0, 0, 0], [0, 20, 100], [100, 40, 120], [PHASE] * 3, ["forward", "attn(F)", "mlp(B)"])
    rows = {r["phase"]: r for r in frame(phases.phases(k, spans))}
    # THEN forward ran [200, 400), beside mlp(B) [240, 350): 110; attn(F) [300, 400) beside it [300, 350): 50
    assert {p: (r["kernels"], r["gpu_ns"], r["overlap_ns"], r["overlapped_with"], r["with_ns"])
            for p, r in rows.items()} == {"forward": (2, 200, 110, "mlp(B)", 110),
                                         "mlp(B)": (1, 110, 110, "forward", 60), "attn(F)": (1, 100, 50, "mlp(B)", 50)}
    # AND mlp(B) ran beside forward's own k0 [240, 300) and attn(F)'s k1 [300, 350): each pair by the innermost phase
    pairs = {(r["phase"], r["other"]): r["overlap_ns"] for r in frame(phases.phase_overlaps(k, spans))}
    assert pairs == {("forward", "mlp(B)"): 110, ("attn(F)", "mlp(B)"): 50, ("mlp(B)", "forward"): 60,
                     ("mlp(B)", "attn(F)"): 50}


def test_a_phase_on_the_gpus_track_holds_the_kernels_of_its_stream_only():
    # GIVEN a GPU-track span "chunk" [0, 100) on stream 8; k0 starts at 10 on stream 7, k1 at 20 on stream 8
    k = kernels((0, 7, "k0", 10, 50, -1), (0, 8, "k1", 20, 60, -1))
    spans = TraceSpans.build([0], [0], [100], [PHASE], ["chunk"], stream=[8])
    [row] = frame(phases.phases(k, spans))
    # THEN chunk holds k1 alone (no launch is needed on the GPU's track): 40 ns, 30 of them beside k0, of no phase
    assert (row["phase"], row["kernels"], row["gpu_ns"], row["overlap_ns"]) == ("chunk", 1, 40, 0)


def timeline(rows: list[tuple]) -> host.Events:
    """A rank's CPU timeline as the import writes it: rows of (thread, channel, name, start_ns, end_ns)."""
    table = pa.table({"process": ["rank-3"] * len(rows), "pid": [1] * len(rows), "thread": [r[0] for r in rows],
                      "channel": [r[1] for r in rows], "name": [r[2] for r in rows], "kind": ["span"] * len(rows),
                      "start_ns": [r[3] for r in rows], "end_ns": [r[4] for r in rows],
                      "value": [float("nan")] * len(rows)}, schema=S.SCHEMA)
    return host.load([S.SystemFile(path=None, process="rank-3", pid=1, instance=None, table=table)])


def test_a_timeline_without_steps_gives_its_annotations_from_the_first():
    events = timeline([("thread 1", S.ANNOTATION, "[param|cuda]", 5_000, 9_000)])
    spans = TraceSpans.from_timeline(events, np.array([3]), origin_ns=None)
    assert (list(spans.kind), list(spans.start), list(spans.end)) == ([PHASE], [0], [4_000])


def test_the_spans_of_the_cpu_timeline_one_step_a_name_on_the_kernels_time():
    # GIVEN a rank's CPU timeline as the import writes it: ProfilerStep#1 on the CPU, Kineto's copy of it on the
    # GPU's track later, a fetch, an annotation on the CPU and its copy on stream 7 (ns on the traces' clock)
    rows = [("thread 1", S.PYTORCH, "ProfilerStep#1", 1_000, 2_000), ("thread 1", S.PYTORCH, "ProfilerStep#1", 1_100,
                                                                      2_200),
            ("thread 1", S.DATALOADER, "enumerate(DataLoader)#x.__next__", 1_000, 1_300),
            ("thread 1", S.ANNOTATION, "mb0", 1_400, 1_500), ("GPU stream 7", S.ANNOTATION, "mb0", 1_600, 1_900),
            ("thread 1", S.PYTORCH, "c10d::allreduce_", 1_500, 1_600)]
    events = timeline(rows)
    spans = TraceSpans.from_timeline(events, np.array([3]), origin_ns=900)
    got = sorted((int(k), str(spans.names[n]), int(s), int(a), int(b)) for k, n, s, a, b in zip(
        spans.kind, spans.name, spans.stream, spans.start, spans.end))
    # THEN the first ProfilerStep#1 alone, the fetch, and both copies of mb0 (the GPU's on stream 7), from 900 ns;
    # the communication call is none of them
    assert got == [(STEP, "ProfilerStep#1", -1, 100, 1_100), (INPUT, "enumerate(DataLoader)#x.__next__", -1, 100, 400),
                   (PHASE, "mb0", -1, 500, 600), (PHASE, "mb0", 7, 700, 1_000)]
    # AND a profile imported before the origin was recorded: the first step's start
    assert int(TraceSpans.from_timeline(events, np.array([3]), origin_ns=None).start.min()) == 0


def test_each_ranks_steps_summed_up_their_verdicts_medians_and_slowest():
    from popvision_py.analysis.common.tables import Table

    # GIVEN rank 3's four steps (1, 2, 3 and 9 ms; two launch-bound, one GPU-bound, one input-bound, the launch wait
    # of one undefined) and rank 1's two equal steps, in no order
    t = Table({"rank": np.array([3, 1, 3, 3, 1, 3]), "step": np.array([1, 1, 2, 3, 2, 4]),
               "step_ns": np.array([1, 5, 9, 2, 5, 3]) * 1_000_000,
               "verdict": np.array(["launch-bound", "gpu-bound", "gpu-bound", "launch-bound", "gpu-bound",
                                    "input-bound"], dtype=object),
               "gpu_busy_pct": np.array([10.0, 90.0, 80.0, 30.0, 70.0, 50.0]),
               "launch_wait_pct": np.array([80.0, 1.0, np.nan, 60.0, 3.0, 0.0]),
               "input_wait_pct": np.zeros(6)})
    # WHEN they are summed up a rank
    s = frame(bound.step_summary(t))
    # THEN a row a rank, in rank order: the verdicts counted, the most first, ties in VERDICTS' order (gpu, input);
    # medians of the steps that define them (rank 3's launch waits 80, 60, 0: 60); the slowest step, the first
    # of equals for rank 1
    assert [r["rank"] for r in s] == [1, 3]
    assert [r["steps"] for r in s] == [2, 4]
    assert [r["verdicts"] for r in s] == ["2 gpu-bound", "2 launch-bound, 1 gpu-bound, 1 input-bound"]
    assert [r["median_step_ns"] for r in s] == [5e6, 2.5e6]
    assert [r["gpu_busy_pct"] for r in s] == [80.0, 40.0] and [r["launch_wait_pct"] for r in s] == [2.0, 60.0]
    assert [(r["slowest_step"], r["slowest_ns"], r["slowest_verdict"]) for r in s] == [
        (1, 5_000_000, "gpu-bound"), (2, 9_000_000, "gpu-bound")]


@pytest.mark.parametrize("inclusive", [False, True])
@pytest.mark.parametrize("big", [False, True])
def test_before_counts_the_key_rows_before_each_query_row_by_one_key_or_one_sort(inclusive, big):
    # GIVEN 400 sorted rows of (rank, stream, time) keys with ties, and 300 queries, some equal to keys, some
    # outside them; times in ns since 1970, or spread so wide that the rows do not fit one int64
    rng = np.random.default_rng(int(inclusive) + 2 * int(big))
    spread = 1 << 60 if big else 1_000

    def rows(n):
        return (rng.integers(0, 4, n), rng.integers(-2, 3, n), 1_700_000_000_000_000_000 + rng.integers(0, spread, n))
    keys = rows(400)
    order = np.lexsort(keys[::-1])
    keys = tuple(k[order] for k in keys)
    queries = tuple(np.concatenate([q, k[::7]]) for q, k in zip(rows(250), keys))
    assert (bound._one_key(keys, queries) is None) == big
    # WHEN counted THEN each query's count is the key rows before it (or equal, where inclusive), one by one
    found = bound.before(keys, queries, inclusive)
    key_rows = list(zip(*(k.tolist() for k in keys)))
    expected = [sum(r < q or (inclusive and r == q) for r in key_rows) for q in zip(*(q.tolist() for q in queries))]
    assert found.tolist() == expected


def test_phases_worked_out_a_piece_at_a_time_are_those_of_the_whole_rank():
    # GIVEN a rank whose GPU runs k0 [0, 100) and k1 [50, 150) on two streams, idles, then k2 [200, 300) and
    # k3 [300, 320) (end to start: no moment holds both), and another rank's k4; phases "a" and "b" launch them
    k = kernels((0, 7, "k0", 0, 100, 1), (0, 8, "k1", 50, 150, 2), (0, 7, "k2", 200, 300, 11),
                (0, 7, "k3", 300, 320, 12), (1, 7, "k4", 0, 90, 1))
    spans = TraceSpans.build([0, 0, 0, 1], [0, 2, 10, 0], [2, 10, 20, 5], [PHASE] * 4, ["a", "b", "a", "a"])
    # WHEN they are cut into pieces of one kernel or more
    # THEN within a rank a cut falls only where its GPU idles between the kernels before it and those after (k1
    # ends at 150, k2 starts at 200; none between k2 and k3, end to start); of several ranks, where a rank starts
    rank = k.take(k.ipu == 0)
    assert idle_cuts(rank.ipu, rank.start, rank.end, 1).tolist() == [0, 2, 4]
    assert idle_cuts(rank.ipu, rank.start, rank.end, 3).tolist() == [0, 4]
    assert idle_cuts(k.ipu, k.start, k.end, 1).tolist() == [0, 4, 5]
    assert idle_cuts(k.ipu, k.start, k.end, 5).tolist() == [0, 5]
    # AND the pieces' figures summed are the whole's: a overlapped b by 50 ns (k0 beside k1)
    whole, pieces = phases.phase_times(k, spans, 1 << 20), phases.phase_times(k, spans, 1)
    for field in ("kernels", "gpu_ns", "overlap_ns", "spans", "pair", "pair_ns"):
        assert getattr(pieces, field).tolist() == getattr(whole, field).tolist(), field
    rows = {(r["rank"], r["phase"]): (r["kernels"], r["gpu_ns"], r["overlap_ns"])
            for r in frame(phases.phases(k, spans, pieces))}
    assert rows == {(0, "a"): (3, 220, 50), (0, "b"): (1, 100, 50), (1, "a"): (1, 90, 0)}


def test_the_phases_figures_are_as_wide_as_the_phases_whatever_the_steps_names():
    # GIVEN two ranks' kernels, each rank's 500 profiler steps a name each, and two phases "a" and "b" whose names
    # sort among the steps' ("a" first, "b" after "ProfilerStep#99")
    k = kernels((0, 7, "k0", 0, 100, 1), (0, 8, "k1", 50, 150, 2), (1, 7, "k2", 0, 90, 1))
    steps = 500
    spans = TraceSpans.build([0, 0, 1] + [i % 2 for i in range(steps)], [0, 2, 0] + list(range(steps)),
                             [2, 10, 5] + list(range(1, steps + 1)), [PHASE] * 3 + [STEP] * steps,
                             ["b", "a", "b"] + [f"ProfilerStep#{i}" for i in range(steps)])
    assert len(spans.names) == steps + 2
    # WHEN their phases are worked out
    t = phases.phase_times(k, spans)
    # THEN each (rank, phase) figure is one of 2 x 2, not 2 x 502, and the phases keep their names and order
    assert t.names.tolist() == ["a", "b"]
    assert all(len(getattr(t, field)) == 4 for field in ("kernels", "gpu_ns", "overlap_ns", "spans"))
    rows = {(r["rank"], r["phase"]): (r["spans"], r["kernels"], r["gpu_ns"], r["overlap_ns"], r["overlapped_with"])
            for r in frame(phases.phases(k, spans, t))}
    assert rows == {(0, "b"): (1, 1, 100, 50, "a"), (0, "a"): (1, 1, 100, 50, "b"), (1, "b"): (1, 1, 90, 0, "")}
    pairs = [(r["rank"], r["phase"], r["other"], r["overlap_ns"]) for r in frame(phases.phase_overlaps(k, spans, t))]
    assert pairs == [(0, "a", "b", 50), (0, "b", "a", 50)]


@pytest.mark.parametrize("dtype, low", [(np.int64, 0), (np.int64, -10**12), (np.int64, 10**15), (np.int32, -50),
                                        (np.uint32, 0), (np.float64, -3)])
def test_each_groups_median_is_numpys_whatever_the_values_type_and_sign(dtype, low):
    from popvision_py.analysis.imported.stats import group_medians

    # GIVEN values of 7 groups (group 3 without any, group 5 of one value), drawn about ``low``
    rng = np.random.default_rng(7)
    group = rng.choice([0, 1, 2, 4, 6], 301)
    group[-1] = 5
    values = (low + rng.integers(0, 1_000, len(group))).astype(dtype)
    # WHEN each group's median is taken THEN it is numpy's median of the group's values, NaN for a group of none
    got = group_medians(group, values, 7)
    want = [np.median(values[group == g].astype(np.float64)) if (group == g).any() else np.nan for g in range(7)]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("low, spread", [(0, 1_000), (-10**12, 1_000), (10**15, 10**6), (-(1 << 59), 1 << 60)])
@pytest.mark.parametrize("most", [0, 301])
def test_each_keys_count_sum_and_median_taken_a_piece_at_a_time_are_numpys_of_the_values_at_once(low, spread, most,
                                                                                               monkeypatch):
    from popvision_py.analysis.imported import stats

    # GIVEN the (key, value) pairs of 5 keys (key 3 without any) in pieces of 40, 0, 61 and 200 pairs, the later
    # pieces' values below and above the earlier ones'; the last case's too far apart to share an int64 with their
    # key once the third piece is added. The pairs so far are re-written 16 at a time as the range widens
    rng = np.random.default_rng(11)
    key = rng.choice([0, 1, 2, 4], 301)
    values = low + rng.integers(0, spread, len(key), dtype=np.int64)
    values[40:101] = np.sort(values[40:101])
    values[:40] = low + spread // 4 + (values[:40] - low) // 4  # the first piece's range inside the others'
    cuts = [(0, 40), (40, 40), (40, 101), (101, 301)]
    monkeypatch.setattr(stats, "REWRITE_ROWS", 16)
    # WHEN each key's figures are taken a piece at a time, in one pass, into an array of ``most`` pairs at first
    got = stats.key_medians(((key[a:b], values[a:b]) for a, b in cuts), 5, most)
    # THEN each is numpy's of the key's values at once (NaN, 0 and 0 for the key of none)
    np.testing.assert_array_equal(got["median"], [np.median(values[key == g].astype(np.float64))
                                                  if (key == g).any() else np.nan for g in range(5)])
    np.testing.assert_array_equal(got["kernels"], [(key == g).sum() for g in range(5)])
    if abs(low) < 1 << 40:  # (sums exact below 2**53, as ``tables.sum_by``'s)
        np.testing.assert_array_equal(got["sum"], [values[key == g].sum() for g in range(5)])


@pytest.mark.parametrize("kind", ["spread", "ties", "one value", "long tail", "far apart"])
def test_medians_selected_in_passes_without_holding_the_values_are_numpys(kind, monkeypatch):
    from popvision_py.analysis.imported import stats

    # GIVEN 5,000 (key, value) pairs of 40 keys (some without any, some of one or two values) in pieces of 700,
    # where a median may hold 100 pairs at most, in passes of 8 bins
    rng = np.random.default_rng(5)
    key = rng.integers(0, 36, 5_000)
    key[:3] = [37, 38, 38]
    values = {"spread": rng.integers(-10**12, 10**12, len(key)), "ties": rng.integers(0, 4, len(key)),
              "one value": np.full(len(key), 7), "long tail": (rng.pareto(1.0, len(key)) * 1_000).astype(np.int64),
              "far apart": rng.choice([-(1 << 61), 1 << 61], len(key))}[kind].astype(np.int64)
    cuts = [(a, a + 700) for a in range(0, len(key), 700)]
    passes = []

    def again():
        passes.append(1)
        return ((key[a:b], values[a:b]) for a, b in cuts)

    monkeypatch.setattr(stats, "HELD_PAIRS", 100)
    monkeypatch.setattr(stats, "SELECT_BINS", 8)
    # WHEN each key's median is taken a piece at a time, with a new pass over the pieces to hand
    got = stats.key_medians(((key[a:b], values[a:b]) for a, b in cuts), 40, len(key), again=again)
    # THEN each is numpy's median of the key's values at once (NaN for a key of none), found in passes over them
    want = [np.median(values[key == g].astype(np.float64)) if (key == g).any() else np.nan for g in range(40)]
    np.testing.assert_array_equal(got["median"], want)
    np.testing.assert_array_equal(got["kernels"], np.bincount(key, minlength=40))
    assert bool(passes) == (kind != "one value")  # (one value: its least and greatest, no pass needed)


def test_what_medians_selected_in_passes_hold_does_not_grow_with_the_values():
    import tracemalloc

    from popvision_py.analysis.imported import stats

    # GIVEN 1 M and 4 M durations (8 and 32 MB as int64) of 10 keys, made a piece of 256 K at a time and never
    # held together
    def pieces(count: int) -> Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]:
        def made() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for seed in range(count):
                rng = np.random.default_rng(seed)
                yield rng.integers(0, 10, 1 << 18), rng.lognormal(9, 1.5, 1 << 18).astype(np.int64)
        return made

    # WHEN their medians are taken with a new pass to hand (selected), and without (every value held)
    def peak(count: int, selected: bool) -> tuple[int, np.ndarray]:
        tracemalloc.start()
        medians = stats.key_medians(pieces(count)(), 10, count << 18,
                                    again=pieces(count) if selected else None)["median"]
        held = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return held, medians

    (few, by_passes), (many, by_passes_4m) = peak(4, True), peak(16, True)
    (few_held, held_all), (many_held, held_all_4m) = peak(4, False), peak(16, False)
    # THEN the same medians either way, and what the passes hold at their peak is the same at 4 M values as at 1 M
    # (a piece's work), where holding every value takes 24 MB more
    np.testing.assert_array_equal(by_passes, held_all)
    np.testing.assert_array_equal(by_passes_4m, held_all_4m)
    assert many < 1.1 * few and many_held - few_held > 24e6, (few, many, few_held, many_held)


def test_no_pairs_have_no_median():
    from popvision_py.analysis.imported.stats import key_medians

    got = key_medians(iter([(np.zeros(0, np.int64), np.zeros(0, np.int64))]), 3)
    assert np.isnan(got["median"]).all() and got["kernels"].tolist() == [0, 0, 0]
