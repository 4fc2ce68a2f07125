"""The What-if page and the Summary's "Verify" buttons as plain functions (no browser), on a real tune
result (tests/tunefiles.py: mnist candidates emulated for real) and a real mnist profile.

Figures hold the file's numbers; a clicked point names its row; "Emulate and compare" runs the
candidate's request and compares it with the served profile; a bad tune file stops `popvision
dashboard` in one sentence before any server starts.
"""

from __future__ import annotations

import importlib
import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from popvision_py.cli import main
from tests.dashboard.test_callbacks import text
from tests.engine.helpers import run_cli
from tests.tunefiles import write_mnist_tune


def page(name: str):
    return importlib.import_module(f"dashboards.pages.{name}")


def by_name(figure) -> dict:
    return {trace.name: trace for trace in figure.data}


def test_the_scatter_holds_each_emulated_candidate_at_its_figures(made, whatif_app):
    # GIVEN the tune file's rows, read as plain Parquet
    rows = pq.read_table(made["tune"]).to_pandas()
    # WHEN the page draws it
    _cards, scatter, pareto = page("whatif").render("a")
    traces = by_name(scatter)
    # THEN the candidates that fit and those that do not are two traces (circles, crosses), each point
    # at the candidate's worst tile % and throughput, naming its row
    fits, oom = rows[rows["status"] == "ok"], rows[rows["status"] == "oom"]
    assert set(traces) == {"fits", "does not fit", "starting configuration"}
    assert traces["fits"].marker.symbol == "circle" and traces["does not fit"].marker.symbol == "x"
    assert list(traces["fits"].customdata) == list(fits.index)
    assert np.allclose(traces["fits"].x, fits["worst_tile_pct"]) and np.allclose(traces["fits"].y,
                                                                                 fits["samples_per_second"])
    assert list(traces["does not fit"].customdata) == list(oom.index)
    assert traces["does not fit"].x[0] > 100  # over a tile's memory
    # AND the rejected candidate (never emulated) is not drawn; the start is starred where it is
    drawn = {row for trace in scatter.data for row in trace.customdata}
    assert len(rows[rows["status"] == "rejected"]) == 1 and not drawn & set(rows.index[rows["status"] == "rejected"])
    start = rows[rows["is_start"]].iloc[0]
    assert traces["starting configuration"].marker.symbol == "star"
    assert list(traces["starting configuration"].customdata) == [start.name]
    assert traces["starting configuration"].x[0] == pytest.approx(start["worst_tile_pct"])
    # AND the Pareto figure's front is the file's pareto rows by IPUs: each faster than any fitting
    # candidate on as many IPUs or fewer
    front = by_name(pareto)["Pareto front"]
    want = rows[rows["pareto"]].sort_values("ipus")
    assert list(front.x) == want["ipus"].tolist() and np.allclose(front.y, want["samples_per_second"])
    fit = rows[rows["fits"]]
    for ipus, speed in zip(front.x, front.y):
        assert speed == fit[fit["ipus"] <= ipus]["samples_per_second"].max()


def test_the_cards_count_the_candidates(made, whatif_app):
    cards, _scatter, _pareto = page("whatif").render("a")
    shown = text(cards)
    # 6 candidates: 4 fit, 1 does not, 1 rejected; the best (2 replicas) at its throughput
    rows = pq.read_table(made["tune"]).to_pandas()
    best = rows[rows["rank"] == 1].iloc[0]
    assert "Candidates 6 5 emulated; 1 rejected, 0 failed" in shown
    assert "Fit 4 1 emulated over memory" in shown
    assert f"Best throughput {round(best['samples_per_second']):,} /s {int(best['ipus'])} IPUs" in shown


def test_a_clicked_point_shows_its_command_and_a_bad_point_is_refused(made, whatif_app):
    whatif = page("whatif")
    rows = pq.read_table(made["tune"]).to_pandas()
    # WHEN the point of row 1 (gradient accumulation 20) is clicked
    view, _class, stored, disabled, _comparison = whatif.chosen({"points": [{"customdata": 1}]})
    # THEN its command is shown whole, ready to copy, and "Emulate and compare" is enabled for that row
    assert rows.loc[1, "command"] in "".join(text(view).split("  "))
    from dash import dcc
    clipboard = [c for c in _walk(view) if isinstance(c, dcc.Clipboard)]
    assert [c.content for c in clipboard] == [rows.loc[1, "command"]]
    assert stored == 1 and disabled is False
    # AND a row the file does not have, or not a row number, is refused
    for bad in (99, -1, "1", True):
        with pytest.raises(ValueError):
            whatif.chosen({"points": [{"customdata": bad}]})


