"""A long rank's GPU figures worked out a piece of it at a time (``Kernels.pieces``, cut where the rank's GPU idles)
are those of the rank worked out at once: every figure a report shows, on two ranks of kernels drawn here with
overlaps, touching kernels, kernels of no time, launches after the GPU went idle and kernels with no launch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from popvision_py.analysis.imported import bound, gpu, gpu_ranks, intervals, kernels
from popvision_py.analysis.imported.bound import INPUT, PHASE, STEP, TraceSpans
from popvision_py.analysis.imported.gpu import Kernels

NAMES = ("gemm", "ncclKernel_AllReduce_RING_LL_Sum_float", "Memcpy HtoD (Pageable -> Device)", "relu", "Memset")
KINDS = ("compute", "communication", "memcpy", "compute", "memset")


def drawn_ranks(seed: int = 7) -> tuple[Kernels, TraceSpans, tuple[np.ndarray, np.ndarray]]:
    """Two ranks of 300 and 200 kernels on three streams, in bursts (kernels overlapping and end to start) split
    by idle gaps; the spans: 4 profiler steps a rank, DataLoader fetches and two phases by turns."""
    rng = np.random.default_rng(seed)
    rows = []
    for ipu, count in ((0, 300), (1, 200)):
        t = 0
        for i in range(count):
            t += int(rng.choice([0, 0, 3, 40, 900]))  # end to start, a short gap, or a long one
            length = int(rng.choice([0, 5, 20, 200]))
            name = int(rng.integers(len(NAMES)))
            launch = -1 if rng.random() < 0.1 else t - int(rng.choice([-30, 10, 400]))  # some after the GPU idled
            rows.append((ipu, int(rng.integers(3)), KINDS[name], NAMES[name], t, t + length, launch))
            t += length if rng.random() < 0.7 else length // 2  # the next one may start while this one runs
    ipu, stream, kind, name, start, end, launch = (list(c) for c in zip(*rows))
    k = Kernels.build(ipu, stream, kind, name, start, end, launch_start=launch,
                      launch_end=[a + 7 if a >= 0 else -1 for a in launch], correlation=list(range(len(rows))),
                      labels={"group": ["[0, 1]"] * len(rows), "op": ["aten::mm"] * len(rows)})
    last = max(end) + 1
    steps = np.linspace(0, last, 5).astype(np.int64)
    fetch, turns = (100, last // 20), np.arange(0, last, 300)  # phases a and b in turns of 300 ns on rank 0
    spans = TraceSpans.build(
        [0] * 4 + [1] * 4 + [0, 1] + [0] * len(turns), [*steps[:-1], *steps[:-1], *fetch, *turns],
        [*steps[1:], *steps[1:], fetch[0] + 800, fetch[1] + 900, *(turns + 300)],
        [STEP] * 8 + [INPUT] * 2 + [PHASE] * len(turns),
        [f"ProfilerStep#{i}" for i in range(4)] * 2 + ["fetch"] * 2 + ["a", "b"] * (len(turns) // 2) + ["a"] * (
            len(turns) % 2))
    return k, spans, (np.array([0, 0], np.int64), np.array([last, last], np.int64))


def every_figure(k: Kernels, spans: TraceSpans, window: tuple[np.ndarray, np.ndarray]) -> dict[str, pd.DataFrame]:
    steps = spans.kind == STEP  # HTA keeps those launched before each rank's last step
    last_steps = np.array([spans.start[steps & (spans.ipu == i)].max() for i in range(k.num_ranks)])
    rank = gpu_ranks.Rank(k, k.where(lambda p: gpu.hta_selection(p, last_steps), ("launch_start",)), window, spans)
    found = {name: gpu_ranks.FIGURES[name](rank, *args).frame() for name, args in gpu_ranks.DEFAULTS.items()}
    found["kernel_types"] = gpu.kernel_types_of(gpu.type_times(rank.hta)).frame()
    found["idle_gaps"] = pd.DataFrame(dict(zip(("ipu", "start", "end", "dry"), bound.idle_gaps(k))))
    return found


def alone(k: Kernels, spans: TraceSpans, window: tuple[np.ndarray, np.ndarray], ipu: int) -> tuple:
    """One of the drawn ranks alone: its kernels and spans counted from IPU 0, and its window."""
    rank = dataclasses.replace(k.take(k.ipu == ipu), ranks=k.ranks[ipu:ipu + 1]).moved(ipu, k.ranks[ipu:ipu + 1])
    mine = spans.take(spans.ipu == ipu)
    return rank, dataclasses.replace(mine, ipu=mine.ipu - ipu), (window[0][ipu:ipu + 1], window[1][ipu:ipu + 1])


def test_the_drawn_ranks_have_what_the_pieces_must_join():
    k, spans, window = drawn_ranks()
    # THEN they hold overlaps, kernels end to start, kernels of no time and kernels with no launch
    follows = k.ipu[1:] == k.ipu[:-1]
    assert ((k.start[1:] < k.end[:-1]) & follows).any() and ((k.start[1:] == k.end[:-1]) & follows).any()
    assert (k.start == k.end).any() and (k.launch_start < 0).any()
    # AND a rank alone, cut into pieces of 5 kernels or more where its GPU idles: dozens of pieces, every row once;
    # both ranks together: cut where the second starts
    rank = alone(k, spans, window, 0)[0]
    cuts = intervals.idle_cuts(rank.ipu, rank.start, rank.end, 5)
    assert len(cuts) > 30 and cuts[0] == 0 and cuts[-1] == len(rank) and (np.diff(cuts) >= 1).all()
    for a in cuts[1:-1].tolist():  # each cut: every kernel before it ended before the next starts
        assert rank.end[:a].max() < rank.start[a:].min()
    assert intervals.idle_cuts(k.ipu, k.start, k.end, 5).tolist() == [0, int((k.ipu == 0).sum()), len(k)]


@pytest.mark.parametrize("seed", [7, 11])
@pytest.mark.parametrize("which", ["both", "first", "second"])
def test_every_figure_of_pieces_is_the_whole_ranks(monkeypatch, seed, which):
    k, spans, window = drawn_ranks(seed)
    if which != "both":
        k, spans, window = alone(k, spans, window, ["first", "second"].index(which))
    # GIVEN each figure of the ranks worked out at once
    whole = every_figure(k, spans, window)
    # WHEN a piece of 5 kernels or more is worked out at a time
    monkeypatch.setattr(intervals, "PIECE_KERNELS", 5)
    assert len(list(k.pieces())) > (1 if which == "both" else 20)
    pieces = every_figure(k, spans, window)
    # THEN every figure is the same, to the last bit
    for name, table in whole.items():
        assert len(table) or (which == "second" and name.startswith("phase")), name  # (phases on the first rank)
        pd.testing.assert_frame_equal(pieces[name], table, check_exact=True, obj=name)


@pytest.mark.parametrize("seed", [7, 11])
def test_a_rank_held_compressed_gives_every_figure_of_its_arrays(monkeypatch, seed):
    # GIVEN the first drawn rank alone, and every figure of its arrays, in pieces of 5 or more
    rank, spans, window = alone(*drawn_ranks(seed), 0)
    monkeypatch.setattr(intervals, "PIECE_KERNELS", 5)
    arrays = every_figure(rank, spans, window)
    # WHEN it is held compressed, row groups of 30 kernels, and given back in pieces of 5 or more
    held = kernels.HeldKernels.of([rank.take(np.arange(a, min(a + 30, len(rank)))) for a in range(0, len(rank), 30)],
                                  0, rank.ranks)
    assert held is not None and len(list(held.pieces())) > 20 and len(held) == len(rank)
    # THEN every figure is the same, to the last bit
    found = every_figure(held, spans, window)
    for name, table in arrays.items():
        pd.testing.assert_frame_equal(found[name], table, check_exact=True, obj=name)


def test_a_rank_out_of_start_order_is_not_held():
    k, _, _ = drawn_ranks()
    rank = dataclasses.replace(k.take(k.ipu == 0), ranks=k.ranks[:1])
    backwards = [rank.take(np.arange(a, min(a + 30, len(rank)))) for a in range(0, len(rank), 30)][::-1]
    assert kernels.HeldKernels.of(backwards, 0, rank.ranks) is None
