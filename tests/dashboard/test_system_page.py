"""The System page: every host process of a run on one time axis.

Its callbacks as plain functions on a synthetic two-process timeline (a whole run in bins, a zoom in events, the
two time axes, the cards against the report); then in headless Chromium on a real poprun launch of two instances of
a PopDist script (examples/tutorial_mnist.py, recording into one folder): both processes' rows, the markers and
the samples/s lines drawn, the relative / absolute toggle, a zoom (a relayout) asking the server again; and the one
line the page shows for a profile without system timeline files.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dash.testing.wait import until

from dashboards import ids
from popvision_py.format import system as S
from tests import synthetic
from tests.dashboard.test_browser import choose, errors, wait_for_figures

T0 = 1_750_000_000_000_000_000  # ns since 1970
STEPS = 1000  # model calls per process in the synthetic timeline, one every millisecond


def page():
    return importlib.import_module("dashboards.pages.system")


def synthetic_process(folder: Path, instance: int, offset_ns: int) -> Path:
    """``STEPS`` steps of 1 ms: a wait for data of 0.2 ms holding its loading, then a model call of 0.7 ms holding
    two optimizer updates, and its samples/s; an epoch instant every 100 steps."""
    k = np.arange(STEPS, dtype=np.int64)
    base = T0 + offset_ns + k * 1_000_000
    spans = [("dataloader", "wait for data", base, base + 200_000),
             ("dataloader", "data loading", base + 10_000, base + 190_000),
             ("poptorch", "model call", base + 250_000, base + 950_000),
             ("poptorch", "optimizer update", base + 400_000, base + 450_000),
             ("poptorch", "optimizer update", base + 800_000, base + 850_000)]
    epochs = base[::100]
    parts = {"channel": [], "name": [], "kind": [], "start_ns": [], "end_ns": [], "value": []}
    for channel, name, start, end in spans + [("dataloader", "epoch", epochs, epochs),
                                              ("poptorch", "samples per second", base + 950_000, base + 950_000)]:
        kind = "instant" if name == "epoch" else "counter" if name.startswith("samples") else "span"
        parts["channel"] += [channel] * len(start)
        parts["name"] += [name] * len(start)
        parts["kind"] += [kind] * len(start)
        parts["start_ns"].append(start)
        parts["end_ns"].append(end)
        parts["value"].append(np.full(len(start), 32e9 / 700_000 if kind == "counter" else np.nan))
    n = len(parts["name"])
    process = f"instance-{instance}"
    return S.write_system(folder / f"{process}{S.SUFFIX}", {
        "process": np.full(n, process, object), "pid": np.full(n, 100 + instance),
        "thread": np.full(n, "MainThread", object), "channel": np.asarray(parts["channel"], object),
        "name": np.asarray(parts["name"], object),
        "kind": np.asarray(parts["kind"], object), "start_ns": np.concatenate(parts["start_ns"]),
        "end_ns": np.concatenate(parts["end_ns"]), "value": np.concatenate(parts["value"])},
        process, 100 + instance, instance)


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory) -> Path:
    """A profile in DIR/training/ and two processes' timelines in DIR, the second starting 0.3 ms later."""
    folder = tmp_path_factory.mktemp("system-page")
    profile = synthetic.write_pipeline_profile(folder / "training" / "profile.pop", [10, 10], stages=[1, 1],
                                               micro_batches=2, iterations=1, tiles_per_ipu=4, bytes_per_tile=1000)
    synthetic_process(folder, 0, 0)
    synthetic_process(folder, 1, 300_000)
    return profile


@pytest.fixture()
def system_app(synthetic_run: Path):
    from dashboards.app import create_app

    return create_app([str(synthetic_run)])


