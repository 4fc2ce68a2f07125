"""Every page at 1,280, 1,400 and 1,920 px wide (loaded once, the window resized) in a real Chromium: no
card, table or panel cuts its text, and (the checks of test_browser_overlaps.py, on the same page loads)
no toolbar covers a legend or a title and no card's figure wraps.

A figure cut short ("72.6 G cycl…", a bytes column pushed out of its panel) is a wrong figure to the
person reading it. For each page the browser is asked, element by element, whether its content is wider
than its box (``scrollWidth > clientWidth``: ellipsis, hidden overflow, a table that needs a scrollbar)
whether any table cell lies outside its panel, and whether a table squeezes a name (no spaces) onto two
lines; the answer must be "none".
"""

from __future__ import annotations

import re

import dash
import pytest

from dashboards import ids
from tests.dashboard.conftest import SAMPLES
from tests.dashboard import test_browser_overlaps as overlaps
from tests.dashboard.test_browser import COMPARED_PAGES, errors, wait_for_figures
from tests.dashboard.test_browser_overlaps import MEASURED, OVERLAPS, WRAPPED_CARDS, show_at

pytestmark = pytest.mark.browser

WIDTHS = (1280, 1400, 1920)
SAMPLE_PAIRS = {
    # an out-of-memory pipelined run (long variable names, large byte counts) compared with a small one
    "bert_large_out_of_memory": "mnist_pipelined",
    # a pipelined run of another model, compared with a sharded one
    "bert_base_pipelined": "mnist_sharded",
}
# The fit verdict each sample's manifest holds, which the summary's ranges panel gives (the out-of-memory sample's
# worst tile is 133% to 141% of a tile: it does not fit at any end of the assumptions).
VERDICTS = {"bert_large_out_of_memory": "does not fit", "bert_base_pipelined": "fits"}

# Where a page's text lives; each must show its content whole.
TEXT = (".card, .card-label, .card-value, .card-note, .panel, .table-wrap, .pv-table th, .pv-table td, "
        ".insight, .insight p, .insight-command, .tile-title, .level, .page-header, .compare-header, .content")

CUT_TEXT = """
const found = [];
const describe = el => (el.id ? '#' + el.id : '') + '.' + [...el.classList].join('.') + ' "' +
    el.innerText.replace(/\\s+/g, ' ').slice(0, 60) + '"';
for (const el of document.querySelectorAll(arguments[0])) {
  if (el.scrollWidth > el.clientWidth + 1)
    found.push(`${describe(el)}: content ${el.scrollWidth} px wide in ${el.clientWidth} px`);
}
for (const table of document.querySelectorAll('.pv-table')) {
  const panel = table.closest('.panel');
  if (!panel) continue;
  const p = panel.getBoundingClientRect();
  const outside = [...table.querySelectorAll('td, th')].filter(cell => {
    const c = cell.getBoundingClientRect();
    return c.right > p.right + 1 || c.left < p.left - 1;
  });
  if (outside.length) {
    const c = outside[0].getBoundingClientRect();
    found.push(`${outside.length} cells outside their panel (${Math.round(p.left)}-${Math.round(p.right)} px), ` +
               `the first ${describe(outside[0])} at ${Math.round(c.left)}-${Math.round(c.right)} px`);
  }
}
// A name without spaces may only wrap when squeezed (overflow-wrap: anywhere): that is a cut too.
const broken = [...document.querySelectorAll('.pv-table td')].filter(cell => {
  const text = cell.innerText.trim();
  if (!text || /\\s/.test(text)) return false;
  const range = document.createRange();
  range.selectNodeContents(cell);
  return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size > 1;
});
if (broken.length)
  found.push(`${broken.length} table cells break a word across lines, the first ${describe(broken[0])}`);
const page = document.documentElement;
if (page.scrollWidth > page.clientWidth + 1)
  found.push(`the page scrolls sideways: ${page.scrollWidth} px in ${page.clientWidth} px`);
return found;
"""

# The tables a page fills in a callback after its figures: wait for them before measuring.
TABLES = {
    "/memory": "#memory-tile-variables-table",
    "/liveness": "#liveness-live-table",
    "/exchange": "#exchange-costliest-table",
    "/compare": "#compare-summary-table",
}


