"""analysis.imported.streams: each rank's GPU streams as lanes, a zoom window's kernels while they are few, each
kind's occupancy of each stream in bins past ``max_kernels``.

The kernels are laid out so that every figure is worked out by hand (times in ns): on rank 0, stream 7 runs a
compute kernel of 10 every 20 from 0 (``N`` of them); stream 20 one communication kernel [0, 1,000); on
rank 1, stream 7 the same compute kernels, and stream 8 a copy [100, 130) and a set [120, 150) that overlap.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import popvision_py
from popvision_py.analysis.imported import gpu, streams
from popvision_py.importer import find_traces, import_traces
from popvision_py.importer import profile as importer_profile
from tests.importer.test_import_spill import synthetic_gpu

N = 300
PERIOD, LENGTH = 20, 10


def kernels() -> gpu.Kernels:
    compute = [(ipu, 7, "compute", "gemm", PERIOD * i, PERIOD * i + LENGTH) for ipu in (0, 1) for i in range(N)]
    rows = compute + [(0, 20, "communication", "ncclKernel_AllReduce", 0, 1000),
                      (1, 8, "memcpy", "Memcpy HtoD", 100, 130), (1, 8, "memset", "Memset (Device)", 120, 150)]
    return gpu.Kernels.build(*zip(*rows), ranks=[4, 5])


def test_the_lanes_are_each_ranks_streams_in_order():
    index = streams.StreamIndex.of(kernels())
    lanes = index.lanes
    assert lanes[["ipu", "rank", "stream", "kernels"]].values.tolist() == [
        [0, 4, 7, N], [0, 4, 20, 1], [1, 5, 7, N], [1, 5, 8, 2]]
    # the kernels' extent, half-open: the first start to the last end
    assert (index.start_ns, index.end_ns) == (0, PERIOD * (N - 1) + LENGTH)


def test_a_window_of_few_kernels_gives_each_kernel_where_it_ran():
    # WHEN the window [95, 205) is asked for: rank 0's compute kernels [100, 110) to [200, 210) ([80, 90) ended
    # before it), its all-reduce, rank 1's compute kernels and its copy and set
    window = streams.window(streams.StreamIndex.of(kernels()), 95, 205, max_kernels=100)
    assert window.level == "events" and window.kernels == 2 * 6 + 1 + 2
    f = window.frame
    assert len(f) == window.kernels
    rank0 = f[(f["rank"] == 4) & (f["stream"] == 7)]
    assert rank0["start_ns"].tolist() == [100, 120, 140, 160, 180, 200]
    assert (rank0["busy_ns"] == LENGTH).all() and set(rank0["name"]) == {"gemm"}
    copies = f[f["stream"] == 8]
    assert copies[["kind", "start_ns", "end_ns"]].values.tolist() == [["memcpy", 100, 130], ["memset", 120, 150]]


def test_past_max_kernels_each_kinds_occupancy_in_bins_sums_to_its_busy_time():
    # GIVEN the whole extent, more kernels than max_kernels
    index = streams.StreamIndex.of(kernels())
    window = streams.window(index, 0, 6000, max_kernels=100, max_bins=100)
    assert window.level == "bins"
    f = window.frame
    # THEN bins of 60 ns: each holds 3 compute kernels of 10 on stream 7, 30 ns busy, half the bin
    compute = f[(f["rank"] == 4) & (f["stream"] == 7)]
    assert len(compute) == 100 and (compute["end_ns"] - compute["start_ns"] == 60).all()
    assert (compute["busy_ns"] == 30).all() and (compute["kernels"] == 3).all()
    # AND the all-reduce fills the bins it spans: [0, 1,000) is 16 whole bins and 40 ns of the 17th
    comm = f[f["kind"] == "communication"]
    assert comm["busy_ns"].tolist() == [60] * 16 + [40]
    # AND on rank 1's stream 8 the copy [100, 130) and the set [120, 150) each keep their own time in a bin,
    # though they overlap: 20 ns of copy in [60, 120); 10 of copy and 30 of set in [120, 180)
    memory = f[f["stream"] == 8]
    assert memory[["kind", "start_ns", "busy_ns", "kernels"]].values.tolist() == [
        ["memcpy", 60, 20, 1], ["memcpy", 120, 10, 1], ["memset", 120, 30, 1]]


def test_the_occupancy_is_exact_in_any_bins():
    # GIVEN bins that do not divide the period (97 bins over the extent)
    index = streams.StreamIndex.of(kernels())
    window = streams.window(index, max_kernels=10, max_bins=97)
    f = window.frame
    # THEN each lane and kind's bins sum to its kernels' union, and no bin is busier than it is wide
    busy = f.groupby(["rank", "stream", "kind"])["busy_ns"].sum().to_dict()
    assert busy == {(4, 7, "compute"): N * LENGTH, (4, 20, "communication"): 1000, (5, 7, "compute"): N * LENGTH,
                    (5, 8, "memcpy"): 30, (5, 8, "memset"): 30}
    assert (f["busy_ns"] <= f["end_ns"] - f["start_ns"]).all()


def test_a_zoom_gives_each_kernel_once_few_enough_and_a_rank_choice_keeps_its_lanes():
    index = streams.StreamIndex.of(kernels())
    assert streams.window(index, max_kernels=50).level == "bins"
    # WHEN zoomed to [0, 400) on rank 1 alone: its 20 compute kernels, its copy and set
    zoomed = streams.window(index, 0, 400, ipus=[1], max_kernels=50)
    assert zoomed.level == "events" and zoomed.kernels == 22
    assert set(zoomed.frame["rank"]) == {5} and zoomed.lanes["stream"].tolist() == [7, 8]
    np.testing.assert_array_equal(zoomed.frame.query("stream == 7")["start_ns"], PERIOD * np.arange(20))


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-rank synthetic GPU run imported with row groups of 100 kernels: each rank's streams span many."""
    folder = tmp_path_factory.mktemp("streams")
    traces = synthetic_gpu(folder / "traces")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(importer_profile, "KERNEL_GROUP_ROWS", 100)
        patch.setattr(importer_profile, "SLICE_ROWS", 30)
        import_traces(find_traces([str(traces)]), folder / "out" / "profile.pop", jobs=1)
    return folder / "out" / "profile.pop"


