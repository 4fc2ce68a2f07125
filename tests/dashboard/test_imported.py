"""The dashboard on a profile imported from real PyTorch profiler traces (``popvision import``): every page
draws in a real headless Chromium with no console error, speaks of ranks and time, and says in one line what
has no meaning for a trace (a rank's tiles, a split of a stage's layers).

The traces are recorded once per session: a real GPipe run over four gloo ranks on the CPU
(``tests/traces/record.py``, about 12 s), stage 2 the heaviest. Profile A is its import; profile B the same
traces imported with the device's memory given, so that the Compare page has two imported profiles and
the memory views a capacity to show.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from dashboards import ids
from popvision_py.analysis.imported import ranks as imported
from tests.dashboard.test_browser import errors, wait_for_figures

DEVICE_MEMORY = 64 * 2**20  # profile B's device memory
PAGES = {
    "/": [ids.SUMMARY_TIME, ids.SUMMARY_MEMORY],
    "/memory": [ids.MEMORY_CATEGORIES],
    "/liveness": [ids.LIVENESS_PLOT],
    "/trace": [ids.TRACE_TIMELINE],
    "/operations": [ids.OPERATIONS_TRACE],
    "/stages": [ids.STAGES_GANTT, ids.STAGES_IMBALANCE, ids.STAGES_SUMMARY],
    "/exchange": [ids.EXCHANGE_PHASES, ids.EXCHANGE_COMMUNICATION, ids.EXCHANGE_MATRIX, ids.EXCHANGE_KINDS],
    "/programs": [],  # one line: an imported trace has no compiled program
    "/compare": [ids.COMPARE_MEMORY, ids.COMPARE_STAGES, ids.COMPARE_PHASES],
}


@pytest.fixture(scope="session")
def imported_profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A real GPipe run's traces (4 ranks, 4 micro-batches, 2 profiled steps), imported twice: without and
    with the device's memory."""
    pytest.importorskip("torch")
    from popvision_py.importer import find_traces, import_traces
    from tests.traces.record import record

    folder = tmp_path_factory.mktemp("imported")
    record("gpipe", folder / "traces", micro_batches=4, steps=2)
    traces = find_traces([str(folder / "traces")])
    import_traces(traces, folder / "a" / "profile.pop")
    import_traces(traces, folder / "b" / "profile.pop", device_memory=DEVICE_MEMORY)
    return {"a": folder / "a" / "profile.pop", "b": folder / "b" / "profile.pop"}


def refuse_to_emulate(request: dict, path: Path) -> None:
    raise AssertionError("an imported profile's finding has no command: nothing to verify")


@pytest.fixture()
def imported_app(imported_profiles: dict[str, Path]):
    """The dashboard on both imported profiles, with a runner, as `popvision dashboard` starts it."""
    from dashboards.app import create_app

    return create_app([str(imported_profiles["a"]), str(imported_profiles["b"])], runner=refuse_to_emulate)


