"""The Memory and Liveness pages past ``MANY_RANKS`` ranks or IPUs: each figure a distribution over them (boxes of
each category, a band of the least, median and most at each step) with the ranks furthest past the median named,
four cards instead of one a rank, the peaks table through ``rank_table``; at 32 or fewer nothing changes. The
figures are checked against sums a person can do, on frames made here and on an import of 40 ranks with one rank
planted fuller."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import dash
import numpy as np
import pandas as pd
import pytest

from dashboards.figures import liveness as liveness_figures
from dashboards.figures import memory as memory_figures

ROOT = Path(__file__).resolve().parents[2]
RANKS, FULL = 40, 7
GIB = 1 << 30


def _ipu_categories() -> pd.DataFrame:
    """40 IPUs: IPU i holds 100 + i bytes of always-live weights and 50 of not-always-live activations, but IPU 7
    500 of them."""
    ipu = np.arange(RANKS)
    return pd.DataFrame({
        "ipu": np.concatenate([ipu, ipu]),
        "category": ["weights"] * RANKS + ["activations"] * RANKS,
        "always_live": [True] * RANKS + [False] * RANKS,
        "bytes": np.concatenate([100 + ipu, np.where(ipu == FULL, 500, 50)]),
    })


def test_the_categories_of_40_ipus_are_boxes_over_them_with_the_furthest_named():
    # GIVEN the categories of 40 IPUs
    frame = _ipu_categories()
    # WHEN drawn past MANY_RANKS
    fig = memory_figures.category_spread(frame)
    boxes = {t.name: t for t in fig.data if t.type == "box"}
    # THEN a box a category (and the whole), each its least, quartiles and most over the IPUs
    weights = np.arange(100, 140)  # 100..139: quartiles at 25/50/75 % of the 39 steps between them
    assert (boxes["weights"].lowerfence[0], boxes["weights"].q1[0], boxes["weights"].median[0],
            boxes["weights"].q3[0], boxes["weights"].upperfence[0]) == (100, 109.75, 119.5, 129.25, 139)
    assert boxes["activations (not always-live)"].median[0] == 50
    assert boxes["activations (not always-live)"].upperfence[0] == 500
    whole = weights + 50
    whole[FULL] = 107 + 500
    assert boxes["all"].upperfence[0] == 607 and boxes["all"].median[0] == np.median(whole)
    # AND the IPUs furthest past each median marked: IPU 7 alone in activations (the rest sit at the median),
    # the last three in weights, IPU 7 first in the whole
    named = next(t for t in fig.data if t.type == "scatter")
    marks = list(zip(named.x, named.text, named.y))
    assert [m for m in marks if m[0] == "activations (not always-live)"] == [
        ("activations (not always-live)", "IPU 7", 500)]
    assert [m[1] for m in marks if m[0] == "weights"] == ["IPU 39", "IPU 38", "IPU 37"]
    assert [m[1] for m in marks if m[0] == "all"][0] == "IPU 7"
    # AND no bar a rank, no hatching
    assert not [t for t in fig.data if t.type == "bar"]


def test_the_tiles_of_40_ipus_are_one_histogram_and_of_two_one_each():
    # GIVEN 3 tiles on each of 40 IPUs, and the first two IPUs alone
    by_tile = pd.DataFrame({"ipu": np.repeat(np.arange(RANKS), 3), "tile": np.tile(np.arange(3), RANKS),
                            "total_bytes": np.arange(3 * RANKS) * 10})
    # WHEN their histograms are drawn
    many = memory_figures.tile_histogram(by_tile, 1000)
    few = memory_figures.tile_histogram(by_tile[by_tile["ipu"] < 2], 1000)
    # THEN 40 IPUs are one distribution of all 120 tiles; two IPUs a histogram each, as before
    assert [t.name for t in many.data] == ["40 IPUs"] and len(many.data[0].x) == 3 * RANKS
    assert [t.name for t in few.data] == ["IPU 0", "IPU 1"]


def _by_step() -> pd.DataFrame:
    """40 IPUs over 3 steps: step s holds 10 s not-always-live bytes, 1 more on odd IPUs, and IPU 7 1,000 at
    step 1; the worst tile 2,048 bytes everywhere."""
    ipu, step = np.repeat(np.arange(RANKS), 3), np.tile(np.arange(3), RANKS)
    live = 10 * step + ipu % 2
    live[(ipu == FULL) & (step == 1)] = 1000
    return pd.DataFrame({"ipu": ipu, "step": step, "name": [f"s{s}" for s in step], "not_always_live_bytes": live,
                         "total_bytes": live + 100, "worst_tile": 0, "worst_tile_bytes": 2048})


def test_the_liveness_of_40_ipus_is_a_band_with_the_furthest_as_lines():
    # GIVEN 40 IPUs' liveness, IPU 12 chosen at step 2
    # WHEN drawn past MANY_RANKS
    fig = liveness_figures.liveness_band(_by_step(), bytes_per_tile=4096, selected=(12, 2))
    top = [t for t in fig.data if t.xaxis == "x"]
    by_name = {t.name: t for t in top}
    # THEN the band's edges and median at each step are the least, median and most over the IPUs
    assert list(by_name["most"].y) == [1, 1000, 21]
    assert list(by_name["least to most of the 40 IPUs"].y) == [0, 10, 20]
    assert list(by_name["median"].y) == [0.5, 10.5, 20.5]
    # AND the lines are the IPUs furthest past the median peak (IPU 7, then the odd IPUs one byte over it) and
    # the chosen one: five lines in each panel, not forty
    assert fig.layout.meta["named"] == [7, 1, 3]
    assert [t.name for t in top][3:] == ["IPU 7", "IPU 1", "IPU 3", "IPU 12 (chosen)"]
    assert list(by_name["IPU 7"].y) == [1, 1000, 21]
    assert len(fig.data) == 2 * 7 + 1  # two panels of band, median and four lines; the tile capacity
    # AND a click on a line names its IPU: its custom data
    assert by_name["IPU 7"].customdata[1][0] == FULL


def test_at_32_ipus_or_fewer_liveness_draws_a_line_each():
    # GIVEN 32 IPUs' liveness
    by_step = _by_step()
    fig = liveness_figures.liveness_steps(by_step[by_step["ipu"] < 32], bytes_per_tile=4096)
    # THEN two lines an IPU, as before
    assert len([t for t in fig.data if t.name.startswith("IPU")]) == 64


# -- the pages' callbacks on an import of 40 ranks, rank 7 planted 2 GiB fuller at its peak ------------------------


@pytest.fixture(scope="module")
def forty_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 ranks of a data-parallel run, each allocating 2, 5 then 3 GiB; rank 7 7 GiB at its peak."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_gpu_trace

    from popvision_py.importer import find_traces, import_traces

    folder = tmp_path_factory.mktemp("forty-memory")
    make_gpu_trace.make(folder / "t", total_mb=0.05, ranks=RANKS, layers=2, bucket=1, jobs=1, spread=0.0)
    plant_peak(folder / "t" / f"rank{FULL}.json", 5 * GIB, 7 * GIB)
    import_traces(find_traces([str(folder / "t")]), folder / "p" / "profile.pop")
    return folder / "p" / "profile.pop"


def plant_peak(trace: Path, peak: int, fuller: int) -> None:
    """A rank's allocation at its peak (``[memory]``'s Total Allocated) made ``fuller``."""
    text, count = re.subn(rf'("Total Allocated":\s*){peak}\b', rf"\g<1>{fuller}", trace.read_text())
    assert count, trace
    trace.write_text(text)


def _texts(component) -> list[str]:
    """Every string in a Dash component tree."""
    if isinstance(component, str):
        return [component]
    children = getattr(component, "children", None)
    if children is None:
        return []
    return [t for child in (children if isinstance(children, list) else [children]) for t in _texts(child)]


def test_the_memory_page_of_40_ranks_is_four_cards_and_boxes_naming_the_fullest(forty_ranks):
    from dashboards.app import create_app

    # GIVEN the dashboard on 40 ranks, rank 7 at 7 GiB where the others peak at 5
    create_app([str(forty_ranks)], warm=False)
    page = importlib.import_module("dashboards.pages.memory")
    # WHEN the page's overview is drawn
    options, first, cards, categories, histogram, _ = page.render_overview(None)
    # THEN four cards, not forty: 40 ranks, the median peak 5 GiB, 5 to 7 GiB, the fullest rank 7
    texts = _texts(cards)
    # AND the hidden picker of a rank's tile map holds the fullest rank alone, not 40 options
    assert options == [{"label": "Rank 7", "value": FULL}]
    assert len(cards.children) == 4 and first == FULL
    assert texts[:2] == ["Ranks", "40"] and "5.00 GiB" in texts and "5.00 GiB to 7.00 GiB" in texts
    assert texts[texts.index("Fullest rank") + 1] == "Rank 7"
    assert f"{(39 * 5 + 7):,}.00 GiB allocated at their peaks" in texts
    # AND the categories are boxes over the ranks: activations 3 GiB at the median (5 GiB at the peak less 2 GiB
    # of weights), 5 GiB on rank 7, named
    boxes = {t.name: t for t in categories.data if t.type == "box"}
    assert boxes["activations"].median[0] == 3 * GIB and boxes["activations"].upperfence[0] == 5 * GIB
    assert boxes["weights"].median[0] == boxes["weights"].upperfence[0] == 2 * GIB
    named = next(t for t in categories.data if t.type == "scatter")
    assert list(named.text) == ["Rank 7", "Rank 7"] and list(named.y) == [5 * GIB, 7 * GIB]
    # AND a rank has no tiles: no histogram drawn for the hidden section
    assert not histogram.data
    assert page.render_words(None)[-2] == "Memory over the ranks by category"


def test_the_liveness_page_of_40_ranks_is_a_band_and_the_peaks_spread(forty_ranks):
    from dashboards.app import create_app

    # GIVEN the dashboard on 40 ranks, rank 7 planted fuller
    create_app([str(forty_ranks)], warm=False)
    page = importlib.import_module("dashboards.pages.liveness")
    # WHEN the plot and the peaks are drawn, rank 0 chosen at step 1
    fig = page.render_plot(0, 1, None)
    peaks = page.render_peaks(None)
    # THEN the plot is a band with rank 7 and the chosen rank as lines
    assert fig.layout.meta["level"] == "band" and fig.layout.meta["named"] == [FULL]
    lines = [t.name for t in fig.data if t.xaxis == "x"][3:]
    assert lines == ["Rank 7", "Rank 0 (chosen)"]
    most = next(t for t in fig.data if t.name == "most" and t.xaxis == "x")
    assert max(most.y) == 5  # GiB of activations: rank 7's 7 GiB less its 2 GiB of weights
    # AND the peaks are each figure's spread and rank 7's row alone, 2 GiB (+66.7%) past the median activations
    texts = _texts(peaks)
    assert texts[0].startswith("40 ranks") and "(Rank 7)" in texts[0]
    assert "Rank 7 (+66.7%)" in texts and "Rank 7 (+40.0%)" in texts
    assert texts.count("Rank 7") == 1 and "Rank 0" not in texts
    # AND a click on the band chooses its step and keeps the rank; on a rank's line, that rank
    assert page.choose_clicked({"points": [{"x": 2, "customdata": list(most.customdata[2])}]}) == (dash.no_update, 2)
    line = next(t for t in fig.data if t.name == "Rank 7")
    assert page.choose_clicked({"points": [{"x": 2, "customdata": list(line.customdata[2])}]}) == (FULL, 2)


def test_the_pages_of_40_ipus_are_four_cards_a_histogram_and_a_band(tmp_path):
    from dashboards.app import create_app
    from tests import synthetic

    # GIVEN a pipeline of 40 IPUs (a block each), IPU 7's block holding 2,000 bytes of weights, the others 400
    weights = [2000 if i == FULL else 400 for i in range(RANKS)]
    profile = synthetic.write_pipeline_profile(tmp_path / "p.pop", [10] * RANKS, micro_batches=2,
                                               weight_bytes=weights, tiles_per_ipu=4, bytes_per_tile=10_000)
    create_app([str(profile)], warm=False)
    memory = importlib.import_module("dashboards.pages.memory")
    liveness = importlib.import_module("dashboards.pages.liveness")
    # WHEN the Memory and Liveness pages are drawn
    options, first, cards, categories, histogram, _ = memory.render_overview(None)
    assert len(options) == RANKS  # an IPU's tile map is shown: its picker offers every IPU
    # THEN four cards name IPU 7 the fullest, the tiles are one histogram of all 160, the categories boxes
    texts = _texts(cards)
    assert len(cards.children) == 4 and texts[:2] == ["IPUs", "40"] and first == FULL
    assert texts[texts.index("Fullest IPU") + 1] == "IPU 7"
    assert [t.name for t in histogram.data] == ["40 IPUs"] and len(histogram.data[0].x) == 4 * RANKS
    assert {t.type for t in categories.data} == {"box", "scatter"}
    # AND the liveness plot is a band, the peaks a spread
    assert liveness.render_plot(None, None, None).layout.meta["level"] == "band"
    assert _texts(liveness.render_peaks(None))[0].startswith("40 ranks")


def test_a_rank_table_of_ranks_all_alike_names_none_and_shows_no_empty_table():
    from dashboards import components as c

    # GIVEN 40 ranks each at 5 GiB (copies of one rank: none stands out)
    frame = pd.DataFrame({"rank": np.arange(RANKS), "total_bytes": np.full(RANKS, 5 * GIB)})
    # WHEN told as a rank table
    texts = _texts(c.rank_table(frame, {"rank": "rank", "total_bytes": "allocated"}, {"total_bytes": c.fmt_bytes}))
    # THEN the spread alone, and a sentence that no rank is past the median (not "()" over "Nothing to show.")
    assert texts[0] == "40 ranks: each figure's spread over them; no rank is past its median."
    assert "Nothing to show." not in texts and texts.count("5.00 GiB") == 4


def test_the_memory_cards_of_ranks_all_alike_give_one_figure_not_a_range_of_it():
    from dashboards.figures.style import Naming
    from dashboards.pages.memory import many_cards

    # GIVEN 40 ranks each at 5 GiB at its peak, of 80 GiB
    frame = pd.DataFrame({"ipu": np.arange(RANKS), "total_bytes": np.full(RANKS, 5 * GIB),
                          "capacity_bytes": np.full(RANKS, 80 * GIB), "used_pct": np.full(RANKS, 6.25)})
    # WHEN told as cards
    cards = {card[0]: card[1:] for card in many_cards(frame, Naming(tuple(range(RANKS))))}
    # THEN the spread is the one figure, said to be every rank's, not "5.00 GiB to 5.00 GiB"
    assert cards["Least to most"] == ("5.00 GiB", "every rank's peak alike")
    assert cards["Median peak"][0] == "5.00 GiB" and cards["Ranks"][0] == "40"