def test_windows_read_from_the_row_groups_are_those_of_every_kernel_in_memory(imported, monkeypatch):
    # GIVEN a GPU import's kernels table of many row groups, indexed from the table and from its kernels in memory
    with popvision_py.open(imported) as report:
        profile = report.profile
        assert profile.metadata("kernels").num_row_groups > 10
        read, whole = streams.StreamIndex.read(profile, report.gpu.kernels().ranks), streams.StreamIndex.of(
            report.gpu.kernels())
        pd.testing.assert_frame_equal(read.lanes, whole.lanes)
        assert (read.start_ns, read.end_ns) == (whole.start_ns, whole.end_ns)
        a, b = whole.start_ns, whole.end_ns
        groups = []
        original = type(profile).iter_batches
        monkeypatch.setattr(type(profile), "iter_batches", lambda self, *args, **kw: (
            groups.extend(kw.get("row_groups") or []), original(self, *args, **kw))[1])
        # WHEN windows are asked of both: the whole run, zooms of a few kernels and of many, one rank, odd bins
        for start, end, ipus, bins in [(None, None, None, 400), (None, None, [1], 97), (a, a + (b - a) // 3, None, 50),
                                       ((a + b) // 2, (a + b) // 2 + (b - a) // 200, [0], 400)]:
            groups.clear()
            got = streams.window(read, start, end, ipus, max_kernels=20, max_bins=bins)
            want = streams.window(whole, start, end, ipus, max_kernels=20, max_bins=bins)
            # THEN they are the same, a bin's busy time carried across the row groups its kernels span
            assert (got.level, got.kernels, got.start_ns, got.end_ns) == (want.level, want.kernels, want.start_ns,
                                                                          want.end_ns)
            pd.testing.assert_frame_equal(got.frame, want.frame, check_dtype=False)
            pd.testing.assert_frame_equal(got.lanes, want.lanes)
            # AND a zoom reads only the row groups its footer says may hold the window's kernels
            if start is not None:
                assert 0 < len(set(groups)) < profile.metadata("kernels").num_row_groups


@pytest.mark.parametrize("dense", [True, False])
def test_bins_added_a_piece_at_a_time_count_overlapping_kernels_of_a_lane_and_kind_once(monkeypatch, dense):
    # GIVEN bins [0, 100) and [100, 200), and one key's kernels [0, 100) then, in the next piece, [50, 150) and
    # [180, 190); another key's [120, 130); the cells added into whole, or only those touched
    monkeypatch.setattr(streams, "DENSE_CELLS", 1 << 20 if dense else 0)
    bins = streams._Bins(np.array([0, 100, 200]), 2)
    bins.add(np.array([0]), np.array([0]), np.array([100]))
    bins.add(np.array([0, 0, 1]), np.array([50, 180, 120]), np.array([150, 190, 130]))
    key, at, busy, count = bins.result()
    # THEN the key's union [0, 150) and [180, 190): 100 ns in the first bin, 60 in the second; each kernel counted
    # in every bin it runs in
    assert list(zip(key.tolist(), at.tolist(), busy.tolist(), count.tolist())) == [
        (0, 0, 100, 2), (0, 1, 60, 2), (1, 1, 10, 1)]
