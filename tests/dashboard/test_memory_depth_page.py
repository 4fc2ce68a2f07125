"""The Memory page's in-depth callbacks called as plain functions: the picker, the colourings, a typed
tile, the tabs (and a schema-1 profile's one line for vertices), the fullest tiles over steps."""

from __future__ import annotations

import importlib
from pathlib import Path

import dash
import pytest

from tests.dashboard.test_callbacks import text


def memory():
    return importlib.import_module("dashboards.pages.memory")


def test_the_picker_lists_the_ipus_variables_largest_first_and_picking_one_colours_by_it(app):
    options, value = memory().variable_options(0, "a")
    assert value is None
    # IPU 0 holds B1/weight (90,000 B), B1/optimiser and B2/weight (20,000 B each, by var_id), IPU0/code (6,400 B)
    # and two activations of 200 B
    assert [o["label"].split(" · ")[0] for o in options] == ["B1/weight", "B1/optimiser", "B2/weight", "IPU0/code",
                                                              "B1/activation", "B2/activation"]
    assert memory().colour_by_variable(options[0]["value"]) == "variable"
    with pytest.raises(dash.exceptions.PreventUpdate):
        memory().colour_by_variable(None)
    # the map then shows B1/weight's 90,000 bytes over IPU 0's tiles, the tile shown staying tile 11
    tile_map, title, *_, selected = memory().render_ipu(0, "variable", options[0]["value"], {"ipu": 0, "tile": 11}, "a")
    assert "B1/weight: 90,000 B on 64 tiles" in tile_map.layout.title.text
    assert text(title).startswith("IPU 0, tile 11") and selected == {"ipu": 0, "tile": 11}
    # a variable of another IPU (the picker not yet refreshed) falls back to peak memory
    other = memory().variable_options(1, "a")[0][0]["value"]
    assert memory().render_ipu(0, "variable", other, None, "a")[0].data[0].colorbar.title.text == "KiB"


def test_the_map_by_dominant_category_names_each_category_it_shows(app):
    tile_map = memory().render_ipu(0, "category", None, None, "a")[0]
    assert list(tile_map.data[0].colorbar.ticktext) == ["weights"]  # B1's and B2's weights fill every tile of IPU 0


def test_a_typed_tile_is_shown_and_one_off_the_ipu_changes_nothing(app):
    *_, selected = memory().type_tile(42, 0, "a")
    assert selected == {"ipu": 0, "tile": 42}
    for bad in (64, -1, 2.5, None):
        with pytest.raises(dash.exceptions.PreventUpdate):
            memory().type_tile(bad, 0, "a")


def test_the_tabs_list_the_tiles_compute_sets_vertices_and_exchanges(app):
    compute, vertices, exchanges = memory().tile_tabs({"ipu": 0, "tile": 3}, "a")
    assert "B1/fwd" in text(compute) and "vertices" in text(compute)
    assert "codelet" in text(vertices)
    assert text(exchanges)
    with pytest.raises(dash.exceptions.PreventUpdate):
        memory().tile_tabs(None, "a")


def test_a_schema_1_profile_says_its_vertices_are_not_recorded(oom_profile: Path, tmp_path: Path):
    from dashboards.app import create_app
    from tests.test_format_hostile import without_vertices

    create_app([str(without_vertices(oom_profile, tmp_path / "v1.pop", 1))])
    compute, vertices, _ = memory().tile_tabs({"ipu": 0, "tile": 3}, "a")
    assert text(vertices) == "vertices: not recorded (schema 1 profile)"
    assert "vertices" not in text(compute).split("B1/fwd")[0]  # no vertices column


def test_the_fullest_tiles_over_steps_draw_one_line_each(app):
    # IPU 0's five fullest tiles (largest first, ties by tile) are tiles 0 to 4
    figure = memory().worst_steps(0, "a")
    assert [t.name for t in figure.data] == ["tile 0", "tile 1", "tile 2", "tile 3", "tile 4"]
