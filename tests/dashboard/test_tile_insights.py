"""The Summary page's tile insights: memory over tiles in the report's bins, the five fullest tiles and
the FP32 variables that could be FP16, as a figure builder, a callback and in a real headless Chromium
where the FP16 fix's Verify button emulates it."""

from __future__ import annotations

import importlib
from pathlib import Path

import pandas as pd
import pytest

import popvision_py as pv
from dashboards import ids
from dashboards.figures import insights as figures
from dashboards.figures.style import CAPACITY_COLOUR, OOM_COLOUR
from tests.dashboard.test_browser import errors, wait_for_figures
from tests.dashboard.test_callbacks import text

SAMPLES = Path(__file__).resolve().parents[2] / "sample_profiles"


@pytest.fixture(scope="module")
def fp32_profile(tmp_path_factory) -> Path:
    """mnist emulated in FP32 with a data loader that keeps up: FP32 variables the FP16 insight lists."""
    from tests.engine.helpers import profile_path

    return profile_path(tmp_path_factory.mktemp("tile-insights"), "mnist", "--precision", "fp32", "--input",
                        "synthetic")


@pytest.fixture()
def fp32_app(fp32_profile: Path, tmp_path: Path):
    from dashboards.app import create_app
    from engine import rules
    from popvision_py.emulation import run_fields

    return create_app([str(fp32_profile)], runner=run_fields, emulated_dir=str(tmp_path / "emulated"),
                      planner=rules)


def test_the_histogram_draws_the_reports_bins_with_the_tile_memory_line():
    # GIVEN bins as the analysis gives them, one starting above a 4 KiB tile memory
    bins = pd.DataFrame({"low_bytes": [0, 2048, 4096], "high_bytes": [2048, 4096, 6144], "tiles": [3, 0, 2],
                         "tiles_pct": [60.0, 0.0, 40.0], "over_capacity": [False, False, True]})
    # WHEN drawn
    fig = figures.memory_histogram(bins, 4096)
    # THEN one bar per bin at its centre, as wide as it, in KiB, with its count
    (bars,) = fig.data
    assert list(bars.x) == [1.0, 3.0, 5.0] and list(bars.width) == [2.0, 2.0, 2.0] and list(bars.y) == [3, 0, 2]
    # AND the bin above the tile memory in the out-of-memory colour, and the tile memory a dashed line
    assert bars.marker.color[2] == OOM_COLOUR and bars.marker.color[0] != OOM_COLOUR
    (line,) = fig.layout.shapes
    assert line.x0 == 4.0 and line.line.color == CAPACITY_COLOUR
    # AND far below the tile memory, the line is left out and the axis says so
    far = figures.memory_histogram(bins, 64 * 4096)
    assert not far.layout.shapes and "off the scale" in far.layout.xaxis.title.text


def test_the_summary_callback_shows_the_reports_answers(fp32_profile):
    from dashboards.app import create_app

    create_app([str(fp32_profile)])
    summary = importlib.import_module("dashboards.pages.summary")
    # WHEN the Summary page renders its tile insights
    fig, fullest, fp32 = summary.render_tile_insights("a")
    with pv.open(fp32_profile) as r:
        bins, head, table = r.insights.histogram(), r.insights.fullest_tiles(), r.insights.fp32_variables()
    # THEN the histogram's bars are the report's bins, the five fullest tiles are listed in order, and
    # the FP32 table has a row per row of the report's, with its option
    assert list(fig.data[0].y) == bins["tiles"].tolist()
    shown = text(fullest)
    for row in head.itertuples():
        assert f"{row.rank}. IPU {row.ipu}, tile {row.tile}: " in shown
    assert shown.index("1. IPU") < shown.index("5. IPU")
    assert text(fp32).count("--precision fp16") == int((table["option"] == "--precision fp16").sum())


def test_an_imported_profile_says_why_in_one_line():
    from dashboards.app import create_app

    create_app([str(SAMPLES / "pytorch_gpipe" / "profile.pop")])
    summary = importlib.import_module("dashboards.pages.summary")
    fig, fullest, fp32 = summary.render_tile_insights("a")
    assert "A rank has no tiles" in text(fullest) and "named tensors" in text(fp32)
    assert not fig.data


@pytest.mark.browser
@pytest.mark.slow  # about 8 s: the page, then an emulation of the fix
def test_the_summary_shows_the_tile_insights_and_verifies_the_fp16_fix(dash_duo, fp32_app):
    # GIVEN the dashboard on an FP32 run
    dash_duo.start_server(fp32_app)
    # WHEN the Summary page opens THEN the histogram is drawn, the fullest tiles and FP32 table listed
    wait_for_figures(dash_duo, [ids.SUMMARY_TILE_HISTOGRAM])
    dash_duo.wait_for_contains_text(f"#{ids.SUMMARY_FULLEST}", "1. IPU", timeout=15)
    dash_duo.wait_for_contains_text(f"#{ids.SUMMARY_FP32_TABLE}", "--precision fp16", timeout=15)
    # WHEN the FP16 finding's Verify button is pressed
    findings = [f for f in dash_duo.find_elements(".insight") if "--precision fp16" in f.text]
    assert len(findings) == 1
    findings[0].find_element("css selector", ".verify-button").click()
    # THEN the fix is emulated and its predicted worst tile held
    dash_duo.wait_for_contains_text(".insight .verify-verdict", "Held:", timeout=60)
    assert errors(dash_duo) == []
