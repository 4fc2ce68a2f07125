"""The dashboard on an import of 256 ranks (make_gpu_trace.py, one rank slow, another fuller): every page draws
in a real Chromium with no console error and stays a page long, not a row per rank: the per-rank figures are heat
maps, columns or distributions, the matrix binned, the tables each figure's spread and the ranks past it, the
System page a heat map of the ranks that a box zoom onto a few turns into their own time lines, the Memory and
Liveness pages boxes and a band over the ranks naming the fullest."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dashboards import ids
from tests.dashboard.test_browser import errors, wait_for_figures
from tests.dashboard.test_many_rank_memory import GIB, plant_peak

ROOT = Path(__file__).resolve().parents[2]
RANKS, SLOW, FULL = 256, 100, 200
PAGES = {
    "/": [ids.SUMMARY_TIME],
    "/stages": [ids.STAGES_SUMMARY],  # a data-parallel run: no pipeline to draw a Gantt chart of
    "/exchange": [ids.EXCHANGE_PHASES, ids.EXCHANGE_COMMUNICATION],
    "/system": [ids.SYSTEM_TIMELINE],
    "/trace": [ids.TRACE_TIMELINE],  # a heat map of the ranks' compute
    "/operations": [ids.OPERATIONS_TRACE],
    "/gpu": [ids.GPU_TIMELINE, ids.GPU_TEMPORAL, ids.GPU_OVERLAP],
}
TALLEST_PX = 12_000  # a page of a few figures and tables; a row per rank was 60 px x 256 for one figure alone


@pytest.fixture(scope="module")
def many_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """256 ranks of a data-parallel run, two layers, rank 100's GPU 1.5 times slower, rank 200 allocating 7 GiB at
    its peak where the others allocate 5; imported."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_gpu_trace

    from popvision_py.importer import find_traces, import_traces

    folder = tmp_path_factory.mktemp("many-ranks")
    make_gpu_trace.make(folder / "traces", total_mb=0.5, ranks=RANKS, layers=2, bucket=1, jobs=1, spread=0.0005,
                        slow_rank=SLOW)
    plant_peak(folder / "traces" / f"rank{FULL}.json", 5 * GIB, 7 * GIB)
    import_traces(find_traces([str(folder / "traces")]), folder / "p" / "profile.pop")
    return folder / "p" / "profile.pop"


@pytest.mark.browser
@pytest.mark.slow  # about a minute: an import of 256 ranks and five pages in Chromium
def test_every_page_of_256_ranks_draws_without_errors_and_is_not_a_row_per_rank(dash_duo, many_ranks):
    from dashboards.app import create_app

    # GIVEN the dashboard on the import of 256 ranks
    dash_duo.start_server(create_app([str(many_ranks)]))
    for path, graphs in PAGES.items():
        # WHEN each page is opened
        dash_duo.wait_for_page(url=f"{dash_duo.server_url}{path}")
        wait_for_figures(dash_duo, graphs, timeout=60)
        dash_duo.wait_for_element(".cards .card", timeout=30)
        # THEN it draws without a console error, and is not thousands of pixels of rows per rank
        assert errors(dash_duo) == [], path
        height = dash_duo.driver.execute_script("return document.body.scrollHeight")
        assert height < TALLEST_PX, (path, height)
    # AND the System page is a heat map of the ranks, and the GPU page's tables name the slow rank
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/system")
    dash_duo.wait_for_element(f"#{ids.SYSTEM_TIMELINE} .heatmaplayer image, #{ids.SYSTEM_TIMELINE} .hm",
                              timeout=60)
    dash_duo.wait_for_contains_text(f"#{ids.SYSTEM_LEVEL}", f"a heat map of {RANKS} processes", timeout=60)
    assert errors(dash_duo) == []
    # AND so is the Execution trace page's time line
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/trace")
    dash_duo.wait_for_element(f"#{ids.TRACE_TIMELINE} .heatmaplayer image, #{ids.TRACE_TIMELINE} .hm", timeout=60)
    dash_duo.wait_for_contains_text(f"#{ids.TRACE_LEVEL}", f"a heat map of {RANKS} ranks", timeout=60)
    assert errors(dash_duo) == []


@pytest.mark.browser
@pytest.mark.slow  # an import of 256 ranks (shared with the test above) and two pages in Chromium
def test_the_memory_and_liveness_pages_of_256_ranks_are_distributions_naming_the_fullest(dash_duo, many_ranks):
    from dashboards.app import create_app

    # GIVEN the dashboard on the import of 256 ranks, rank 200 the fullest
    dash_duo.start_server(create_app([str(many_ranks)]))
    # WHEN the Memory page is opened
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/memory")
    wait_for_figures(dash_duo, [ids.MEMORY_CATEGORIES], timeout=60)
    # THEN four cards, the fullest rank named, the categories boxes over the ranks: no bar a rank, no console error
    dash_duo.wait_for_contains_text(".cards", f"Rank {FULL}", timeout=30)
    assert len(dash_duo.find_elements(".cards .card")) == 4
    assert dash_duo.find_elements(f"#{ids.MEMORY_CATEGORIES} .trace.boxes")
    assert not dash_duo.find_elements(f"#{ids.MEMORY_CATEGORIES} .trace.bars")
    assert errors(dash_duo) == []
    assert dash_duo.driver.execute_script("return document.body.scrollHeight") < TALLEST_PX
    # WHEN the Liveness page is opened
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/liveness")
    wait_for_figures(dash_duo, [ids.LIVENESS_PLOT], timeout=60)
    # THEN the peaks name rank 200 past the median, the plot is a band with its line, and the page is not a row
    # (nor a legend entry) a rank
    dash_duo.wait_for_contains_text(f"#{ids.LIVENESS_PEAKS}", f"Rank {FULL} (+66.7%)", timeout=30)
    dash_duo.wait_for_contains_text(f"#{ids.LIVENESS_PLOT} .legend", f"Rank {FULL}", timeout=30)
    assert len(dash_duo.find_elements(f"#{ids.LIVENESS_PLOT} .legend .traces")) < 10
    assert len(dash_duo.find_elements(f"#{ids.LIVENESS_PEAKS} tbody tr")) < 10
    assert errors(dash_duo) == []
    assert dash_duo.driver.execute_script("return document.body.scrollHeight") < TALLEST_PX
