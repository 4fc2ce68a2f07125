"""The What-if page and the Summary's Verify button in a real headless Chromium (``dash_duo``), on a
real tune result (mnist candidates emulated for real, tests/tunefiles.py) and a real mnist profile."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from selenium.webdriver.common.action_chains import ActionChains

from dashboards import ids
from dashboards.screenshots import wait_until_drawn
from tests.dashboard.test_browser import errors, wait_for_figures
from tests.dashboard.test_layout import CUT_TEXT, TEXT

pytestmark = pytest.mark.browser


@pytest.mark.slow  # about 7 s: two figures, a click and an emulation in the browser
def test_the_whatif_page_shows_the_candidates_and_a_clicked_points_command(dash_duo, made, whatif_app):
    rows = pq.read_table(made["tune"]).to_pandas()
    # GIVEN the dashboard started with a tune result
    dash_duo.start_server(whatif_app)
    # THEN the navigation offers the What-if page
    dash_duo.wait_for_element(".nav-link", timeout=10)
    assert "What-if" in [link.text.split("\n")[-1] for link in dash_duo.find_elements(".nav-link")]
    # WHEN it is opened
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/whatif")
    wait_for_figures(dash_duo, [ids.WHATIF_SCATTER, ids.WHATIF_PARETO])
    # THEN the scatter's legend tells fits, does not fit and the start apart, and it has one point per
    # emulated candidate (5) plus the start's star
    legend = dash_duo.find_element(f"#{ids.WHATIF_SCATTER} .legend").text
    for name in ("fits", "does not fit", "starting configuration"):
        assert name in legend
    points = dash_duo.find_elements(f"#{ids.WHATIF_SCATTER} .scatterlayer .trace .point")
    assert len(points) == int(rows["status"].isin(["ok", "oom"]).sum()) + 1
    assert "Pareto front" in dash_duo.find_element(f"#{ids.WHATIF_PARETO} .legend").text
    # WHEN the "does not fit" point (the second trace's only point) is clicked
    oom = rows[rows["status"] == "oom"].iloc[0]
    point = dash_duo.find_elements(f"#{ids.WHATIF_SCATTER} .scatterlayer .trace:nth-child(2) .point")[0]
    ActionChains(dash_duo.driver).move_to_element(point).click().perform()
    # THEN its command and figures are shown, with a copy button
    dash_duo.wait_for_contains_text(f"#{ids.WHATIF_DETAIL}", "oom", timeout=10)
    detail = dash_duo.find_element(f"#{ids.WHATIF_DETAIL}")
    assert " ".join(detail.find_element("css selector", ".insight-command-text").text.split()) == oom["command"]
    assert detail.find_elements("css selector", ".insight-copy")
    # AND "Emulate and compare" compares it with the current profile
    dash_duo.find_element(f"#{ids.WHATIF_EMULATE}").click()
    dash_duo.wait_for_contains_text(f"#{ids.WHATIF_COMPARISON}", "Key figures", timeout=30)
    assert "micro batch size" in dash_duo.find_element("#whatif-configuration").text.replace("_", " ")
    assert errors(dash_duo) == []
    # AND at 1,280 px wide no card, table or panel of the page cuts its text (test_layout.py's check)
    dash_duo.driver.set_window_size(1280, 1000)
    wait_until_drawn(dash_duo.driver)
    assert dash_duo.driver.execute_script(CUT_TEXT, TEXT + ", .whatif-title") == []


def test_the_summary_verify_button_shows_the_fix_measured(dash_duo, whatif_app):
    dash_duo.start_server(whatif_app)
    dash_duo.wait_for_element(".verify-button", timeout=15)
    # WHEN the first fix's Verify button is pressed
    dash_duo.find_elements(".verify-button")[0].click()
    # THEN its measured effect appears beside the predicted one
    dash_duo.wait_for_element(".verify-verdict", timeout=30)
    verdict = dash_duo.find_element(".verify-verdict").text
    assert verdict.startswith(("Held:", "Did not hold:"))
    table = dash_duo.find_element(".verify-table").text
    assert "predicted" in table and "measured" in table and "throughput" in table
    assert errors(dash_duo) == []