@pytest.mark.browser
@pytest.mark.slow  # about 15 s: seven pages in Chromium
def test_every_page_of_an_imported_trace_draws_without_console_errors(dash_duo, imported_app):
    # GIVEN the dashboard on two profiles imported from PyTorch traces
    dash_duo.start_server(imported_app)
    for path, graphs in PAGES.items():
        # WHEN each page is opened
        dash_duo.wait_for_page(url=f"{dash_duo.server_url}{path}")
        # THEN its figures are drawn and the console holds no error
        wait_for_figures(dash_duo, graphs)
        if path not in ("/liveness", "/compare", "/programs"):
            dash_duo.wait_for_element(".cards .card", timeout=10)
        if path == "/programs":  # its one line instead of the tree, once the page knows the profile
            dash_duo.wait_for_contains_text(f"#{ids.PROGRAMS_NOTE}", "no compiled program", timeout=10)
            dash_duo.wait_for_contains_text(".page-description", "PyTorch launches kernels", timeout=10)
        assert errors(dash_duo) == [], path
        # AND no page calls a rank an IPU in its description
        if path != "/compare":
            assert "IPU" not in dash_duo.find_element(".page-description").text, path
    # AND the What-if page (no tune result) re-times the imported pipeline, without an error
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/whatif")
    dash_duo.wait_for_contains_text(f"#{ids.WHATIF_HEADER}", "GPipe", timeout=15)
    wait_for_figures(dash_duo, [ids.WHATIF_SCATTER, ids.WHATIF_PARETO])
    assert "re-timed from its own measured costs" in dash_duo.find_element(f"#{ids.WHATIF_DESCRIPTION}").text
    assert errors(dash_duo) == []
    links = [link.text.split("\n")[-1] for link in dash_duo.find_elements(".nav-link")]
    assert links == ["Summary", "Memory", "Liveness", "Execution trace", "Operations", "Stages", "Exchange",
                     "Program tree", "System",
                     "Compare", "What-if"]
    # AND the System page shows the ranks' CPU timelines the import wrote beside the profile, a row per rank
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/system")
    wait_for_figures(dash_duo, [ids.SYSTEM_TIMELINE])
    rows = [t.text.split(" · ")[0] for t in dash_duo.find_elements(f"#{ids.SYSTEM_TIMELINE} .ytick text")]
    assert rows == ["rank-3", "rank-2", "rank-1", "rank-0"]
    assert "IPU" not in dash_duo.find_element(".page-description").text
    assert errors(dash_duo) == []


@pytest.mark.browser
def test_the_summary_names_the_bottleneck_stage_and_where_the_profile_came_from(dash_duo, imported_app):
    dash_duo.start_server(imported_app)
    # WHEN the summary of the imported GPipe run is shown
    dash_duo.wait_for_element(".insight", timeout=15)
    # THEN its findings are PyTorch's: the heavy stage 2, on rank 2, is the bottleneck; the bubble against GPipe's
    dash_duo.wait_for_contains_text(f"#{ids.SUMMARY_INSIGHTS}", "stage 2 (rank 2) is the bottleneck", timeout=10)
    insights = dash_duo.find_element(f"#{ids.SUMMARY_INSIGHTS}").text
    assert "ideal for GPipe with 4 ranks" in insights
    # AND no fix has a command, so none has a "Verify" button (the app has a runner)
    assert dash_duo.find_elements(".verify-button") == []
    assert dash_duo.find_elements(".insight-command") == []
    # AND the source panel says where it came from: the profiler, the schedule, the ranks, what the traces lack
    source = dash_duo.find_element(f"#{ids.SUMMARY_SOURCE}").text
    assert "pytorch-profiler" in source and "GPipe" in source and "ranks 0, 1, 2, 3 of world size 4" in source
    assert "the trace does not record the batch size" in source
    # AND the cards speak of ranks and time, with no FLOP utilisation or tile
    cards = dash_duo.find_element(f"#{ids.SUMMARY_FIGURES}").text
    assert "RANKS" in cards.upper() and "PEAK MEMORY" in cards.upper() and "Rank 2" in cards
    assert "FLOP" not in cards.upper() and "tile" not in cards
    assert dash_duo.find_element(f"#{ids.SUMMARY_MEMORY_TITLE}").text == "Memory per rank"
    assert "Rank 2" in dash_duo.find_element(f"#{ids.SUMMARY_MEMORY}").text
    assert errors(dash_duo) == []


