"""The Operations page: its callbacks as plain functions, then in headless Chromium (sort, filter, click a row).

The marks on the trace are recomputed here from the raw trace: the rows of the middle iteration of the first run
whose program step belongs to the op clicked.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from dash.testing.wait import until

import popvision_py as pv
from dashboards import ids
from tests.dashboard.test_browser import choose, errors, wait_for_figures

SAMPLES = Path(__file__).resolve().parents[2] / "sample_profiles"
MNIST = SAMPLES / "mnist_pipelined" / "profile.pop"


def page():
    return importlib.import_module("dashboards.pages.operations")


def expected_marks(path: Path, op_id: int, pass_: str) -> int:
    """Rows of the middle iteration of the first run that execute a step of (op_id, pass), from the raw tables."""
    with pv.open(path) as report:
        trace, programs = report.profile.read_pandas("trace"), report.profile.read_pandas("programs")
    first = trace["run"].min()
    middle = (trace[trace["run"] == first]["iteration"].max() + 1) // 2
    rows = trace[(trace["run"] == first) & (trace["iteration"] == middle)]
    steps = programs[(programs["op_id"] == op_id) & (programs["pass"].astype(str) == pass_)][["ipu", "step"]]
    return len(rows.merge(steps, on=["ipu", "step"]))


@pytest.fixture()
def mnist_app():
    from dashboards.app import create_app

    return create_app([str(MNIST)])


def test_callbacks_give_the_reports_rows_and_mark_the_ops_executions(mnist_app):
    # GIVEN the dashboard on the mnist pipelined sample
    with pv.open(MNIST) as report:
        by_op = report.operations.by_op()
    # WHEN the table is rendered one row per op, and a row (the third) is clicked
    _, _, _, columns, rows, cell, sort_by, query, _, note = page().render_table("a", "op")
    said, fig, variables = page().select("a", "op", {"row": 0, "column": 0, "row_id": 2, "column_id": "name"})
    # THEN the rows are the report's, the costliest selected first, and the marks are that op's executions
    assert [r["total_cycles"] for r in rows] == by_op["total_cycles"].tolist()
    assert cell["row_id"] == 0 and {"total_cycles", "flops_per_s", "variable_bytes"} <= {c["id"] for c in columns}
    assert sort_by == [] and query == "" and note.endswith("the selection's executions.")
    chosen = by_op.iloc[2]
    marks = [t for t in fig["data"] if str(t.get("name", "")).startswith(str(chosen["name"]))]
    assert len(marks) == 1 and len(marks[0]["x"]) == expected_marks(MNIST, int(chosen["op_id"]), str(chosen["pass"]))
    assert said.startswith(f"{chosen['name']} ({chosen['pass']}, IPU {chosen['ipu']})")
    assert f"{len(marks[0]['x']):,} executions" in said
    # AND its variables are listed
    with pv.open(MNIST) as report:
        owned = report.profile.read_pandas("variables").query(f"op_id == {int(chosen['op_id'])}")
    listed = str(variables)
    assert "operations-variables-table" in listed and all(n in listed for n in owned["name"].astype(str))


def test_layers_and_the_imported_trace(mnist_app):
    rows = page().render_table("a", "layer")[4]
    with pv.open(MNIST) as report:
        assert [r["layer"] for r in rows] == report.operations.by_layer()["layer"].tolist()
    from dashboards.app import create_app

    create_app([str(SAMPLES / "pytorch_gpipe" / "profile.pop")])
    # an imported trace has no blocks: the choice is disabled and a stale "block" falls back to ops
    _, _, options, _, rows, *_ = page().render_table("a", "block")
    assert [o["disabled"] for o in options] == [False, True, False] and "pass" in rows[0]
    said, _, variables = page().select("a", "op", {"row_id": 0})
    # its rows are pieces of the ranks' time lines, not calls: named stretches
    assert "stretches in this iteration" in said and "not named tensors" in str(variables)



def test_an_import_of_rank_5_alone_names_rank_5_in_the_table(tmp_path):
    from dashboards.app import create_app
    from tests.importer.test_import_some_ranks import import_ranks

    # GIVEN the trace of rank 5 of a job of 8 ranks, alone (the profile's IPU 0)
    create_app([str(import_ranks(tmp_path, [5], 8, {}))])
    # WHEN the Operations table is drawn, one row per op and per layer
    for by in ("op", "layer"):
        _, _, _, columns, rows, *_ = page().render_table("a", by)
        # THEN its rank column says 5 on every row, as the traces and the report name it, never 0
        assert {c["name"] for c in columns if c["id"] == "ipu"} == {"rank"}
        assert {c["name"] for c in columns if c["id"] == "executions"} <= {"stretches"}
        assert rows and {r["ipu"] for r in rows} == {5}, by
    # AND a row clicked is marked on rank 5's row of the time line
    said = page().select("a", "op", {"row_id": 0})[0]
    assert "Rank 5)" in said and page().render_table("a", "op")[-1].endswith("the selection's stretches.")


@pytest.mark.browser
def test_the_page_sorts_filters_and_marks_a_clicked_op(dash_duo, mnist_app):
    # GIVEN the Operations page of the mnist pipelined sample in a browser
    dash_duo.start_server(mnist_app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/operations")
    wait_for_figures(dash_duo, [ids.OPERATIONS_TRACE])
    dash_duo.wait_for_element(".cards .card", timeout=10)
    with pv.open(MNIST) as report:
        by_op = report.operations.by_op()

    def column(name: str) -> list[str]:
        # read in one script: the table may re-render between a lookup and a read
        return dash_duo.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText.trim())",
            f"#{ids.OPERATIONS_TABLE} td.dash-cell[data-dash-column='{name}']")

    until(lambda: column("name")[:1] == [by_op["name"].iloc[0]], timeout=10)
    # WHEN the FLOPs column is sorted (ascending: a click on its sort arrow)
    header = f"#{ids.OPERATIONS_TABLE} th.dash-header[data-dash-column='flops']"
    dash_duo.find_element(f"{header} .column-header--sort").click()
    # THEN the rows come in FLOPs order
    until(lambda: column("name")[0] == by_op.sort_values("flops", kind="stable")["name"].iloc[0], timeout=10)
    # WHEN the name column is filtered to layer2
    box = dash_duo.find_element(f"#{ids.OPERATIONS_TABLE} th.dash-filter[data-dash-column='name'] input")
    box.send_keys("layer2/conv\n")
    until(lambda: set(column("name")) == {"layer2/conv"}, timeout=10)
    # AND a row is clicked
    dash_duo.find_elements(f"#{ids.OPERATIONS_TABLE} td.dash-cell[data-dash-column='name']")[0].click()
    # THEN its executions are marked on the trace and its variables listed
    until(lambda: dash_duo.find_element(f"#{ids.OPERATIONS_SELECTED}").text.startswith("layer2/conv ("), timeout=10)
    until(lambda: "layer2/conv/weight" in dash_duo.find_element("#operations-variables-table").text, timeout=10)
    def marks() -> list:  # plotly's decoded data (a figure's arrays arrive typed and encoded)
        return dash_duo.driver.execute_script(
            f"return document.getElementById('{ids.OPERATIONS_TRACE}').querySelector('.js-plotly-plot')._fullData"
            ".filter(t => (t.name || '').startsWith('layer2/conv')).map(t => t.x.length)")

    passes = set(by_op[by_op["name"] == "layer2/conv"]["pass"])
    until(lambda: len(marks()) == 1 and marks()[0] in {expected_marks(MNIST, 3, p) for p in passes}, timeout=10)
    # AND one row per layer is a click away: costliest first again, unfiltered
    choose(dash_duo, ids.OPERATIONS_GROUP, "layer")
    with pv.open(MNIST) as report:
        costliest_layer = report.operations.by_layer()["layer"].iloc[0]
    until(lambda: column("layer")[:1] == [costliest_layer], timeout=10)
    assert errors(dash_duo) == []