def test_the_whole_run_is_binned_and_a_zoom_shows_each_event(system_app):
    system = page()
    # GIVEN two processes of 1,000 steps of 6 events and 10 epochs (12,020 events): the whole run is drawn in bins
    fig, level, window = system.render_timeline("a", 0, "relative")
    assert level.startswith("level of detail: bins") and "12,020 events" in level
    labels = list(fig.layout.yaxis.categoryarray)
    assert labels == ["instance-1 · MainThread", "instance-0 · MainThread"]  # the first process at the top
    assert sum(len(t.x) for t in fig.data) <= 2 * 6 * system.MAX_BINS
    # WHEN the first 2.5 ms are dragged (relative seconds, on the lower panel's axis)
    fig, level, window = system.zoom_timeline({"xaxis2.range[0]": 0, "xaxis2.range[1]": 0.0025}, "a", "relative", 0)
    # THEN each event there is drawn: steps 0 to 2 of instance-0 (its third call from 2.25 ms, one of its updates);
    # of instance-1, 0.3 ms later, the waits and loading of its steps 0 to 2 but the calls of steps 0 and 1 only
    assert level.startswith("level of detail: events")
    assert window == [str(T0), str(T0 + 2_500_001)]  # strings: the browser's numbers are doubles
    bars = {t.name: len(t.x) for t in fig.data if t.type == "bar"}
    assert bars == {"wait for data": 6, "data loading": 6, "model call": 5, "optimizer update": 9}
    # each model call drawn where and as long as it ran: 0.25 ms after its step begins, for 0.7 ms
    calls = next(t for t in fig.data if t.name == "model call")
    assert sorted(np.round(np.asarray(calls.base, float), 7))[:2] == [0.00025, 0.00055]
    assert np.allclose(np.asarray(calls.x, float), 0.0007)
    # AND a double-click goes back to the whole run
    _, level, window = system.zoom_timeline({"xaxis.autorange": True}, "a", "relative", 0)
    assert level.startswith("level of detail: bins") and window[0] == str(T0)


def test_absolute_time_is_the_wall_clock(system_app):
    system = page()
    fig, _, window = system.render_timeline("a", 0, "absolute")
    assert fig.layout.xaxis.type == "date" and fig.layout.xaxis.range[0].startswith("2025-06-15 15:06:40")
    # a zoom on the date axis comes back as date strings (UTC)
    _, level, window = system.zoom_timeline({"xaxis.range[0]": "2025-06-15 15:06:40.0005",
                                             "xaxis.range[1]": "2025-06-15 15:06:40.001"}, "a", "absolute", 0)
    assert window == [str(T0 + 500_000), str(T0 + 1_000_001)] and level.startswith("level of detail: events")
    # a range at the run's ends, as plotly rounds dates (to 0.1 ms), is the whole run: the last event is kept
    run_end = T0 + 300_000 + (STEPS - 1) * 1_000_000 + 950_000 + 1
    _, level, whole = system.zoom_timeline({"xaxis.range[0]": "2025-06-15 15:06:40",
                                            "xaxis.range[1]": "2025-06-15 15:06:41.0002"}, "a", "absolute", 0)
    assert whole == [str(T0), str(run_end)] and "12,020 events" in level
    # AND the toggle back to relative time keeps that window
    _, level, window = system.zoom_timeline({"xaxis.range[0]": "2025-06-15 15:06:40.0005",
                                             "xaxis.range[1]": "2025-06-15 15:06:40.001"}, "a", "absolute", 0)
    fig, kept_level, kept = system.switch_time("relative", "a", 0, window)
    assert kept == window and kept_level == level and list(fig.layout.xaxis.range) == [0.0005, 0.001000001]


def test_the_cards_and_table_are_the_reports(system_app, synthetic_run):
    import popvision_py as pv

    note, cards, table = page().render_figures("a")
    assert note is None
    with pv.open(synthetic_run) as report:
        processes = report.system.processes()
    # each process: 1,000 ms less the 0.05 ms after its last call's end, 1,000 calls, 32 samples in 0.7 ms
    assert list(processes["model_calls"]) == [STEPS, STEPS]
    assert processes["wall_ms"].tolist() == pytest.approx([STEPS - 0.05] * 2)
    assert processes["samples_per_second"].tolist() == pytest.approx([32 / 0.0007] * 2)
    text = json.dumps(cards.to_plotly_json(), default=str)
    assert "instance-0" in text and "1,000 model calls" in text and "45,714 samples/s (median)" in text
    assert "waits for data 20.0 %" in text
    assert "optimizer update" in json.dumps(table.to_plotly_json(), default=str)