def open_page(dash_duo, path: str, width: int) -> None:
    overlaps.open_page(dash_duo, path, width, TABLES.get(path))


@pytest.mark.parametrize("sample", list(SAMPLE_PAIRS))
def test_no_page_cuts_its_figures(dash_duo, sample):
    from dashboards.app import create_app
    from engine import rules

    # GIVEN the dashboard on a sample profile and the one it is compared with, their fixes checked (and shown)
    paths = [SAMPLES / sample / "profile.pop", SAMPLES / SAMPLE_PAIRS[sample] / "profile.pop"]
    for path in paths:
        assert path.exists(), f"{path} is not there (sample_profiles/regenerate.py makes it)"
    dash_duo.start_server(create_app([str(p) for p in paths], planner=rules))
    # the What-if page (a tune result's) is checked in test_browser_whatif.py, the GPU page (a GPU trace's) in
    # test_gpu_page.py
    pages = [page["path"] for page in dash.page_registry.values()
             if not page.get("needs_tune") and not page.get("needs_kernels")]
    assert len(pages) == 10, pages
    problems, totals = {}, [0, 0, 0]
    for path in pages:
        # WHEN each page is opened, then looked at in a window 1,280, 1,400 and 1,920 px wide
        open_page(dash_duo, path, WIDTHS[0])
        # THEN its figures are drawn and the console holds no error (test_browser.py's check of the samples, here on
        # the same page loads), the summary giving the sample's fit verdict
        wait_for_figures(dash_duo, COMPARED_PAGES.get(path, []))
        if path == "/":
            verdict = f"Fit {VERDICTS[sample]} (worst tile "
            dash_duo.wait_for_contains_text(f"#{ids.SUMMARY_RANGES}", verdict, timeout=10)
        assert errors(dash_duo) == [], path
        for width in WIDTHS:
            if width != WIDTHS[0]:  # the page opened at the first width, drawn
                show_at(dash_duo, width)
            # AND no card, table or panel hides part of its text, no mode bar sits on a legend or a
            # title, and no card's figure wraps
            found = (dash_duo.driver.execute_script(CUT_TEXT, TEXT) + dash_duo.driver.execute_script(OVERLAPS)
                     + dash_duo.driver.execute_script(WRAPPED_CARDS))
            if found:
                problems[f"{path} at {width} px"] = found
            totals = [t + n for t, n in zip(totals, dash_duo.driver.execute_script(MEASURED))]
    # (and there was something to measure: mode bars, legends or titles, and cards on the pages)
    assert all(totals), totals
    assert problems == {}, "\n".join(f"{path}: {line}" for path, lines in problems.items() for line in lines)


def cell_texts(dash_duo, table: str, column: int) -> list[tuple[str, bool]]:
    """Text of one column's cells, and whether each is inside the window."""
    return dash_duo.driver.execute_script("""
        const rows = document.querySelectorAll(arguments[0] + ' tbody tr');
        return [...rows].map(row => {
          const cell = row.children[arguments[1]], r = cell.getBoundingClientRect();
          return [cell.innerText, r.left >= 0 && r.right <= window.innerWidth];
        });""", table, column)


@pytest.mark.parametrize("width", (1280, 1600, 1920))
def test_the_largest_variables_show_their_bytes_whole(dash_duo, width):
    from dashboards.app import create_app

    # GIVEN the out-of-memory sample, whose fullest tile's largest variable holds 77,312 bytes
    dash_duo.start_server(create_app([str(SAMPLES / "bert_large_out_of_memory" / "profile.pop")]))
    # WHEN the memory page opens on that tile
    open_page(dash_duo, "/memory", width)
    headers = [th.text for th in dash_duo.find_elements("#memory-tile-variables-table th")]
    assert headers[:4] == ["variable", "category", "always-live", "on tile"]
    # THEN the "on tile" column is in the window, each figure whole, in bytes units
    cells = cell_texts(dash_duo, "#memory-tile-variables-table", 3)
    assert len(cells) == 15
    for text, visible in cells:
        assert visible, f"{text!r} is outside the window at {width} px"
        assert re.fullmatch(r"[0-9][0-9,.]* (B|KiB|MiB)", text), text
    # 77,312 bytes is 75.50 KiB
    assert cells[0][0] == "75.50 KiB"
