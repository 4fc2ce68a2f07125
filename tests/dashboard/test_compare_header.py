"""The dashboard's compare page names the run settings that differ between A and B (issue 11, item 5),
and gives identifiers no difference."""

from __future__ import annotations

import importlib

import pytest

from popvision_py.format import open_profile
from tests.dashboard.conftest import SAMPLES
from tests.dashboard.test_browser import errors, wait_for_figures
from tests.dashboard.test_callbacks import text

PIPELINED = SAMPLES / "mnist_pipelined" / "profile.pop"
INFERENCE = SAMPLES / "mnist_inference" / "profile.pop"  # `popvision run mnist --mode inference`


def expected_settings() -> list[tuple[str, str, str]]:
    """What --mode inference changes, as the page writes it: mnist's inference batch (8 x 100
    iterations), no gradient accumulation, no optimiser (nor its state's types). The values are checked
    against the manifests."""
    rows = [("mode", "training", "inference"), ("gradient_accumulation", "10", "1"), ("micro_batch_size", "40", "8"),
            ("device_iterations", "10", "100"), ("optimiser", "adamw", "–"), ("optimiser_state_type", "fp32", "–"),
            ("first_moment_type", "fp32", "–")]
    with open_profile(PIPELINED) as a, open_profile(INFERENCE) as b:
        for setting, va, vb in rows:
            assert (str(a.run[setting]), str(b.run[setting] or "–")) == (va, vb)
    return rows


def find(component, component_id: str):
    """The component with ``component_id`` inside a Dash component tree."""
    if isinstance(component, (list, tuple)):
        return next((f for f in (find(c, component_id) for c in component) if f is not None), None)
    if getattr(component, "id", None) == component_id:
        return component
    children = getattr(component, "children", None)
    return find(children, component_id) if isinstance(children, (list, tuple)) or hasattr(children, "children") \
        else None


def body_rows(table) -> list[list[str]]:
    """Each body row of an html.Table (thead, tbody) as its cells' text."""
    return [[text(cell) for cell in row.children] for row in table.children[1].children]


@pytest.fixture()
def inference_app():
    from dashboards.app import create_app

    return create_app([str(PIPELINED), str(INFERENCE)])


def test_compare_header_lists_the_settings_that_differ(inference_app):
    page = importlib.import_module("dashboards.pages.compare")
    header, _cards, _memory, _stages, _phases, tables = page.render("a")
    # THEN the header's settings table has one row per setting that differs, A's value then B's
    assert body_rows(find(header, "compare-configuration")) == [list(r) for r in expected_settings()]
    # AND which tile is the fullest is shown on both sides, with no difference and no change
    worst = [row for row in body_rows(find(tables, "compare-summary-table")) if row[0] == "worst tile"]
    assert len(worst) == 1 and worst[0][3:] == ["", ""] and worst[0][1] != worst[0][2]


def test_a_profile_against_itself_says_the_settings_are_the_same():
    from dashboards.app import create_app

    create_app([str(PIPELINED), str(PIPELINED)])
    header = importlib.import_module("dashboards.pages.compare").render("a")[0]
    assert "A and B have the same settings." in text(header)


@pytest.mark.browser
def test_compare_page_shows_the_settings_that_differ(dash_duo, inference_app):
    # GIVEN the dashboard on mnist trained (A) and mnist inference (B)
    dash_duo.start_server(inference_app)
    # WHEN the compare page is opened
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/compare")
    wait_for_figures(dash_duo, ["compare-memory"])
    dash_duo.wait_for_element("#compare-configuration", timeout=10)
    # THEN the settings that differ are listed under the profiles, A's value then B's, and nothing else
    lines = dash_duo.find_element("#compare-configuration").text.splitlines()
    assert lines == ["setting A B"] + [" ".join(r) for r in expected_settings()]
    assert errors(dash_duo) == []


def test_two_imported_traces_are_compared_in_a_ranks_words(tmp_path):
    from dashboards.app import create_app
    from tests.importer.test_import_memory_not_recorded import MIB
    from tests.importer.test_import_some_ranks import import_ranks

    # GIVEN ranks 5 and 6 of a job imported twice, rank 6 peaking at 9 MiB the second time (5 MiB the first)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = import_ranks(tmp_path / "a", [5, 6], 8, {}), import_ranks(tmp_path / "b", [5, 6], 8, {6: 9})
    create_app([str(a), str(b)])
    # WHEN the Compare page is drawn
    header, _, _, stages, _, tables = importlib.import_module("dashboards.pages.compare").render(None)
    shown = text(tables)
    # THEN its figures name the ranks as the traces do, the device's memory and the times in ns, and none of a tile
    # or an IPU: rank 6's peak went from 5 to 9 MiB, +80 %
    assert f"rank 6 total bytes {5 * MIB / MIB:.2f} MiB {9 * MIB / MIB:.2f} MiB +4.00 MiB 80.0 %" in shown
    assert "total ns" in shown and "device_bytes" in text(header)
    for ipu_word in ("ipu", "cycles", "tile", "flop"):
        assert ipu_word not in shown.lower(), ipu_word
    # AND the two data-parallel runs have no stages: one line says so, not an empty chart from -1 to 1
    said = " ".join(a.text for a in stages.layout.annotations).replace("<br>", " ")
    assert not stages.data and "ran no pipeline (data parallel" in said and said.count(" · ") == 2
    # AND neither has a bottleneck stage: no value in its row, not a stage numbered -1
    bottleneck = [row for row in body_rows(find(tables, "compare-stages-table")) if row[0] == "bottleneck stage"]
    assert bottleneck == [["bottleneck stage", "–", "–", "", ""]]