def test_the_index_takes_the_events_and_the_tables_after_it_are_the_events_own(system_app, synthetic_run):
    from dashboards import data
    from popvision_py.analysis.host import system_figures

    system, report = page(), data.report("a")
    # GIVEN the events read, as the dashboard's check of the files leaves them
    events = report.system.events()
    expected = system_figures.of_events(events, report.imported)
    del events
    # WHEN the page draws the whole run (its index made)
    system.render_timeline("a", 0, "relative")
    # THEN the index holds the 12,020 events and the report no longer does; the rows' words are kept apart
    assert len(report.system.index()) == 12_020 and not report.holds(("SystemReport", "events"))
    assert report.system.words().processes == ("instance-0", "instance-1") and len(report.system.words()) == 0
    # AND the cards and the events table made after it (read from the files) are those of the events held
    note, cards, table = system.render_figures("a")
    assert note is None and "1,000 model calls" in json.dumps(cards.to_plotly_json(), default=str)
    for name in ("processes", "by_name", "counters"):
        got, want = getattr(report.system, name)(), expected[name].frame()
        assert got.equals(want), name
    # AND a zoom is drawn from the index alone: the events are not read again
    system.zoom_timeline({"xaxis2.range[0]": 0, "xaxis2.range[1]": 0.0025}, "a", "relative", 0)
    assert not report.holds(("SystemReport", "events"))


def test_a_profile_without_system_files_says_how_to_record_them(app):
    system = page()
    note, cards, table = system.render_figures("a")
    assert note.startswith("No system timeline beside ") and "PVTI_OPTIONS='{\"enable\":\"true\"" in note
    fig, level, window = system.render_timeline("a", 0, "relative")
    assert level == "" and window is None