@pytest.mark.browser
def test_memory_says_a_rank_has_no_tiles_instead_of_the_tile_map(dash_duo, imported_app):
    dash_duo.start_server(imported_app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/memory")
    wait_for_figures(dash_duo, [ids.MEMORY_CATEGORIES])
    # THEN one line says a rank has no tiles, where the tile map was
    dash_duo.wait_for_text_to_equal(f"#{ids.MEMORY_NO_TILES}", imported.NO_TILES, timeout=10)
    assert dash_duo.find_element(f"#{ids.MEMORY_NO_TILES}").is_displayed()
    # AND the tile map, the selected tile, its variables, the distribution over tiles and the out-of-memory
    # tiles are not shown
    for hidden in (ids.MEMORY_TILE_VIEWS, ids.MEMORY_VARIABLES_SECTION, ids.MEMORY_HISTOGRAM_SECTION,
                   ids.MEMORY_OOM_SECTION, ids.MEMORY_WORST_SECTION):
        assert not dash_duo.find_element(f"#{hidden}").is_displayed(), hidden
    # AND the memory per rank, by category, is: one card per rank, weights and activations
    cards = dash_duo.find_element(f"#{ids.MEMORY_FIGURES}").text
    assert all(f"RANK {r}" in cards.upper() for r in range(4)) and "weights" in cards and "activations" in cards
    assert dash_duo.find_element(f"#{ids.MEMORY_CATEGORIES_TITLE}").text == "Memory per rank by category"
    legend = dash_duo.find_element(f"#{ids.MEMORY_CATEGORIES} .legend").text
    assert "weights" in legend and "activations" in legend
    assert errors(dash_duo) == []


@pytest.mark.browser
def test_exchange_shows_each_ranks_exposed_and_hidden_communication(dash_duo, imported_app, imported_profiles):
    import popvision_py as pv

    with pv.open(imported_profiles["a"]) as report:
        comm = report.exchange.communication()
    dash_duo.start_server(imported_app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/exchange")
    wait_for_figures(dash_duo, [ids.EXCHANGE_COMMUNICATION])
    # THEN the communication per rank is shown: a figure of each rank's time and a row per rank
    assert dash_duo.find_element(f"#{ids.EXCHANGE_COMMUNICATION_SECTION}").is_displayed()
    legend = dash_duo.find_element(f"#{ids.EXCHANGE_COMMUNICATION} .legend").text
    assert "exposed communication" in legend and "hidden behind compute" in legend
    table = dash_duo.find_element("#exchange-communication-table")
    rows = table.find_elements("css selector", "tbody tr")
    assert [row.text.split()[:2] for row in rows] == [["Rank", str(r)] for r in range(4)]
    # AND each row's exposed share is the analysis's, to its one decimal
    for row, pct in zip(rows, comm["exposed_comm_pct"]):
        assert f"{pct:.1f} %" in row.text
    # AND the kinds are PyTorch's (point-to-point sends and receives), in time
    assert "point-to-point" in dash_duo.find_element(f"#{ids.EXCHANGE_KINDS}").text
    assert dash_duo.find_element(f"#{ids.EXCHANGE_COSTLIEST_TITLE}").text == "Longest transfers"
    assert errors(dash_duo) == []


@pytest.mark.browser
def test_stages_show_the_ranks_passes_and_one_line_instead_of_a_split(dash_duo, imported_app):
    dash_duo.start_server(imported_app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/stages")
    wait_for_figures(dash_duo, [ids.STAGES_GANTT, ids.STAGES_IMBALANCE, ids.STAGES_SUMMARY])
    # THEN the Gantt has a row per rank, the bottleneck is stage 2 and the bubble is against GPipe's ideal
    gantt = dash_duo.find_element(f"#{ids.STAGES_GANTT}").text
    assert all(f"Rank {r}" in gantt for r in range(4)) and "IPU" not in gantt
    dash_duo.wait_for_contains_text(f"#{ids.STAGES_FIGURES}", "stage 2", timeout=10)
    assert "for GPipe with 4 ranks" in dash_duo.find_element(f"#{ids.STAGES_FIGURES}").text
    # AND the suggested split is one line: the traces do not name the stages' layers
    assert dash_duo.find_element(f"#{ids.STAGES_NO_BLOCKS}").text == imported.NO_BLOCKS
    assert dash_duo.find_element(f"#{ids.STAGES_NO_BLOCKS}").is_displayed()
    assert not dash_duo.find_element(f"#{ids.STAGES_SPLIT_SECTION}").is_displayed()
    assert errors(dash_duo) == []


def test_an_ipu_profile_keeps_its_words(app):
    # GIVEN the dashboard on an IPU profile: the callbacks that retitle the pages for an imported trace give
    # an IPU profile the words its layout starts with, and hide nothing it showed
    page = lambda name: importlib.import_module(f"dashboards.pages.{name}")  # noqa: E731
    assert page("summary").render_words("a") == ("Where the IPU time goes", "Memory per IPU", {})
    memory = page("memory").render_words("a")
    assert memory[0] == page("memory").DESCRIPTION[False] and memory[1] == {"display": "none"}
    assert memory[2:7] == ({}, {}, {}, {}, {}) and memory[7:] == ("grid-2", "Memory per IPU by category",
                                                               page("memory").CATEGORIES_NOTE[False])
    assert page("stages").render_words("a")[1:] == ("Forward and backward passes per IPU",
                                                    "Cycles per micro-batch of each stage", {}, {"display": "none"},
                                                    {"display": "none"}, {}, {})
    exchange = page("exchange").render_words("a")
    assert exchange[1:] == ("Where the IPU time goes", {"display": "none"}, page("exchange").MATRIX_OPTIONS[False],
                            "Costliest exchange steps", page("exchange").COSTLIEST_NOTE[False])
    assert page("trace").render_words("a")[1:] == ("BSP timeline", {}, {"display": "none"})


@pytest.mark.browser
def test_the_stages_page_names_the_culprit_and_re_times_a_what_if(dash_duo, imported_app, imported_profiles):
    dash_duo.start_server(imported_app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/stages")
    # THEN the critical path's section shows for the imported pipeline, naming the planted heavy stage
    dash_duo.wait_for_contains_text(f"#{ids.STAGES_CRITICAL_CARDS}", "rank 2 (stage 2)", timeout=20)
    assert dash_duo.find_element(f"#{ids.STAGES_CRITICAL_SECTION}").is_displayed()
    culprits = dash_duo.find_element("#stages-culprits-table").text.splitlines()
    assert culprits[1].split()[:2] == ["2", "2"]  # the first row: rank 2, stage 2
    assert "as recorded" in dash_duo.find_element("#stages-whatif-table").text
    # WHEN a what-if is asked: twice the micro-batches (4 recorded)
    box = dash_duo.find_element(f"#{ids.STAGES_WHATIF_MICRO_BATCHES}")
    box.clear()
    box.send_keys("8")
    dash_duo.find_element(f"#{ids.STAGES_WHATIF_RUN}").click()
    # THEN the answer is its step with a range, and the change in PyTorch's words
    dash_duo.wait_for_contains_text(f"#{ids.STAGES_WHATIF_ANSWER}", "8 micro-batches", timeout=15)
    answer = dash_duo.find_element(f"#{ids.STAGES_WHATIF_ANSWER}").text
    assert "a step (range" in answer and "ScheduleGPipe(stage, n_microbatches=8, loss_fn=...)" in answer
    # and what the range covers, as `popvision tune --set` says it
    import popvision_py as pv

    with pv.open(imported_profiles["a"]) as report:
        covers = report.critical_path.measured().profiler.range_words()
    assert f"Range: {covers}." in answer
    assert errors(dash_duo) == []


@pytest.mark.browser
def test_a_re_timed_candidate_clicked_on_the_what_if_page_gives_its_pytorch_change(dash_duo, imported_app):
    dash_duo.start_server(imported_app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/whatif")
    wait_for_figures(dash_duo, [ids.WHATIF_SCATTER])
    # WHEN a point of the first figure is clicked
    from selenium.webdriver.common.action_chains import ActionChains

    point = dash_duo.find_elements(f"#{ids.WHATIF_SCATTER} .scatterlayer .trace .point")[0]
    ActionChains(dash_duo.driver).move_to_element(point).click().perform()
    # THEN its view names the schedule class and micro-batches to set
    dash_duo.wait_for_contains_text(f"#{ids.WHATIF_DETAIL}", "n_microbatches=", timeout=15)
    assert "Schedule" in dash_duo.find_element(f"#{ids.WHATIF_DETAIL}").text
    assert errors(dash_duo) == []


@pytest.mark.browser
def test_the_trace_page_draws_a_step_s_critical_path_across_ranks(dash_duo, imported_app):
    dash_duo.start_server(imported_app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/trace")
    wait_for_figures(dash_duo, [ids.TRACE_TIMELINE, ids.TRACE_CRITICAL])
    assert dash_duo.find_element(f"#{ids.TRACE_CRITICAL_SECTION}").is_displayed()
    legend = dash_duo.find_element(f"#{ids.TRACE_CRITICAL} .legend").text
    assert "compute" in legend and "communication" in legend and "path" in legend
    # the path reaches the heavy stage's rank, whose work sets most of the step
    rows = {t.text for t in dash_duo.find_elements(f"#{ids.TRACE_CRITICAL} .ytick text")}
    assert "Rank 2" in rows
    assert errors(dash_duo) == []


@pytest.fixture(scope="module")
def gpu_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPU trace's import (tests/importer/test_gpu_timeline.py's trace: kernels on three streams, an NCCL
    all-reduce hidden in part behind compute, a copy and a set, a CPU blocked in its all-reduce call)."""
    from tests.importer.test_gpu_timeline import import_gpu_trace

    return import_gpu_trace(tmp_path_factory.mktemp("gpu"))


# What a GPU trace's import draws on each page: its memory was not recorded (the pages say so in words, not
# in a figure of 0 MiB), its one stage runs no pass the trace annotates (no Gantt bars), and its GPU page
GPU_PAGES = {**PAGES, "/": [ids.SUMMARY_TIME], "/memory": [], "/liveness": [], "/stages": [ids.STAGES_IMBALANCE],
             # a data-parallel run has no stages: that chart is one line instead (checked below)
             "/compare": [ids.COMPARE_PHASES],
             # a GPU trace's collective is no transfer between two ranks: the matrix says so, drawing nothing
             "/exchange": [ids.EXCHANGE_PHASES, ids.EXCHANGE_COMMUNICATION, ids.EXCHANGE_KINDS],
             "/gpu": [ids.GPU_TIMELINE, ids.GPU_TEMPORAL, ids.GPU_KERNEL_TYPES, ids.GPU_OVERLAP]}


@pytest.mark.browser
@pytest.mark.slow  # about 15 s: nine pages in Chromium
def test_every_page_of_a_gpu_trace_draws_without_console_errors(dash_duo, gpu_profile):
    # GIVEN the dashboard on a profile imported from a GPU trace (twice: the Compare page has two)
    from dashboards.app import create_app

    dash_duo.start_server(create_app([str(gpu_profile), str(gpu_profile)], runner=refuse_to_emulate))
    for path, graphs in GPU_PAGES.items():
        # WHEN each page is opened THEN its figures are drawn and the console holds no error
        dash_duo.wait_for_page(url=f"{dash_duo.server_url}{path}")
        wait_for_figures(dash_duo, graphs)
        assert errors(dash_duo) == [], path
        # AND the memory the trace does not hold is said to be not recorded
        if path in ("/memory", "/liveness"):
            dash_duo.wait_for_contains_text("body", "not recorded", timeout=10)
        if path == "/compare":
            dash_duo.wait_for_element(f"#{ids.COMPARE_STAGES} .annotation", timeout=30)
            said = dash_duo.driver.execute_script(
                "return document.querySelector(arguments[0] + ' .js-plotly-plot').layout.annotations[0].text",
                f"#{ids.COMPARE_STAGES}")
            assert "ran no pipeline" in said.replace("<br>", " ")
