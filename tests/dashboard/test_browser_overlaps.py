"""Every page at 1,280, 1,400 and 1,920 px wide in a real Chromium: no toolbar on a legend or a title, and
every card's figure on one line (issue 37).

Plotly draws its mode bar (the zoom, pan and download buttons) in the top right corner of each graph,
over whatever the figure put there. The browser is asked for the boxes (``getBoundingClientRect``) of
each graph's mode bar, its legend and its titles (the figure's, the axes', a colour bar's); no two of them
may share a pixel. A card's value is one line: its text's line boxes all start at the same height.
One server per profile set; each page loaded once, the window resized for each width. The emulated samples'
pages are checked by test_layout.py on its own page loads (an out-of-memory pipelined run with a small one,
a pipelined run with a sharded one); here, a real GPipe run imported from PyTorch traces.
"""

from __future__ import annotations

import dash
import pytest

from dashboards.screenshots import wait_until_drawn
from tests.dashboard.conftest import SAMPLES

pytestmark = pytest.mark.browser

WIDTHS = (1280, 1400, 1920)
PROFILE_SETS = {
    # a real GPipe run imported from PyTorch traces: the Stages page's critical path, the What-if page re-timed
    "imported": ("pytorch_gpipe",),
}

OVERLAPS = """
const found = [];
const box = el => el.getBoundingClientRect();
const name = el => (el.getAttribute('class') || el.tagName).split(' ')[0] + ' "' +
    (el.textContent || '').replace(/\\s+/g, ' ').trim().slice(0, 40) + '"';
const overlap = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 &&
                          Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
for (const graph of document.querySelectorAll('.dash-graph')) {
  const bar = graph.querySelector('.modebar');
  if (!bar) continue;
  const m = box(bar);
  if (m.width < 1 || m.height < 1) continue;
  // the legend, and every title: the figure's (gtitle), the axes' (xtitle, ytitle, x2title...), a colour bar,
  // the subplots' titles and other annotations
  const marks = [...graph.querySelectorAll('.legend, .gtitle, text[class$="title"], .colorbar, .annotation')];
  for (const el of marks) {
    const b = box(el);
    if (b.width < 1 || b.height < 1 || !overlap(m, b)) continue;
    found.push(`#${graph.id}: the mode bar (${Math.round(m.left)}-${Math.round(m.right)} x ` +
               `${Math.round(m.top)}-${Math.round(m.bottom)}) covers ${name(el)} (${Math.round(b.left)}-` +
               `${Math.round(b.right)} x ${Math.round(b.top)}-${Math.round(b.bottom)})`);
  }
}
return found;
"""

# A card's value whose text's line boxes start at more than one height has wrapped.
WRAPPED_CARDS = """
const found = [];
for (const el of document.querySelectorAll('.card-value')) {
  const range = document.createRange();
  range.selectNodeContents(el);
  const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
  if (lines.size > 1)
    found.push(`card value "${el.innerText.replace(/\\s+/g, ' ')}" on ${lines.size} lines in ` +
               `${Math.round(el.getBoundingClientRect().width)} px`);
}
return found;
"""

# The number of boxes the checks measured, so that a page drawing nothing cannot pass.
MEASURED = """
return [document.querySelectorAll('.dash-graph .modebar').length,
        document.querySelectorAll('.dash-graph .legend, .dash-graph .gtitle').length,
        document.querySelectorAll('.card-value').length];
"""


def open_page(dash_duo, path: str, width: int, filled: str | None = None) -> None:
    """Page ``path`` loaded in a window ``width`` px wide and drawn; ``filled``: an element a callback adds
    after the figures (a table), waited for too."""
    dash_duo.driver.set_window_size(width, 1000)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}{path}")
    if filled is not None:
        dash_duo.wait_for_element(filled, timeout=30)
    show_at(dash_duo, width)


def show_at(dash_duo, width: int) -> None:
    """The open page in a window ``width`` px wide, laid out again and drawn (the page is not reloaded)."""
    dash_duo.driver.set_window_size(width, 1000)
    wait_until_drawn(dash_duo.driver)
    # the window is the width asked for (scroll bars aside)
    assert width - 20 <= dash_duo.driver.execute_script("return window.innerWidth") <= width


@pytest.mark.slow
@pytest.mark.timeout(600)  # 10 page loads, each looked at 3 widths: several minutes on a loaded machine
@pytest.mark.parametrize("profiles", list(PROFILE_SETS))
def test_no_toolbar_covers_a_legend_or_title_and_no_card_wraps(dash_duo, profiles):
    from dashboards.app import create_app
    from engine import rules

    # GIVEN the dashboard on committed samples, their fixes checked as `popvision dashboard` checks them
    paths = [SAMPLES / name / "profile.pop" for name in PROFILE_SETS[profiles]]
    for path in paths:
        assert path.exists(), f"{path} is not there (sample_profiles/regenerate.py makes it)"
    dash_duo.start_server(create_app([str(p) for p in paths], planner=rules))
    dash_duo.wait_for_element(".nav-link", timeout=15)
    pages = [link.get_attribute("href").removeprefix(dash_duo.server_url) or "/"
             for link in dash_duo.find_elements(".nav-link")]
    assert len(pages) >= 9, pages
    problems, totals = [], [0, 0, 0]
    for path in pages:
        # WHEN each page is opened, then looked at in a window 1,280, 1,400 and 1,920 px wide
        open_page(dash_duo, path, WIDTHS[0])
        for width in WIDTHS:
            if width != WIDTHS[0]:  # the page opened at the first width, drawn
                show_at(dash_duo, width)
            # THEN no mode bar sits on a legend or a title, and no card's figure wraps
            found = dash_duo.driver.execute_script(OVERLAPS) + dash_duo.driver.execute_script(WRAPPED_CARDS)
            problems += [f"{width} px {path}: {line}" for line in found]
            totals = [t + n for t, n in zip(totals, dash_duo.driver.execute_script(MEASURED))]
    # (and there was something to measure: mode bars, legends or titles, and cards on the pages)
    assert all(totals), totals
    assert problems == [], "\n".join(problems)
    assert [entry for entry in dash_duo.get_logs() if entry.get("level") == "SEVERE"] == []


def test_a_mode_bar_over_a_legend_is_found(dash_duo):
    """The check itself: a figure whose legend is put where the mode bar is must be reported."""
    import plotly.graph_objects as go
    from dash import dcc, html

    # GIVEN a page with one graph whose legend sits in its top right corner, under the mode bar
    fig = go.Figure([go.Scatter(x=[1, 2], y=[1, 2], name="a long legend entry " * 3)])
    fig.update_layout(showlegend=True, legend=dict(orientation="h", x=1, xanchor="right", y=1.15, yanchor="bottom"),
                      margin=dict(t=20), height=300)
    app = dash.Dash(__name__)
    app.layout = html.Div(dcc.Graph(id="covered", figure=fig))
    dash_duo.start_server(app)
    dash_duo.wait_for_element("#covered .legend", timeout=15)
    # WHEN the boxes are measured
    found = dash_duo.driver.execute_script(OVERLAPS)
    # THEN the overlap is reported, naming the legend
    assert len(found) == 1 and "covers legend" in found[0], found