# -- in Chromium ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_instances(tmp_path_factory) -> Path:
    """A real poprun launch of two instances (examples/tutorial_mnist.py, 2 replicas) under PVTI_OPTIONS and
    POPLAR_ENGINE_OPTIONS into one folder DIR: instance 0's training profile (DIR/instance-0/training/profile.pop),
    both instances' timelines in DIR."""
    pytest.importorskip("torch")
    from tests.popdist.conftest import EXAMPLE, subprocess_env

    folder = tmp_path_factory.mktemp("poprun")
    env = subprocess_env(PVTI_OPTIONS=json.dumps({"enable": "true", "directory": str(folder)}),
                         POPLAR_ENGINE_OPTIONS=json.dumps({"autoReport.all": "true",
                                                           "autoReport.directory": str(folder)}))
    done = subprocess.run([sys.executable, "-m", "popdist._poprun", "--num-instances", "2", "--num-replicas", "2",
                           sys.executable, str(EXAMPLE)], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(p.name for p in folder.glob("*.pvti.parquet")) == ["instance-0.pvti.parquet",
                                                                     "instance-1.pvti.parquet"]
    return folder / "instance-0" / "training" / "profile.pop"


def plotly_state(dash_duo, expression: str):
    return dash_duo.driver.execute_script(
        f"const gd = document.querySelector('#{ids.SYSTEM_TIMELINE} .js-plotly-plot'); return {expression};")


@pytest.mark.browser
@pytest.mark.slow
def test_two_processes_on_one_axis_in_the_browser(dash_duo, two_instances, monkeypatch):
    import popvision_py as pv
    from dashboards.app import create_app

    with pv.open(two_instances) as report:
        processes, counters = report.system.processes(), report.system.counters()
    assert list(processes["process"]) == ["instance-0", "instance-1"]
    app = create_app([str(two_instances)])
    monkeypatch.setattr(page(), "MAX_EVENTS", 20)  # the launch's events: the whole run in bins
    dash_duo.start_server(app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/system")
    wait_for_figures(dash_duo, [ids.SYSTEM_TIMELINE])
    dash_duo.wait_for_contains_text(f"#{ids.SYSTEM_LEVEL}", "level of detail: bins", timeout=15)
    assert f"{processes['events'].sum():,} events" in dash_duo.find_element(f"#{ids.SYSTEM_LEVEL}").text
    # THEN both processes have their row, each with its card
    rows = [t.text for t in dash_duo.find_elements(f"#{ids.SYSTEM_TIMELINE} .ytick text")]
    assert rows == ["instance-1 · MainThread", "instance-0 · MainThread"]
    calls = f"{processes['model_calls'][0]:,} model calls"
    dash_duo.wait_for_contains_text(f"#{ids.SYSTEM_FIGURES}", calls, timeout=10)
    cards = dash_duo.find_element(f"#{ids.SYSTEM_FIGURES}").text.lower()  # card labels are shown in capitals
    assert "instance-0" in cards and "instance-1" in cards
    assert f"{processes['model_calls'][1]:,} model calls" in cards
    # AND the spans are bars, the instants markers on the rows, the samples/s a line in the panel below
    assert dash_duo.find_elements(f"#{ids.SYSTEM_TIMELINE} .subplot.xy .barlayer .point")
    assert len(dash_duo.find_elements(f"#{ids.SYSTEM_TIMELINE} .subplot.xy .scatterlayer .point")) >= 4
    lines = dash_duo.find_elements(f"#{ids.SYSTEM_TIMELINE} .subplot.x2y2 .scatterlayer .js-line")
    assert len(lines) == len(counters) == 4  # one per process and counter: training's and inference's samples/s
    assert plotly_state(dash_duo, "gd._fullLayout.xaxis.type") == "linear"
    # WHEN absolute time is chosen THEN the axis is the wall clock
    choose(dash_duo, ids.SYSTEM_TIME, "absolute")
    until(lambda: plotly_state(dash_duo, "gd._fullLayout.xaxis.type") == "date", timeout=10)
    dash_duo.wait_for_contains_text(f"#{ids.SYSTEM_TIMELINE} .x2tick", ":", timeout=10)  # the ticks are clock times
    choose(dash_duo, ids.SYSTEM_TIME, "relative")
    until(lambda: plotly_state(dash_duo, "gd._fullLayout.xaxis.type") == "linear", timeout=10)
    # AND WHEN the first millisecond is zoomed into (a relayout, as a drag on the plot sends), the server draws
    # each event there
    whole = dash_duo.find_element(f"#{ids.SYSTEM_LEVEL}").text
    plotly_state(dash_duo, "Plotly.relayout(gd, {'xaxis.range[0]': 0, 'xaxis.range[1]': 0.001}) && true")
    dash_duo.wait_for_contains_text(f"#{ids.SYSTEM_LEVEL}", "level of detail: events", timeout=15)
    assert "0.000000 s to 0.001000 s from the first event" in dash_duo.find_element(f"#{ids.SYSTEM_LEVEL}").text
    zoomed = dash_duo.find_element(f"#{ids.SYSTEM_LEVEL}").text
    assert zoomed != whole
    # AND the other time axis keeps the window shown
    choose(dash_duo, ids.SYSTEM_TIME, "absolute")
    until(lambda: plotly_state(dash_duo, "gd._fullLayout.xaxis.type") == "date", timeout=10)
    assert dash_duo.find_element(f"#{ids.SYSTEM_LEVEL}").text == zoomed
    # AND "Whole run" goes back
    dash_duo.find_element(f"#{ids.SYSTEM_RESET}").click()
    dash_duo.wait_for_contains_text(f"#{ids.SYSTEM_LEVEL}", "level of detail: bins", timeout=10)
    assert errors(dash_duo) == []


@pytest.mark.browser
def test_the_page_says_how_to_record_without_files(dash_duo, app):
    dash_duo.start_server(app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/system")
    dash_duo.wait_for_contains_text(f"#{ids.SYSTEM_NOTE}", "No system timeline beside", timeout=15)
    assert "PVTI_OPTIONS" in dash_duo.find_element(f"#{ids.SYSTEM_NOTE}").text
    assert errors(dash_duo) == []
