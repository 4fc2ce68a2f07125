"""The dashboard in a real headless Chromium, driven by Dash's ``dash_duo``.

Every page draws its figures with no error in the browser console; a tile click shows that tile;
choosing a liveness step lists its variables; zooming the trace changes its level of detail; chosen
tiles show as rows that zoom with it; the compare page shows both profiles.
"""

from __future__ import annotations

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from dashboards import ids
from tests.dashboard.conftest import SAMPLES

pytestmark = pytest.mark.browser

PAGES = {
    "/": [ids.SUMMARY_TIME, ids.SUMMARY_MEMORY, ids.SUMMARY_TILE_HISTOGRAM],
    "/memory": [ids.MEMORY_TILE_MAP, ids.MEMORY_TILE_BREAKDOWN, ids.MEMORY_CATEGORIES, ids.MEMORY_HISTOGRAM,
                ids.MEMORY_WORST_STEPS],
    "/liveness": [ids.LIVENESS_PLOT],
    "/trace": [ids.TRACE_TIMELINE, ids.TRACE_TILE_TIMELINE, ids.TRACE_TILES],
    "/operations": [ids.OPERATIONS_TRACE],
    "/stages": [ids.STAGES_GANTT, ids.STAGES_IMBALANCE, ids.STAGES_SUMMARY, ids.STAGES_SPLIT_FIGURE],
    "/exchange": [ids.EXCHANGE_PHASES, ids.EXCHANGE_MATRIX, ids.EXCHANGE_KINDS],
    "/programs": [],  # a tree of html elements, no graph (tests/dashboard/test_programs_page.py)
}
# Every page of a sample compared with another: the Compare page's graphs too.
COMPARED_PAGES = {**PAGES, "/compare": [ids.COMPARE_MEMORY, ids.COMPARE_PHASES]}


def wait_for_figures(dash_duo, graph_ids: list[str], timeout: float = 30) -> None:
    """Until each graph has drawn at least one trace (plotly adds `.trace` groups when it does). The wait is
    a bound, not a figure: under the whole suite on two shared cores the memory page's tile map once took
    longer than 15 s to draw (the whole test takes 7 s alone)."""
    for graph_id in graph_ids:
        dash_duo.wait_for_element(f"#{graph_id} .main-svg", timeout=timeout)
        dash_duo.wait_for_element(f"#{graph_id} .plot .trace, #{graph_id} .heatmaplayer image, #{graph_id} .trace",
                                  timeout=timeout)


def errors(dash_duo) -> list[dict]:
    return [entry for entry in dash_duo.get_logs() if entry.get("level") == "SEVERE"]


def choose(dash_duo, radio_items_id: str, label: str) -> None:
    """Click the option of a ``dcc.RadioItems`` whose label starts with ``label``, as a user does: by its
    label (Dash 2 renders no ``value`` attribute on the options' inputs)."""
    dash_duo.driver.find_element(
        By.XPATH, f"//*[@id='{radio_items_id}']//label[starts-with(normalize-space(), '{label}')]").click()


def test_every_page_draws_its_figures_without_console_errors(dash_duo, app):
    # GIVEN the dashboard on a profile with out-of-memory tiles
    dash_duo.start_server(app)
    for path, graphs in PAGES.items():
        # WHEN each page is opened
        dash_duo.wait_for_page(url=f"{dash_duo.server_url}{path}")
        # THEN its figures are drawn, with key figures in cards, and the console holds no error
        wait_for_figures(dash_duo, graphs)
        if path != "/liveness":
            dash_duo.wait_for_element(".cards .card", timeout=10)
        assert errors(dash_duo) == [], path
    # AND the navigation offers every page but compare (one profile only)
    links = [link.text.split("\n")[-1] for link in dash_duo.find_elements(".nav-link")]
    assert links == ["Summary", "Memory", "Liveness", "Execution trace", "Operations", "Stages", "Exchange",
                     "Program tree", "System"]