def _walk(component):
    yield component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, (list, tuple)) else [children] if children is not None else []:
        yield from _walk(child)


def test_emulate_and_compare_runs_the_candidate_and_compares_it(made, whatif_app, tmp_path):
    whatif = page("whatif")
    rows = pq.read_table(made["tune"]).to_pandas()
    # WHEN row 3 (two replicas) is emulated and compared with the served profile (mnist's defaults)
    view = whatif.emulate_and_compare(1, 3, "a")
    shown = text(view)
    # THEN its profile is in the dashboard's folder, and the comparison shows the replicas differ
    written = list((tmp_path / "emulated").glob("candidate-3-*/profile.pop"))
    assert len(written) == 1 and str(written[0]) in shown
    assert "replication factor" in shown or "replication_factor" in shown
    # AND B's throughput is the tune file's figure for that candidate
    import popvision_py as pv
    with pv.open(written[0]) as r:
        assert r.summary.figures().throughput_samples_per_s == pytest.approx(rows.loc[3, "samples_per_second"])
        candidate = r.summary.figures()
    # AND the key figures table shows A's and B's throughput and replicas as the two profiles give them
    from dashboards import components as c
    with pv.open(made["profile"]) as r:
        served = r.summary.figures()
    (table,) = [t for t in _walk(view) if getattr(t, "id", None) == "whatif-key-figures"]
    key = text(table)
    assert f"throughput samples per s {c.fmt_number(served.throughput_samples_per_s)} " \
           f"{c.fmt_number(candidate.throughput_samples_per_s)}" in key
    assert f"replication factor {served.replication_factor} {candidate.replication_factor} " in key
    assert candidate.replication_factor == 2 * served.replication_factor
    # AND a candidate the planner refuses is one sentence, not an error
    refused = text(whatif.emulate_and_compare(1, 5, "a"))
    assert refused.startswith("This candidate could not be emulated: ")
    # AND a stored row the file does not have, or not a row number, is refused before any run
    for bad in (99, -1, "1", True, None):
        with pytest.raises(ValueError):
            whatif.emulate_and_compare(1, bad, "a")


def test_the_summary_verify_button_measures_the_fix(made, whatif_app):
    summary = page("summary")
    import popvision_py as pv
    with pv.open(made["profile"]) as r:
        insights = r.summary.insights()
    # GIVEN the first finding with a command
    row = next(k for k, command in enumerate(insights["command"]) if command)
    # WHEN its Verify button is pressed
    view = text(summary.verified("a", row))
    # THEN the fix was run and its measured throughput is what `popvision run` prints for its command
    words = insights["command"][row].split()
    k = words.index("--profile-dir")
    out = run_cli(*words[1:k], "-q", "--json")
    measured = json.loads(out.output)
    from dashboards import components as c
    assert c.fmt_per_second(measured["samples_per_second"]) in view
    assert view.startswith(("Held:", "Did not hold:"))
    # AND a finding without a fix is refused
    with pytest.raises(LookupError):
        summary.verified("a", len(insights) + 3)


def test_a_verify_run_that_fails_is_its_sentence_not_an_error(made, tmp_path):
    from dashboards.app import create_app
    from engine import rules
    from popvision_py.errors import ConfigError

    def refuse(_fields, _profile):
        raise ConfigError("No IPU-POD holds 9 IPUs.")

    # GIVEN a dashboard whose emulator refuses every run
    create_app([str(made["profile"])], runner=refuse, emulated_dir=str(tmp_path / "emulated"), planner=rules)
    import popvision_py as pv
    with pv.open(made["profile"]) as r:
        row = next(k for k, command in enumerate(r.summary.insights()["command"]) if command)
    # WHEN a fix's Verify button is pressed
    view = text(page("summary").verified("a", row))
    # THEN the finding shows the run's sentence, no figures and no profile
    assert view == "The run failed: No IPU-POD holds 9 IPUs."
    assert not list((tmp_path / "emulated").glob("*/profile.pop"))


