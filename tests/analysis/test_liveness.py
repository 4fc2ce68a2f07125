"""Liveness on the balanced profile: B1's 200 activation bytes live from its forward (step 0) to its backward (1)."""

from __future__ import annotations

import pytest

from popvision_py.analysis.ipu.liveness import BY_STEP_COLUMNS, LIVE_AT_COLUMNS, PEAK_COLUMNS
from popvision_py.errors import OutOfRangeError


def test_by_step(balanced):
    s = balanced.liveness.by_step(0)
    assert list(s.columns) == BY_STEP_COLUMNS
    assert list(s["name"]) == ["B1/fwd", "B1/bwd", "B1/update"]
    assert list(s["not_always_live_bytes"]) == [200, 200, 0]
    assert list(s["total_bytes"]) == [1000, 1000, 800]
    assert list(s["worst_tile_bytes"]) == [250, 250, 200]
    assert (s["capacity_bytes"] == 4000).all()


def test_peaks(balanced):
    p = balanced.liveness.peaks()
    assert list(p.columns) == PEAK_COLUMNS
    assert list(p["peak_step"]) == [0, 0] and list(p["not_always_live_bytes"]) == [200, 200]
    assert list(p["name"]) == ["B1/fwd", "B2/fwd"]


def test_live_at(balanced):
    at_bwd = balanced.liveness.live_at(0, 1)
    assert list(at_bwd.columns) == LIVE_AT_COLUMNS
    assert set(at_bwd["name"]) == {"IPU0/code", "B1/weight", "B1/activation"}
    at_update = balanced.liveness.live_at(0, 2)
    assert set(at_update["name"]) == {"IPU0/code", "B1/weight"}
    with pytest.raises(OutOfRangeError):
        balanced.liveness.live_at(0, 3)


def test_peaks_read_a_batch_at_a_time_are_those_of_every_step_at_once():
    # GIVEN liveness rows of two IPUs read in batches of 3: IPU 0 peaks at 70 bytes twice (steps 4 and 1: the
    # earliest counts), IPU 1 at step 2, whose program step is missing (no name)
    import numpy as np
    import pandas.testing as pdt
    import pyarrow as pa

    from popvision_py.analysis.common.tables import Columns
    from popvision_py.analysis.ipu.liveness import by_step, peaks, streamed_peaks

    liveness = pa.table({
        "ipu": pa.array([0, 0, 1, 0, 1, 0, 0, 1], pa.int16()), "step": pa.array([0, 4, 0, 1, 2, 2, 3, 1], pa.int32()),
        "always_live_bytes": pa.array([5, 5, 9, 5, 9, 6, 5, 9], pa.int64()),
        "not_always_live_bytes": pa.array([10, 70, 3, 70, 40, 20, 0, 39], pa.int64()),
        "worst_tile": pa.array([0] * 8, pa.int32()), "worst_tile_bytes": pa.array([1] * 8, pa.int64())})
    programs = pa.table({"ipu": pa.array([0, 0, 0, 0, 0, 1, 1], pa.int16()),
                         "step": pa.array([0, 1, 2, 3, 4, 0, 1], pa.int32()),
                         "name": pa.array(["a", "b", "c", "d", "e", "f", "g"]).dictionary_encode()})
    # WHEN the peaks are read a batch at a time, and from every step at once
    streamed = streamed_peaks(liveness.to_batches(max_chunksize=3), programs.to_batches(max_chunksize=2))
    steps = by_step(Columns(liveness), Columns(programs), {"tiles_per_ipu": 1, "bytes_per_tile": 100})
    # THEN they are the same: IPU 0 at step 1 ("b", 70 + 5 bytes), IPU 1 at step 2 (no name, 40 + 9)
    pdt.assert_frame_equal(streamed.frame(), peaks(steps).frame())
    frame = streamed.frame()
    assert frame["peak_step"].tolist() == [1, 2] and frame["name"].tolist() == ["b", ""]
    assert frame["not_always_live_bytes"].tolist() == [70, 40] and frame["total_bytes"].tolist() == [75, 49]
    assert np.asarray(streamed["ipu"]).dtype == np.int16


@pytest.mark.parametrize("name", ["balanced", "unbalanced", "oom", "exchange", "sharded", "inference"])
def test_a_long_runs_peaks_are_read_a_batch_at_a_time_unless_its_steps_are_decoded(profiles, name, monkeypatch):
    import pandas.testing as pdt

    import popvision_py as pv
    from popvision_py.analysis.ipu import liveness

    # GIVEN a profile opened three times: as a long run's (every liveness table streamed), and as is, once with
    # its steps decoded first
    with pv.open(profiles[name]) as short, pv.open(profiles[name]) as long, pv.open(profiles[name]) as decoded:
        decoded.liveness.by_step()
        expected = decoded.liveness.peaks()
        short_peaks = short.liveness.peaks()
        monkeypatch.setattr(liveness, "STREAM_ROWS", 0)
        # WHEN each gives its peaks THEN the long run's read the liveness table a batch at a time, the short one
        # decoded it whole (read once, as every table), and the peaks are the same
        long_peaks = long.liveness.peaks()
        assert short.decodes("liveness") and not long.decodes("liveness")
        pdt.assert_frame_equal(long_peaks, expected)
        pdt.assert_frame_equal(short_peaks, expected)


def test_a_report_of_every_section_takes_its_peaks_from_the_steps_it_decodes(profiles, monkeypatch):
    # GIVEN a long run's profile (every liveness table streamed) WHEN a report of every section is built
    import popvision_py as pv
    from popvision_py.analysis.ipu import liveness
    from popvision_py.render.document import build_report

    monkeypatch.setattr(liveness, "STREAM_ROWS", 0)
    streamed = []
    monkeypatch.setattr(liveness, "streamed_peaks", lambda *a: streamed.append(a))
    with pv.open(profiles["oom"]) as report:
        build_report(report, "all")
        # THEN its tables are decoded beside the trace, and the peaks are taken from them, not read again
        assert report.decodes("liveness") and not streamed


@pytest.mark.parametrize("name", ["balanced", "unbalanced", "oom", "exchange", "sharded", "inference", "gpu import"])
def test_peaks_from_the_decoded_tables_are_those_of_every_step(profiles, tmp_path, name):
    import pandas.testing as pdt

    import popvision_py as pv
    from popvision_py.analysis.ipu import liveness
    from tests.importer.test_gpu_timeline import import_gpu_trace

    path = import_gpu_trace(tmp_path) if name == "gpu import" else profiles[name]
    # GIVEN a profile's tables decoded whole WHEN its peaks are taken from them, naming the peak steps only
    with pv.open(path) as report:
        index = report.step_index()
        found = liveness.decoded_peaks(report.columns("liveness"), index)
        every = liveness.by_step(report.columns("liveness"), report.columns("programs"), report.target, index=index)
    # THEN they are the peaks of every step's row, names, types and all
    pdt.assert_frame_equal(found.frame(), liveness.peaks(every).frame())
    assert len(found.frame()) == len(set(every["ipu"].tolist()))