def test_every_page_draws_a_sample_profile_without_console_errors(dash_duo):
    """mnist_pipelined's pages, compared with mnist_sharded; the other samples' pages are checked the same way in
    test_layout.py, on the page loads it measures."""
    from dashboards.app import create_app
    from engine import rules

    path = SAMPLES / "mnist_pipelined" / "profile.pop"
    # the samples are committed: a missing one is a failure, not a skip that would hide it
    assert path.exists(), f"{path} is not there (sample_profiles/regenerate.py makes it)"
    dash_duo.start_server(create_app([str(path), str(SAMPLES / "mnist_sharded" / "profile.pop")],
                                     planner=rules))
    for page_path, graphs in COMPARED_PAGES.items():
        dash_duo.wait_for_page(url=f"{dash_duo.server_url}{page_path}")
        wait_for_figures(dash_duo, graphs)
        if page_path == "/":
            # the summary's ranges panel gives the fit verdict the sample's manifest holds
            dash_duo.wait_for_contains_text(f"#{ids.SUMMARY_RANGES}", "Fit fits (worst tile ", timeout=10)
        assert errors(dash_duo) == [], page_path


def test_summary_shows_the_findings_of_an_out_of_memory_run(dash_duo, app):
    dash_duo.start_server(app)
    dash_duo.wait_for_element(".insight", timeout=15)
    assert "out of memory" in dash_duo.find_element(f"#{ids.SUMMARY_INSIGHTS}").text
    assert "no" in dash_duo.find_element(".card.bad .card-value").text
    # a profile without ranges (this synthetic one has no prediction in its manifest): the central figures
    # alone, no ranges panel, and no error
    assert dash_duo.find_element(f"#{ids.SUMMARY_RANGES}").text == ""
    assert "tiles out of memory" in dash_duo.find_element(".card.bad .card-note").text
    assert errors(dash_duo) == []