def test_a_bad_tune_file_stops_the_dashboard_before_it_serves(made, tmp_path):
    not_tune = tmp_path / "plain.parquet"
    pd.DataFrame({"x": [1]}).to_parquet(not_tune)
    for path, said in ((tmp_path / "missing.parquet", "does not exist"), (not_tune, "not a tune result")):
        result = CliRunner().invoke(main, ["dashboard", str(made["profile"]), "--tune", str(path), "--port", "1"])
        assert result.exit_code == 2
        assert said in result.output and "Traceback" not in result.output
        assert "popvision dashboard on" not in result.output


def test_the_new_callbacks_keep_the_servers_guards(made, whatif_app):
    from dashboards import ids

    http = whatif_app.server.test_client()
    assert http.get("/whatif").status_code == 200  # Dash gathers the pages' callbacks on the first request
    # GIVEN the "Emulate and compare" callback, as the page sends it
    (output,) = [k for k in whatif_app.callback_map if k.startswith(f"{ids.WHATIF_COMPARISON}.children@")]

    def emulate(row) -> int:
        body = {"output": output, "outputs": {"id": ids.WHATIF_COMPARISON, "property": "children"},
                "inputs": [{"id": ids.WHATIF_EMULATE, "property": "n_clicks", "value": 1}],
                "state": [{"id": ids.WHATIF_CANDIDATE, "property": "data", "value": row},
                          {"id": ids.PROFILE, "property": "value", "value": "a"}],
                "changedPropIds": [f"{ids.WHATIF_EMULATE}.n_clicks"]}
        return http.post("/_dash-update-component", json=body).status_code

    # WHEN a request names a row the tune result lacks, or a path, THEN it is refused with 400
    assert emulate(99) == 400
    assert emulate("/etc/passwd") == 400
    # AND a malformed body is refused before the callback runs, and a foreign Host with 403
    assert http.post("/_dash-update-component", json={"output": output}).status_code == 400
    assert http.get("/whatif", headers={"Host": "evil.example"}).status_code == 403
    # AND the page's own request still works (the rejected candidate: one sentence, 200)
    assert emulate(5) == 200


def test_the_best_candidate_is_compared_through_the_tune_results_own_profile(tmp_path):
    from dashboards.app import create_app
    from popvision_py.emulation import run_fields

    # GIVEN a tune result whose metadata names the best candidate's profile (2 replicas), written beside it
    result = run_cli("run", "mnist", "--replicas", "2", "--profile", "--profile-dir", str(tmp_path / "best"), "-q",
                     "--input", "synthetic")
    assert result.exit_code == 0, result.output
    rows = write_mnist_tune(tmp_path / "tune.parquet", {"best_profile": "best"})
    best = int(rows.index[rows["rank"] == 1][0])
    app = create_app([str(tmp_path / "best" / "profile.pop")], tune=str(tmp_path / "tune.parquet"), runner=run_fields,
                     emulated_dir=str(tmp_path / "emulated"))
    assert app is not None
    # WHEN the best candidate is emulated and compared
    shown = text(page("whatif").emulate_and_compare(1, best, "a"))
    # THEN the tune result's profile is used, nothing is emulated, and (it is the served run) nothing differs
    assert str(tmp_path / "best" / "profile.pop") in shown
    assert not (tmp_path / "emulated").exists()
    assert "The candidate has the current profile's settings." in shown


def test_popvision_dashboard_with_tune_serves_the_whatif_page(made):
    from tests.dashboard.test_security import _answers, _free_port, _serve

    # GIVEN `popvision dashboard SAMPLE --tune tune.parquet` started for real
    port = _free_port()
    server, said = _serve("--port", str(port), "--tune", str(made["tune"]))
    try:
        assert f"http://127.0.0.1:{port}/" in said
        assert _answers(f"http://127.0.0.1:{port}/whatif")
        # THEN the navigation it serves links the What-if page
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_dash-layout", timeout=10) as response:
            assert "What-if" in response.read().decode()
    finally:
        server.terminate()
        server.wait(timeout=30)
