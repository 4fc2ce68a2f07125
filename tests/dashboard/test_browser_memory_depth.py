"""The Memory page in depth, in a real headless Chromium: a tile's tabs, the tile typed by number,
the map coloured by dominant category and by one variable's bytes; no console error."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

from dashboards import ids
from tests.dashboard.test_browser import errors, wait_for_figures

pytestmark = pytest.mark.browser


def tab(dash_duo, label: str):
    return dash_duo.driver.find_element(By.XPATH,
                                        f"//*[@id='{ids.MEMORY_TILE_TABS}']//*[normalize-space(text())='{label}']")


def test_a_tiles_tabs_a_typed_tile_and_the_maps_colourings(dash_duo, app):
    # GIVEN the memory page on the out-of-memory profile, opened on IPU 0's fullest tile
    dash_duo.start_server(app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/memory")
    wait_for_figures(dash_duo, [ids.MEMORY_TILE_MAP, ids.MEMORY_TILE_BREAKDOWN, ids.MEMORY_WORST_STEPS])
    dash_duo.wait_for_text_to_equal("#memory-tile-name strong", "IPU 0, tile 0", timeout=10)
    # WHEN tile 11 is clicked and the tabs are opened one by one
    markers = dash_duo.find_elements(f"#{ids.MEMORY_TILE_MAP} .scatterlayer .point")
    ActionChains(dash_duo.driver).move_to_element(markers[11]).click().perform()
    dash_duo.wait_for_text_to_equal("#memory-tile-name strong", "IPU 0, tile 11", timeout=10)
    tab(dash_duo, "Compute sets").click()
    # THEN each lists what tile 11 runs: its compute sets (every tile runs each block's), vertices, exchanges
    dash_duo.wait_for_contains_text("#memory-tile-compute-table", "B1/fwd", timeout=10)
    tab(dash_duo, "Vertices").click()
    dash_duo.wait_for_element("#memory-tile-vertices-table", timeout=10)
    tab(dash_duo, "Exchanges").click()
    dash_duo.wait_for_element(f"#{ids.MEMORY_TAB_EXCHANGES}", timeout=10)
    # WHEN a tile number is typed
    box = dash_duo.find_element(f"#{ids.MEMORY_TILE_INPUT}")
    box.clear()
    box.send_keys("42\n")
    # THEN that tile is shown
    dash_duo.wait_for_text_to_equal("#memory-tile-name strong", "IPU 0, tile 42", timeout=10)
    # WHEN the map is coloured by dominant category, THEN its colour bar names the categories
    dash_duo.driver.find_element(By.XPATH, f"//*[@id='{ids.MEMORY_COLOUR_BY}']//label[contains(., "
                                           f"'dominant category')]").click()
    dash_duo.wait_for_contains_text(f"#{ids.MEMORY_TILE_MAP} .colorbar", "weights", timeout=10)
    # WHEN the largest variable is picked, THEN the map shows its bytes on each tile, named in its title
    dash_duo.select_dcc_dropdown(f"#{ids.MEMORY_VARIABLE}", index=0)
    dash_duo.wait_for_contains_text(f"#{ids.MEMORY_TILE_MAP} .gtitle", " B on ", timeout=10)
    # AND the tile shown stayed tile 42 through the colourings, with no console error
    assert dash_duo.find_element("#memory-tile-name strong").text == "IPU 0, tile 42"
    assert errors(dash_duo) == []