def test_clicking_a_tile_shows_its_breakdown_and_variables(dash_duo, app):
    # GIVEN the memory page, opened on IPU 0's fullest tile (tile 0)
    dash_duo.start_server(app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/memory")
    wait_for_figures(dash_duo, [ids.MEMORY_TILE_MAP, ids.MEMORY_TILE_BREAKDOWN])
    dash_duo.wait_for_text_to_equal("#memory-tile-name strong", "IPU 0, tile 0", timeout=10)
    # WHEN tile 11 is clicked (every tile of IPU 0 is out of memory: each has its marker, in tile order)
    markers = dash_duo.find_elements(f"#{ids.MEMORY_TILE_MAP} .scatterlayer .point")
    assert len(markers) == 64
    ActionChains(dash_duo.driver).move_to_element(markers[11]).click().perform()
    # THEN the breakdown and variables are tile 11's
    dash_duo.wait_for_text_to_equal("#memory-tile-name strong", "IPU 0, tile 11", timeout=10)
    table = dash_duo.find_element("#memory-tile-variables-table")
    assert "B1/weight" in table.text
    assert errors(dash_duo) == []


def test_choosing_a_liveness_step_lists_the_variables_live_there(dash_duo, app):
    # GIVEN the liveness page, opened at the highest peak
    dash_duo.start_server(app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/liveness")
    wait_for_figures(dash_duo, [ids.LIVENESS_PLOT])
    dash_duo.wait_for_element("#liveness-live-table", timeout=10)
    # WHEN step 6 (after every activation has died) is typed in
    step = dash_duo.find_element(f"#{ids.LIVENESS_STEP}")
    step.send_keys(Keys.CONTROL, "a")
    step.send_keys("6", Keys.ENTER)
    # THEN the title names step 6 and the list holds only always-live variables
    dash_duo.wait_for_contains_text(f"#{ids.LIVENESS_LIVE_TITLE}", "step 6", timeout=10)
    table = dash_duo.find_element("#liveness-live-table").text
    assert "B1/weight" in table and "activation" not in table
    # AND WHEN step 1 is chosen, the activations live there are listed too
    step.send_keys(Keys.CONTROL, "a")
    step.send_keys("1", Keys.ENTER)
    dash_duo.wait_for_contains_text(f"#{ids.LIVENESS_LIVE_TITLE}", "step 1", timeout=10)
    assert "activation" in dash_duo.find_element("#liveness-live-table").text
    assert errors(dash_duo) == []


# A zoom, then the mode bar's pan and zoom buttons clicked before its answer comes (each a relayout event of its own:
# ``dragmode``): Dash drops the answer of a callback its input changed under, so these must not reach the server.
ZOOM_THEN_DRAG_MODES = """
const gd = document.querySelector(arguments[0] + ' .js-plotly-plot');
Plotly.relayout(gd, {'xaxis.range[0]': arguments[1], 'xaxis.range[1]': arguments[2]});
[5, 20, 40, 80, 160].forEach((ms, i) => setTimeout(() => Plotly.relayout(gd, {dragmode: i % 2 ? 'zoom' : 'pan'}), ms));
"""
X_RANGE = "return document.querySelector(arguments[0] + ' .js-plotly-plot')._fullLayout.xaxis.range"


def test_zooming_the_trace_changes_its_level_of_detail(dash_duo, app, monkeypatch):
    # GIVEN the trace page with few bins, so the whole run is binned
    from dashboards.pages import trace

    monkeypatch.setattr(trace, "MAX_BINS", 40)
    dash_duo.start_server(app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/trace")
    wait_for_figures(dash_duo, [ids.TRACE_TIMELINE])
    dash_duo.wait_for_contains_text(f"#{ids.TRACE_LEVEL}", "bins", timeout=10)
    whole = dash_duo.find_element(f"#{ids.TRACE_LEVEL}").text
    # WHEN a narrow window is dragged on the timeline
    plot = dash_duo.find_element(f"#{ids.TRACE_TIMELINE} .nsewdrag")
    width = plot.rect["width"]
    ActionChains(dash_duo.driver).move_to_element(plot).move_by_offset(int(-width * 0.45), 0).click_and_hold() \
        .move_by_offset(int(width * 0.04), 0).release().perform()
    # THEN the server answers with the events of that window
    dash_duo.wait_for_contains_text(f"#{ids.TRACE_LEVEL}", "events", timeout=10)
    assert dash_duo.find_element(f"#{ids.TRACE_LEVEL}").text != whole
    # AND the "whole run" button goes back to bins
    dash_duo.find_element(f"#{ids.TRACE_RESET}").click()
    dash_duo.wait_for_contains_text(f"#{ids.TRACE_LEVEL}", "bins", timeout=10)
    # AND a zoom onto the same share of the run followed at once by clicks on the mode bar's pan and zoom is drawn
    # all the same (the clicks' relayout events do not reach the server)
    start, end = dash_duo.driver.execute_script(X_RANGE, f"#{ids.TRACE_TIMELINE}")
    dash_duo.driver.execute_script(ZOOM_THEN_DRAG_MODES, f"#{ids.TRACE_TIMELINE}", start + (end - start) * 0.05,
                                   start + (end - start) * 0.09)
    dash_duo.wait_for_contains_text(f"#{ids.TRACE_LEVEL}", "events", timeout=10)
    assert errors(dash_duo) == []


def _choose_tiles(dash_duo, spec: str) -> None:
    box = dash_duo.find_element(f"#{ids.TRACE_TILE_CHOICE}")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(spec, Keys.ENTER)


def _tile_rows(dash_duo) -> list[str]:
    return [tick.text for tick in dash_duo.find_elements(f"#{ids.TRACE_TILE_TIMELINE} .ytick text")]


def test_chosen_tiles_show_as_rows_and_zoom_with_the_trace(dash_duo, app, monkeypatch):
    # GIVEN the trace page with few bins, so the whole run is binned for IPUs and tiles alike
    from dashboards.pages import trace

    monkeypatch.setattr(trace, "MAX_BINS", 40)
    monkeypatch.setattr(trace, "TILE_BINS", 120)
    dash_duo.start_server(app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/trace")
    wait_for_figures(dash_duo, [ids.TRACE_TIMELINE, ids.TRACE_TILE_TIMELINE, ids.TRACE_TILES])
    # it opens on the 8 busiest tiles (tile t computes c x (64 - t) // 64: tiles 0 to 7), in bins
    dash_duo.wait_for_contains_text(f"#{ids.TRACE_TILE_LEVEL}", "the 8 busiest tiles (most compute cycles", timeout=10)
    assert _tile_rows(dash_duo) == [f"tile {t}" for t in range(8)]
    # WHEN tiles are chosen by number and range
    _choose_tiles(dash_duo, "0, 5, 17, 60-62")
    # THEN each is a row, in the order given, with the bars of its phases
    dash_duo.wait_for_contains_text(f"#{ids.TRACE_TILE_LEVEL}", "6 tiles", timeout=10)
    assert _tile_rows(dash_duo) == ["tile 0", "tile 5", "tile 17", "tile 60", "tile 61", "tile 62"]
    legend = dash_duo.find_element(f"#{ids.TRACE_TILE_TIMELINE}").text
    assert "compute" in legend and "wait (done, at the sync)" in legend
    assert "bins" in dash_duo.find_element(f"#{ids.TRACE_TILE_LEVEL}").text
    # AND WHEN the worst 3 are asked for, the busiest three are shown
    _choose_tiles(dash_duo, "worst 3")
    dash_duo.wait_for_contains_text(f"#{ids.TRACE_TILE_LEVEL}", "the 3 busiest tiles", timeout=10)
    assert _tile_rows(dash_duo) == ["tile 0", "tile 1", "tile 2"]
    # AND WHEN a narrow window is dragged on the tiles' time line, both time lines show its executions
    plot = dash_duo.find_element(f"#{ids.TRACE_TILE_TIMELINE} .nsewdrag")
    width = plot.rect["width"]
    ActionChains(dash_duo.driver).move_to_element(plot).move_by_offset(int(-width * 0.45), 0).click_and_hold() \
        .move_by_offset(int(width * 0.04), 0).release().perform()
    dash_duo.wait_for_contains_text(f"#{ids.TRACE_TILE_LEVEL}", "events", timeout=10)
    dash_duo.wait_for_contains_text(f"#{ids.TRACE_LEVEL}", "events", timeout=10)
    # AND the balance of the compute sets in view is each tile's busy share there
    dash_duo.find_elements(f"#{ids.TRACE_BALANCE_SCOPE} input")[1].click()
    dash_duo.wait_for_contains_text(f"#{ids.TRACE_TILES}", "compute sets in cycles", timeout=10)
    # AND a tile past the IPU's is one sentence, not a figure
    _choose_tiles(dash_duo, "70")
    dash_duo.wait_for_text_to_equal(f"#{ids.TRACE_TILE_LEVEL}", "Tile 70 is not on the IPU: it has tiles 0 to 63.",
                                    timeout=10)
    assert errors(dash_duo) == []


def test_compare_page_shows_both_profiles(dash_duo, compare_app):
    # GIVEN the dashboard started with a pipelined and a sharded profile
    dash_duo.start_server(compare_app)
    # WHEN the compare page is opened
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/compare")
    wait_for_figures(dash_duo, [ids.COMPARE_MEMORY, ids.COMPARE_STAGES, ids.COMPARE_PHASES])
    # THEN both profiles are named, and the key figures and tables show A and B side by side
    header = dash_duo.find_element(f"#{ids.COMPARE_HEADER}").text
    assert "A · synthetic pipelined (pipelined.pop)" in header
    assert "B · synthetic sharded (sharded.pop)" in header
    assert "→" in dash_duo.find_element(f"#{ids.COMPARE_FIGURES}").text
    assert "step cycles" in dash_duo.find_element("#compare-summary-table").text
    legend = dash_duo.find_element(f"#{ids.COMPARE_MEMORY}").text
    assert "pipelined" in legend and "sharded" in legend
    assert errors(dash_duo) == []


def test_the_profile_choice_switches_every_page_to_profile_b(dash_duo, compare_app, pipelined_profile,
                                                            sharded_profile):
    import popvision_py as pv

    def ideal(path) -> tuple[float, float]:
        with pv.open(path) as report:
            f = report.stages.figures()
            return f.ideal_bubble_pct, f.bubble_pct

    pipelined_ideal, pipelined_bubble = ideal(pipelined_profile)
    sharded_ideal, sharded_bubble = ideal(sharded_profile)
    # the pipelined run re-timed with its stages balanced idles less than it did; the sharded run takes its
    # stages one at a time, so balancing changes nothing: its ideal is what it measured, about 1 - 1 / S
    assert pipelined_ideal < pipelined_bubble and sharded_ideal == sharded_bubble and 45 < sharded_ideal < 50
    dash_duo.start_server(compare_app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/stages")
    wait_for_figures(dash_duo, [ids.STAGES_GANTT])
    dash_duo.wait_for_element(f"#{ids.STAGES_FIGURES} .card", timeout=10)
    dash_duo.wait_for_contains_text(f"#{ids.STAGES_FIGURES}", f"ideal {pipelined_ideal:.1f} %", timeout=10)
    # WHEN profile B (the sharded run) is chosen
    dash_duo.find_elements(".profile-label")[1].click()
    # THEN the page redraws from it: a sharded run has the larger bubble, one IPU of 2 busy at a time
    dash_duo.wait_for_contains_text(f"#{ids.STAGES_FIGURES}", f"ideal {sharded_ideal:.1f} %", timeout=10)
    assert dash_duo.find_elements(".profile-radio")[1].is_selected()
    assert errors(dash_duo) == []
