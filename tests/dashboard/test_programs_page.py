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
from popvision_py.analysis.ipu import programs
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


def _nodes(components) -> int:
    return sum(1 + (_nodes(c.children[1:]) if c.__class__.__name__ == "Details" else 0) for c in components)


def test_a_large_tree_is_cut_to_what_a_browser_draws_quickly_and_says_so():
    from dashboards.app import create_app

    # GIVEN bert-large's tree: 789 nodes on IPU 0, 5,172 on every IPU (more than the page draws at once)
    big = SAMPLES / "bert_large_out_of_memory" / "profile.pop"
    create_app([str(big)])
    with pv.open(big) as report:
        frame = report.programs.tree()
    on_0 = frame[frame["ipu"] == 0]
    assert len(on_0) > page().MAX_NODES
    # WHEN IPU 0's tree is asked for
    tree, found = page().render_tree(0, "", "a")
    # THEN the ops' program steps are left to their lines (an op is a sequence with its op named, its
    # children the steps), everything else shown, and the page says what it left out and how to see it
    ops = set(on_0.loc[(on_0["kind"] == "sequence") & (on_0["op"] != ""), "node"])
    expected = len(on_0) - int(on_0["parent"].isin(ops).sum())
    assert _nodes(tree) == expected <= page().MAX_NODES
    assert found == (f"Over {page().MAX_NODES:,} nodes: each op's program steps are left to its line; "
                     "search to see them.")
    # WHEN every IPU's tree is asked for, still too many without the steps
    tree, found = page().render_tree("all", "", "a")
    # THEN whole levels are left out from the deepest up until the rest fits: the count is the most
    # levels' whose nodes (steps aside) fit
    shown = frame[~frame["parent"].isin(set(frame.loc[(frame["kind"] == "sequence") & (frame["op"] != ""), "node"]))]
    per_depth = shown["depth"].value_counts().sort_index().cumsum()
    deepest = int(per_depth[per_depth <= page().MAX_NODES].index.max())
    assert _nodes(tree) == int(per_depth[deepest]) <= page().MAX_NODES
    assert found == (f"Over {page().MAX_NODES:,} nodes: nodes deeper than level {deepest} are left out; "
                     "choose one IPU or search to see them.")
    # AND a search still reaches a step the cut left out: every match is shown with its ancestors
    step = on_0.loc[on_0["parent"].isin(ops)].iloc[0]
    tree, found = page().render_tree(0, step["name"].lower(), "a")
    assert int(step["node"]) in _node_ids(tree) and int(step["parent"]) in _node_ids(tree)
    assert "match" in found and "No node" not in found


def _node_ids(components) -> set[int]:
    ids_ = set()
    for c in components:
        ids_.add(int(getattr(c, "data-node")))
        if c.__class__.__name__ == "Details":
            ids_ |= _node_ids(c.children[1:])
    return ids_


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
