"""The trace's levels of detail (``trace_levels``) against the raw trace, and the views read out of core."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import popvision_py as pv
from popvision_py.analysis.trace import levels as trace_levels
from popvision_py.analysis.trace.levels import WindowTooWideError
from popvision_py.format import levels
from popvision_py.format.schema import PHASES

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_profiles" / "mnist_pipelined" / "profile.pop"


def _make_large_profile():
    spec = importlib.util.spec_from_file_location("make_large_profile", ROOT / "benchmarks" / "make_large_profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> Path:
    # A 1.5M-row emulator-shaped profile; its levels' finest bins scaled to 64 rows (from 16,384), so that a
    # trace this size has the four or five levels a billion rows has
    path = tmp_path_factory.mktemp("levels") / "profile.pop"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(levels, "ROWS_PER_BIN", 64)
        _make_large_profile().write(path, 1_500_000, device_iterations=10)
    return path


def _raw(path: Path) -> dict[str, np.ndarray]:
    """The trace's four columns, read with pyarrow alone from the unzipped member."""
    with zipfile.ZipFile(path) as archive:
        table = pq.read_table(archive.open("trace.parquet"), columns=["ipu", "phase", "start_cycle", "end_cycle"])
    return {"ipu": table.column("ipu").to_numpy(), "phase": np.asarray(table.column("phase").to_pylist()),
            "start": table.column("start_cycle").to_numpy(), "end": table.column("end_cycle").to_numpy()}


def _expected(raw: dict[str, np.ndarray], ipu: int, phase: str, a: np.ndarray, b: np.ndarray):
    """Cycles of (ipu, phase) rows inside each [a, b), and the rows overlapping it, from sorted starts and ends:
    sum over rows of clip(x - start, 0, end - start) is (rows started before x) x x - their starts, less the same
    of the rows ended before x."""
    m = (raw["ipu"] == ipu) & (raw["phase"] == phase)
    s, e = np.sort(raw["start"][m]), np.sort(raw["end"][m])
    cs, ce = np.r_[0, np.cumsum(s)], np.r_[0, np.cumsum(e)]

    def before(x):
        i, j = np.searchsorted(s, x, "left"), np.searchsorted(e, x, "left")
        return i * x - cs[i] - (j * x - ce[j])

    rows = np.searchsorted(s, b, "left") - np.searchsorted(e, a, "right")
    return before(b) - before(a), rows


def test_every_level_sums_to_the_raw_trace(large):
    # GIVEN the levels the writer folded as it wrote the trace, and the trace read with pyarrow alone
    raw = _raw(large)
    with zipfile.ZipFile(large) as archive:
        table = pq.read_table(archive.open("trace_levels.parquet")).to_pandas()
    n_levels = table["level"].nunique()
    assert n_levels >= 4
    widths = table.assign(w=table["end_cycle"] - table["start_cycle"]).groupby("level")["w"].unique()
    for level in range(n_levels):
        # THEN each level's bins are one width, 4 times the next level's, and start at multiples of it
        (width,) = widths[level]
        if level + 1 < n_levels:
            assert widths[level + 1][0] * 4 == width
        rows = table[table["level"] == level]
        assert (rows["start_cycle"] % width == 0).all()
        for (ipu, phase), cell in rows.groupby(["ipu", "phase"], observed=True):
            # the cycles per IPU and phase sum to the trace's, and every bin holds what the raw rows put in it
            m = (raw["ipu"] == ipu) & (raw["phase"] == phase)
            assert cell["cycles"].sum() == (raw["end"][m] - raw["start"][m]).sum()
            a = cell["start_cycle"].to_numpy()
            cycles, overlapping = _expected(raw, ipu, phase, a, a + width)
            np.testing.assert_array_equal(cell["cycles"].to_numpy(), cycles)
            np.testing.assert_array_equal(cell["rows"].to_numpy(), overlapping)
    # and the coarsest level has at most 512 bins over the run
    assert table.loc[table["level"] == 0, "start_cycle"].max() // widths[0][0] < levels.COARSEST_BINS


def _schema_2(source: Path, target: Path) -> Path:
    """``source`` as a schema-2 writer left it: no trace_levels member, nor its manifest entry."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as new:
        manifest = json.loads(old.read("manifest.json"))
        manifest["schema_version"] = 2
        del manifest["tables"]["trace_levels"]
        new.writestr("manifest.json", json.dumps(manifest))
        for name in old.namelist():
            if name not in ("manifest.json", "trace_levels.parquet"):
                new.writestr(name, old.read(name))
    return target


def test_a_profile_without_levels_folds_them_on_open(tmp_path):
    # GIVEN a schema-2 profile, written before the levels (a sample without its levels)
    old = _schema_2(SAMPLE, tmp_path / "old.pop")
    with pv.open(old) as report:
        assert "trace_levels" not in report.profile.tables
        # WHEN the trace's levels are asked for THEN they are folded from the trace, once, and equal the raw rows'
        got = report.trace.levels()
        assert got.built and report.trace.levels() is got
        raw = _raw(old)
        for level, width in enumerate(got.widths):
            bins = got.bins(level, 0, int(raw["end"].max()))
            for p, phase in enumerate(PHASES):
                for ipu in np.unique(raw["ipu"]):
                    keep = (bins.ipu == ipu) & (bins.phase == p)
                    cycles, rows = _expected(raw, ipu, phase, bins.start_cycle[keep], bins.start_cycle[keep] + width)
                    np.testing.assert_array_equal(bins.cycles[keep], cycles)
                    np.testing.assert_array_equal(bins.rows[keep], rows)


def test_zoomed_out_views_read_the_levels_and_zoomed_in_ones_the_rows(large, monkeypatch):
    # GIVEN a trace of 1.5M rows (two row groups) and views that read at most 1.1M rows at once
    monkeypatch.setattr(trace_levels, "RAW_ROWS", 1_100_000)
    raw = _raw(large)
    with pv.open(large) as report:
        a, b = report.trace.extent()
        # WHEN the whole run is drawn THEN it comes from a level: each bin's cycles are the raw rows' inside it
        whole = report.trace.timeline(max_bins=800)
        assert whole.level == "bins"
        frame = whole.frame
        width = int(frame["end_cycle"].iloc[0] - frame["start_cycle"].iloc[0])
        assert 100 <= -(-(b - a) // width) <= 800
        for (ipu, phase), cell in frame.groupby(["ipu", "phase"], observed=True):
            cycles, rows = _expected(raw, ipu, phase, cell["start_cycle"].to_numpy(), cell["end_cycle"].to_numpy())
            np.testing.assert_array_equal(cell["cycles"].to_numpy(), cycles)
            np.testing.assert_array_equal(cell["events"].to_numpy(), rows)
        # WHEN a narrow window is drawn THEN it is the raw rows of that window, each row once
        x = a + (b - a) // 3
        narrow = report.trace.timeline(x, x + 200_000, max_bins=800)
        assert narrow.level == "events"
        inside = (raw["start"] < x + 200_000) & (raw["end"] > x)
        assert len(narrow.frame) == int(inside.sum())
        # WHEN the tiles of the whole run are asked for THEN one sentence says so and offers a zoom that fits
        with pytest.raises(WindowTooWideError, match=r"zoom to [\d,]+ cycles or less") as refused:
            report.tiles.timeline(0, [0, 1], a, b)
        lo, hi = refused.value.fits
        assert report.trace.levels().rows_in(lo, hi) <= 1_100_000
        assert report.tiles.timeline(0, [0, 1], lo, hi).frame["cycles"].sum() > 0
