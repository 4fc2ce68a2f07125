"""`popvision report --format html` opened in a real Chromium: the page fits its window, and a table wider than
the page scrolls sideways in its own box (a report of many columns used to make the whole page scroll, its
headings and figures with it)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from popvision_py.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_profiles"

MEASURE = """
const page = document.documentElement;
const wraps = [...document.querySelectorAll('.table-wrap')];
return {
  page: [page.scrollWidth, page.clientWidth],
  figures: [document.querySelectorAll('.plotly-graph-div').length, document.querySelectorAll('.main-svg').length],
  tables: document.querySelectorAll('table').length,
  wrapped: document.querySelectorAll('.table-wrap > table').length,
  scrolling: wraps.filter(w => w.scrollWidth > w.clientWidth + 1
                               && getComputedStyle(w).overflowX === 'auto').length,
  outside: wraps.filter(w => w.getBoundingClientRect().right > page.clientWidth + 1).length,
};
"""


@pytest.mark.browser
# each sample's window: the imported run's tables, without an IPU's columns (op id, block, FLOPs, variables), all fit
# 1,280 px; at 900 some are wider than the page
@pytest.mark.parametrize("sample,width", [("bert_base_pipelined", 1280), ("pytorch_gpipe", 900)])
def test_the_html_report_fits_its_window_and_a_wide_table_scrolls_in_its_own_box(dash_duo, tmp_path, sample, width):
    # GIVEN a sample's whole report as one HTML page (an emulated run, and a PyTorch run imported)
    page = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(SAMPLES / sample / "profile.pop"), "--section", "all",
                                       "--format", "html", "-o", str(page)])
    assert result.exit_code == 0, result.output
    # WHEN it is opened in a window ``width`` px wide, and its figures are drawn
    dash_duo.driver.set_window_size(width, 1000)
    dash_duo.driver.get(page.as_uri())
    deadline = time.monotonic() + 60
    seen = dash_duo.driver.execute_script(MEASURE)
    while seen["figures"][1] < seen["figures"][0] and time.monotonic() < deadline:
        time.sleep(0.2)
        seen = dash_duo.driver.execute_script(MEASURE)
    assert seen["figures"][0] > 0 and seen["figures"][1] >= seen["figures"][0], seen
    # THEN the page does not scroll sideways; every table is in its box, inside the window
    scroll_width, window = seen["page"]
    assert scroll_width <= window, seen
    assert seen["tables"] > 0 and seen["wrapped"] == seen["tables"] and seen["outside"] == 0, seen
    # AND the tables wider than the page (the report has some at this width) scroll in their boxes
    assert seen["scrolling"] > 0, seen
    assert [entry for entry in dash_duo.get_logs() if entry.get("level") == "SEVERE"] == []
