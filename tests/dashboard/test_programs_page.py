"""The Program tree page: its callbacks as plain functions, then in headless Chromium on a real engine profile
(mnist, pipelined over 4 IPUs): the tree drawn, a closed node opened by a click, a search that keeps the matches
and their ancestors, another IPU chosen, and no error in the browser console; an imported trace's one line."""

from __future__ import annotations

import importlib

import pytest
from dash.testing.wait import until

import popvision_py as pv
from dashboards import ids
from dashboards.figures import programs as figures
from popvision_py.analysis import programs
from tests.dashboard.conftest import SAMPLES
from tests.dashboard.test_browser import errors

PIPELINED = SAMPLES / "mnist_pipelined" / "profile.pop"
IMPORTED = SAMPLES / "pytorch_gpipe" / "profile.pop"


def page():
    return importlib.import_module("dashboards.pages.programs")


def test_the_tree_nests_every_node_once_under_its_parent():
    # GIVEN the analysis's tree of a real profile WHEN it is built into components
    with pv.open(PIPELINED) as report:
        frame = report.programs.tree()
    roots = figures.tree(frame)

    # THEN there is one root per IPU, and every node appears once, nested as the table says
    def walk(component, depth, seen):
        node = int(getattr(component, "data-node"))
        seen.append((node, depth))
        children = component.children[1:] if component.__class__.__name__ == "Details" else []
        for child in children:
            walk(child, depth + 1, seen)

    seen: list[tuple[int, int]] = []
    for root in roots:
        walk(root, 0, seen)
    assert len(roots) == 4
    assert sorted(seen) == list(zip(frame["node"], frame["depth"]))
    # the loops start open, a stage segment (depth 4) closed
    opened = {int(getattr(c, "data-node")): c.open for c in _details(roots)}
    shallow = (frame["depth"] < figures.OPEN_DEPTH) & frame["node"].isin(list(opened))
    assert all(opened[n] for n in frame.loc[shallow, "node"])
    assert not any(opened[n] for n in frame.loc[frame["name"] == "stage 0 forward", "node"])


def _details(components):
    for c in components:
        if c.__class__.__name__ == "Details":
            yield c
            yield from _details(c.children[1:])


def test_an_imported_trace_shows_its_one_line():
    from dashboards.app import create_app

    create_app([str(IMPORTED)])
    _, options, value, tree_style, note_style, description = page().render_header("a")
    assert options == [] and value is None and tree_style == {"display": "none"} and note_style != tree_style
    assert "IPU" not in description
    assert page().render_tree(None, "", "a") == (None, "")


@pytest.mark.browser
def test_open_expand_search_and_choose_an_ipu_in_the_browser(dash_duo):
    from dashboards.app import create_app

    with pv.open(PIPELINED) as report:
        frame = report.programs.tree()
        table = report.answer("programs.tree")
    dash_duo.start_server(create_app([str(PIPELINED)]))
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/programs")
    # WHEN the page opens THEN IPU 0's tree is drawn, its loops open, its key figures in cards
    dash_duo.wait_for_element(f"#{ids.PROGRAMS_TREE} details[open] > summary", timeout=15)
    dash_duo.wait_for_element(".cards .card", timeout=10)
    ipu0 = frame[frame["ipu"] == 0]
    assert len(dash_duo.find_elements(f"#{ids.PROGRAMS_TREE} .program-line")) == len(ipu0)
    names = [e.text for e in dash_duo.find_elements(f"#{ids.PROGRAMS_TREE} .program-name")]
    # one run, 10 device iterations, gradient accumulation 10
    assert names[:4] == ["IPU 0", "runs (host calls) ×1", "device iterations ×10", "gradient accumulation ×10"]
    # WHEN a closed node (stage 0 forward) is clicked THEN it opens and shows its ops
    segment = int(ipu0.loc[ipu0["name"] == "stage 0 forward", "node"].iloc[0])
    selector = f"#{ids.PROGRAMS_TREE} details[data-node='{segment}']"
    assert dash_duo.find_element(selector).get_attribute("open") is None
    op = dash_duo.find_element(f"{selector} > details[data-node] > summary")
    assert not op.is_displayed()
    dash_duo.find_element(f"{selector} > summary").click()
    until(lambda: dash_duo.find_element(selector).get_attribute("open") is not None, timeout=5)
    until(lambda: op.is_displayed(), timeout=5)
    assert "layer1/conv/fwd" in op.text
    # WHEN searching THEN the matches and their ancestors are left, opened, the words marked
    box = dash_duo.find_element(f"#{ids.PROGRAMS_SEARCH}")
    box.send_keys("conv/bwd\n")
    expected = programs.search(table, "conv/bwd") & (frame["ipu"] == 0).to_numpy()
    until(lambda: len(dash_duo.find_elements(f"#{ids.PROGRAMS_TREE} .program-line")) == int(expected.sum()), timeout=10)
    hits = int((programs.matches(table, "conv/bwd") & (frame["ipu"] == 0).to_numpy()).sum())
    dash_duo.wait_for_text_to_equal(f"#{ids.PROGRAMS_FOUND}", f"{hits} nodes match “conv/bwd”", timeout=10)
    marks = dash_duo.find_elements(f"#{ids.PROGRAMS_TREE} mark")
    assert len(marks) == hits and all(m.is_displayed() and m.text == "conv/bwd" for m in marks)
    # WHEN another IPU is chosen THEN its tree is shown, still filtered by the search
    dash_duo.select_dcc_dropdown(f"#{ids.PROGRAMS_IPU}", "IPU 1")
    until(lambda: "layer2/conv/bwd" in dash_duo.find_element(f"#{ids.PROGRAMS_TREE}").text, timeout=10)
    tree = dash_duo.find_element(f"#{ids.PROGRAMS_TREE}").text
    assert "IPU 1" in tree and "layer1/conv" not in tree
    assert errors(dash_duo) == []
