"""Figures of many ranks (``dashboards.figures.ranks``) as plain functions, and the System page's callbacks on an
import of 40 ranks: a heat map of the ranks whose cells are each rank's busy share of a bin, a box zoom onto a few
ranks drawing their own time lines, a matrix summed into bins of ranks, a bar per rank turned to the ranks'
distribution."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from dashboards import components as c
from dashboards.figures import ranks

ROOT = Path(__file__).resolve().parents[2]


def test_a_heat_map_cell_is_the_share_of_its_bin_a_rank_was_busy():
    # GIVEN three ranks' spans over 0-100 ns: rank 0 busy 0-50 (twice over, nested), rank 1 25-100, rank 2 idle
    row, start, end = np.array([0, 0, 1]), np.array([0, 10, 25]), np.array([50, 20, 100])
    # WHEN they are drawn in 4 bins of 25 ns
    fig = ranks.busy_heatmap(row, start, end, ["a", "b", "c"], (0, 100), lambda t: t, "busy", "ns", bins=4)
    # THEN each cell is the share of its bin: nested spans counted once, a rank with none at 0
    assert np.asarray(fig.data[0].z).tolist() == [[100, 100, 0, 0], [0, 100, 100, 100], [0, 0, 0, 0]]
    assert fig.layout.height == ranks.HEATMAP_HEIGHT


def test_a_box_onto_a_few_rows_names_them():
    # GIVEN a heat map of 40 rows: a box from row 2.6 to 5.4, one past every row, one about the x axis alone
    assert ranks.rows_in_view({"yaxis.range[0]": 5.4, "yaxis.range[1]": 2.6}, 40) == (3, 6)
    assert ranks.rows_in_view({"yaxis.range[0]": -0.5, "yaxis.range[1]": 39.5}, 40) is None
    assert ranks.rows_in_view({"xaxis.range[0]": 1, "xaxis.range[1]": 2}, 40) is None


def test_a_matrix_of_many_ranks_is_summed_into_bins_of_ranks():
    # GIVEN 8 ranks each sending 10 bytes to the next, drawn in 4 bins of 2 ranks
    src = np.arange(8)
    grid, spans = ranks.binned_matrix(src, (src + 1) % 8, np.full(8, 10), list(range(8)), bins=4)
    # THEN a bin holds its ranks' transfers to a bin: 0->1 inside bin 0, 1->2 from bin 0 to bin 1, ...
    assert spans == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert grid[0, 0] == 10 and grid[1, 0] == 10 and grid[0, 3] == 10 and np.isnan(grid[2, 0])
    assert np.nansum(grid) == 80


def test_a_figure_of_many_ranks_is_their_distribution_sorted_stacked_the_first_named():
    # GIVEN 5 ranks' compute and idle, rank 3 the most compute, ranks 1 and 4 tied; a line of their hidden time
    labels = [f"Rank {r}" for r in range(5)]
    compute, idle, hidden = np.array([2., 5., 1., 9., 5.]), np.array([1., 0., 3., 0., 2.]), np.arange(5.0)
    # WHEN drawn sorted by compute, two named
    fig = ranks.sorted_areas(labels, [("compute", compute, "#111111"), ("idle", idle, "#222222")], compute,
                             "the most compute", "ms", "%{y:.1f} ms", lines=[("hidden", hidden, "#333333")],
                             named=2)
    # THEN the ranks run the most compute first, a tie in rank order: 3, 1, 4, 0, 2, each part in that order
    order = [3, 1, 4, 0, 2]
    assert [list(t.customdata) for t in fig.data] == [[f"Rank {r}" for r in order]] * 3
    assert list(fig.data[0].y) == compute[order].tolist() and list(fig.data[1].y) == idle[order].tolist()
    assert list(fig.data[2].y) == hidden[order].tolist()
    # AND the parts are stacked, the line is not; of the first two, the one past the median compute (5) is named
    # at the top of its stack with how far past it is (9 / 5: +80 %), the one at the median is not
    assert [t.stackgroup for t in fig.data] == ["ranks", "ranks", None]
    assert [(a.text, a.x, a.y) for a in fig.layout.annotations] == [("Rank 3 (+80.0%)", 0, 9.0)]
    assert fig.layout.xaxis.title.text == "5 ranks, the most compute first (hover for each)"
    assert fig.data[0].hovertemplate == "%{customdata}: %{y:.1f} ms compute<extra></extra>"


@pytest.fixture(scope="module")
def forty_ranks(tmp_path_factory) -> Path:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_gpu_trace

    from popvision_py.importer import find_traces, import_traces

    folder = tmp_path_factory.mktemp("forty")
    make_gpu_trace.make(folder / "t", total_mb=0.05, ranks=40, layers=2, bucket=1, jobs=1, spread=0.0,
                        slow_rank=7)
    import_traces(find_traces([str(folder / "t")]), folder / "p" / "profile.pop")
    return folder / "p" / "profile.pop"


def test_the_system_page_of_40_ranks_is_a_heat_map_and_a_box_draws_a_few_ranks(forty_ranks):
    from dashboards.app import create_app

    create_app([str(forty_ranks)])
    page = importlib.import_module("dashboards.pages.system")
    # WHEN the page draws the whole run
    fig, level, kept = page.render_timeline("a", 0, "relative")
    # THEN a heat map of the 40 ranks, every rank a row
    assert isinstance(fig.data[0], go.Heatmap) and np.asarray(fig.data[0].z).shape == (40, ranks.HEATMAP_BINS)
    assert "a heat map of 40 processes" in level and len(kept) == 2
    # WHEN a box is zoomed onto ranks 5 to 9
    fig, level, kept = page.zoom_timeline({"yaxis.range[0]": 4.6, "yaxis.range[1]": 9.4}, "a", "relative", 0, kept)
    # THEN their own time lines are drawn, each of their rows, and the Store keeps them for the next zoom
    rows = list(fig.layout.yaxis.categoryarray)
    assert {row.split(" · ")[0] for row in rows} == {f"rank-{r}" for r in range(5, 10)} and len(rows) >= 10
    assert kept[2:] == ["5", "10"]
    # AND a zoom in time keeps those ranks
    start, end = int(kept[0]), int(kept[1])
    origin = start
    fig, _, again = page.zoom_timeline({"xaxis.range[0]": 0.0, "xaxis.range[1]": (end - origin) / 2e9}, "a",
                                       "relative", 0, kept)
    assert again[2:] == ["5", "10"] and int(again[1]) < end


def test_a_gantt_chart_of_many_ranks_is_a_heat_map_of_their_passes():
    import pandas as pd

    from dashboards.figures.stages import stages_gantt

    # GIVEN 40 ranks' passes over 0-400 cycles: rank r runs a forward pass from 10 r to 10 r + 100
    r = np.arange(40)
    gantt = pd.DataFrame({"ipu": r, "stage": r, "iteration": 0, "micro_batch": 0, "pass": "forward",
                          "start_cycle": 10 * r, "end_cycle": 10 * r + 100})
    # WHEN it is drawn
    fig = stages_gantt(gantt)
    # THEN a row a rank, each bin's share of it the rank ran a pass, on a fixed height
    z = np.asarray(fig.data[0].z)
    edges = 490 * np.arange(ranks.HEATMAP_BINS + 1) // ranks.HEATMAP_BINS  # whole cycles, the last pass's end last
    busy = np.clip(np.minimum(10 * r[:, None] + 100, edges[None, 1:]) - np.maximum(10 * r[:, None], edges[None, :-1]),
                   0, None)
    assert z.shape == (40, ranks.HEATMAP_BINS)
    assert np.abs(z - 100 * busy / np.diff(edges)[None, :]).max() <= 0.5  # whole percents
    assert fig.layout.height == ranks.HEATMAP_HEIGHT


def test_the_exchange_table_of_40_ranks_is_their_spread_and_names_the_slow_rank(forty_ranks):
    from dashboards.app import create_app
    from dashboards import data

    create_app([str(forty_ranks)])
    page = importlib.import_module("dashboards.pages.exchange")
    comm = data.report("a").exchange.communication()
    # WHEN the communication per rank is tabled
    table = page.communication_table(comm, data.report("a"))
    text = str(table)
    # THEN it opens with the 40 ranks' spread, and the slow rank (7) is named past the median in compute
    compute = comm["compute_cycles"].to_numpy(np.float64)
    over = 100 * (compute[7] / np.median(compute) - 1)
    assert "40 ranks: each figure's spread" in text
    assert f"Rank 7 ({over:+.1f}%)" in text


def test_busy_and_idle_of_many_stages_is_their_distribution_the_busiest_named():
    import pandas as pd

    from dashboards.figures.stages import stage_utilisation

    # GIVEN 40 stages of 100 cycles each: stage s busy 50 + s cycles, stage 7 busy 95
    s = np.arange(40)
    busy = np.where(s == 7, 95, 50 + s // 2)
    summary = pd.DataFrame({"stage": s, "ipu": s, "pass": "all", "busy_cycles": busy, "idle_cycles": 100 - busy,
                            "total_cycles": 100})
    # WHEN drawn
    fig = stage_utilisation(summary)
    # THEN the stages run busiest first along the x axis, busy and idle stacked to each stage's 100 cycles
    order = np.lexsort((s, -busy))
    assert list(fig.data[0].y) == busy[order].tolist() and list(fig.data[1].y) == (100 - busy[order]).tolist()
    assert fig.data[0].customdata[0] == "stage 7 · IPU 7" and fig.layout.annotations[0].text == "stage 7 · IPU 7"


def test_the_communication_of_many_ranks_is_their_distribution_the_most_compute_named(forty_ranks):
    from dashboards.app import create_app
    from dashboards import data
    from dashboards.figures.exchange import communication

    create_app([str(forty_ranks)])
    report = data.report("a")
    comm = report.exchange.communication()
    clock = float(report.target["clock_hz"])
    # WHEN the 40 ranks' communication is drawn
    fig = communication(comm, clock, data.naming(report))
    # THEN the ranks run the most compute first, the slow rank 7 first and named
    compute = comm["compute_cycles"].to_numpy(float)
    assert np.allclose(fig.data[0].y, np.sort(compute)[::-1] / clock * 1e3)
    assert fig.data[0].customdata[0] == "Rank 7" and fig.layout.annotations[0].text.startswith("Rank 7 (+")


def test_a_box_on_a_binned_matrix_draws_the_ranks_it_holds_each_its_own_cell():
    import pandas as pd

    from dashboards.figures.exchange import exchange_matrix, exchange_submatrix
    from dashboards.figures.style import Naming

    # GIVEN 128 ranks each sending r + 1 bytes to the next: binned into 64 bins of 2 ranks a side
    r = np.arange(128)
    matrix = pd.DataFrame({"src_ipu": r, "dst_ipu": (r + 1) % 128, "bytes": r + 1, "cycles": 1})
    fig = exchange_matrix(matrix, "bytes")
    assert np.asarray(fig.data[0].z).shape == (64, 64) and fig.layout.meta["binned"]
    _, spans = ranks.binned_matrix(matrix["src_ipu"], matrix["dst_ipu"], matrix["bytes"], list(r))
    # WHEN a box holds source bins 2-3 (ranks 4-7) and destination bins 2-4 (ranks 4-9)
    held = ranks.endpoints_in_view({"xaxis.range[0]": 1.6, "xaxis.range[1]": 3.4, "yaxis.range[0]": 4.2,
                                    "yaxis.range[1]": 1.7}, spans, list(r))
    # THEN those ranks, and each pair its own cell: rank s sent s + 1 bytes to s + 1
    assert held == ([4, 5, 6, 7], [4, 5, 6, 7, 8, 9])
    sub = exchange_submatrix(matrix, "bytes", Naming(), *held)
    z = np.asarray(sub.data[0].z, dtype=float)
    assert z.shape == (6, 4) and [z[s - 3, s - 4] for s in (4, 5, 6, 7)] == [5, 6, 7, 8]
    assert np.isnan(z).sum() == 20


def test_a_spread_of_many_ranks_speaks_each_figures_own_units():
    # GIVEN 40 ranks' compute in seconds (rank r: r ms), shown in ms, and a count shown as it is
    frame = pd.DataFrame({"rank": np.arange(40), "compute_s": np.arange(40) / 1e3, "calls": np.full(40, 4)})
    ms = lambda v: f"{v * 1e3:,.2f} ms"  # noqa: E731
    div = c.rank_table(frame, {"rank": "rank", "compute_s": "compute", "calls": "calls"}, {"compute_s": ms})
    # THEN the spread's compute row is in ms (min 0, median 19.5 ms, max 39 ms), not seconds rounded to 0.00
    text = str(div.to_plotly_json())
    assert "0.00 ms" in text and "19.50 ms" in text and "39.00 ms" in text
    # AND a seconds column with no format of its own is spread in the units its rows are shown in (its name's
    # suffix: 19.5 ms, as its cells say), not as a bare number rounded to 0.00
    div = c.rank_table(frame, {"rank": "rank", "compute_s": "compute", "calls": "calls"})
    cells = [c.fmt_seconds(v) for v in (0.0, 0.0195, 0.039)]
    text = str(div.to_plotly_json())
    assert all(cell in text for cell in cells) and "'0.00'" not in text, cells
    # AND a column that names a row (a step's number) is not spread as a figure when the table says so
    frame = frame.assign(step=np.arange(40) + 100)
    spread_rows = c.rank_table(frame, {"rank": "rank", "step": "step", "calls": "calls"}, keys=("step",)).children[1]
    figures = [row.children[0].children for row in spread_rows.children.children[1].children]
    assert figures == ["calls"]


def _compute_share(profile: Path, ranks_: int, edges: np.ndarray) -> np.ndarray:
    """Each rank's share (%) of each bin between ``edges`` spent in compute, from the profile's trace rows: a
    rank's compute spans merged, then cut at the edges, one span at a time."""
    from popvision_py.format.reader import open_profile

    trace = open_profile(profile).read_table("trace").to_pandas()
    trace = trace[trace["phase"].astype(str) == "compute"]
    share = np.zeros((ranks_, len(edges) - 1))
    for rank, rows in trace.groupby("ipu"):
        merged: list[list[int]] = []
        for a, b in sorted(zip(rows["start_cycle"], rows["end_cycle"])):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        for a, b in merged:
            for j in range(len(edges) - 1):
                share[rank, j] += max(0, min(b, edges[j + 1]) - max(a, edges[j]))
    return 100 * share / np.diff(edges)[None, :]


def test_the_trace_page_of_40_ranks_is_a_heat_map_of_compute_and_a_box_draws_a_few_ranks(forty_ranks):
    from dashboards.app import create_app
    from popvision_py.analysis.common.tables import bin_edges

    create_app([str(forty_ranks)])
    page = importlib.import_module("dashboards.pages.trace")
    # WHEN the page draws the whole run
    fig, level, kept = page.render_timeline("a", 0)
    # THEN a heat map of the 40 ranks, each cell the share of its bin each rank spent computing, as the trace's
    # rows say
    heat = fig.data[0]
    assert isinstance(heat, go.Heatmap) and np.asarray(heat.z).shape == (40, ranks.HEATMAP_BINS) and kept is None
    assert "a heat map of 40 ranks" in level and "zoom a box onto 32 of them or fewer" in level
    # on an axis of ms: a trace's ns read as '0.2B' in plotly's own ticks
    assert fig.layout.xaxis.title.text == "ms on the profile's time line"
    start, end = (round(v * 1e6) for v in fig.layout.xaxis.range)
    expected = _compute_share(forty_ranks, 40, bin_edges(start, end, ranks.HEATMAP_BINS))
    assert np.abs(np.asarray(heat.z, np.float64) - expected).max() <= 0.5 and expected.max() > 50  # whole percents
    # WHEN a box is zoomed onto ranks 5 to 9
    fig, level, kept = page.zoom_timeline({"yaxis.range[0]": 4.6, "yaxis.range[1]": 9.4}, "a", 0, kept)
    # THEN their own time lines are drawn, one row each, and the Store keeps them for the next zoom
    assert list(fig.layout.yaxis.categoryarray) == [f"Rank {r}" for r in range(9, 4, -1)] and kept == [5, 10]
    assert isinstance(fig.data[0], go.Bar) and {str(y) for t in fig.data for y in t.y} <= {f"Rank {r}" for r in
                                                                                          range(5, 10)}
    # AND a zoom in time keeps those ranks
    fig, _, again = page.zoom_timeline({"xaxis.range[0]": start / 1e6, "xaxis.range[1]": (start + end) / 2e6}, "a", 0,
                                       kept)
    assert again == [5, 10] and len(fig.layout.yaxis.categoryarray) == 5
    assert fig.layout.xaxis.range == (start / 1e6, (start + end) // 2 / 1e6 + 1e-6)  # the ns asked, and the next
    # AND a reset draws the heat map again
    fig, _, kept = page.render_timeline("a", 1)
    assert isinstance(fig.data[0], go.Heatmap) and kept is None


def test_the_operations_page_of_40_ranks_marks_an_operator_on_a_heat_map(forty_ranks):
    from dashboards.app import create_app

    create_app([str(forty_ranks)])
    page = importlib.import_module("dashboards.pages.operations")
    # WHEN the first operator of the table is chosen
    said, fig, _ = page.select("a", "op", {"row_id": 0, "row": 0, "column": 0})
    # THEN the iteration is a heat map of the 40 ranks, and the operator's executions are marks on its ranks' rows
    heat, marks = go.Figure(fig).data[0], go.Figure(fig).data[-1]  # the dict's arrays decoded
    assert isinstance(heat, go.Heatmap) and fig["data"][0]["z"]["shape"] == f"40, {ranks.HEATMAP_BINS}"
    executions = int(said.split(": ")[-1].split(" stretches")[0].replace(",", ""))  # pieces of the time line
    assert isinstance(marks, go.Bar) and len(marks.y) == executions > 0
    # on the heat map's own rows (named by the ranks' labels: a number would be a row of its own, past the last)
    assert list(heat.y) == [f"Rank {r}" for r in range(40)] and set(marks.y) <= set(heat.y)


def test_the_gpu_pages_first_call_draws_the_ranks_the_picker_starts_with_not_every_rank(forty_ranks):
    from dashboards.app import create_app

    create_app([str(forty_ranks)])
    page = importlib.import_module("dashboards.pages.gpu")
    # WHEN the streams are drawn before the picker holds a value (the page's first call), and with the ranks the
    # picker starts with
    first, _ = page.render_timeline("a", 0, None)
    picked = page.render("a")[4]
    chosen, _ = page.render_timeline("a", 0, picked)
    # THEN both draw the first 8 ranks' streams only, not the 40 ranks'
    assert picked == list(range(page.RANKS_SHOWN))
    lanes = {str(y).split(" · ")[0] for t in first.data for y in (t.y if t.y is not None else [])}
    assert lanes == {f"Rank {r}" for r in range(page.RANKS_SHOWN)}
    assert list(first.layout.yaxis.categoryarray) == list(chosen.layout.yaxis.categoryarray)


def test_the_gpu_pages_figures_of_40_ranks_are_their_distributions_naming_the_slow_rank(forty_ranks):
    from dashboards.app import create_app
    from dashboards import data

    create_app([str(forty_ranks)])
    page = importlib.import_module("dashboards.pages.gpu")
    gpu = data.report("a").gpu
    # WHEN the page draws its figures of each rank (rank 7's GPU the slow one)
    temporal, types, overlap = page.render("a")[6:9]
    # THEN each is a distribution over the 40 ranks, not 40 bars: the ranks sorted by their compute share, the
    # parts stacked to 100 %; the slow rank first and named with how far past the median its compute is
    frame = gpu.temporal()
    compute = frame["compute_pct"].to_numpy(np.float64)
    assert all(isinstance(t, go.Scatter) and len(t.y) == 40 for t in (*temporal.data, *types.data, *overlap.data))
    assert np.allclose(temporal.data[0].y, np.sort(compute)[::-1])
    assert np.allclose(np.sum([t.y for t in temporal.data], axis=0), 100.0)
    past = 100 * (compute[7] / np.median(compute) - 1)
    assert [a.text for a in temporal.layout.annotations] == [f"Rank 7 ({past:+.1f}%)"]
    # AND the kernel types' shares are each rank's, the most computation first: rank 7 again
    shares = gpu.kernel_types_by_rank()
    computation = shares[shares["kernel_type"] == "COMPUTATION"].set_index("rank")["pct"]
    assert types.data[0].name == "computation" and types.data[0].customdata[0] == "Rank 7"
    assert np.allclose(types.data[0].y, np.sort(computation.to_numpy())[::-1])
    # AND the hidden communication runs the least hidden first: every rank but 7 alike, so none is named
    hidden = gpu.overlap()["comm_comp_overlap_pct"].to_numpy(np.float64)
    assert np.allclose(overlap.data[0].y, np.sort(hidden)) and overlap.data[0].customdata[-1] == "Rank 7"
    assert not overlap.layout.annotations
    # AND the steps' table spreads the steps' figures over the ranks, not their numbers: one "step" row, the time
    spread = page.bounds_table(data.report("a")).children[1]
    figures_ = [row.children[0].children for row in spread.children.children[1].children]
    assert figures_.count("step") == 1 and "GPU busy" in figures_


def test_the_ranks_cpu_timelines_read_a_few_files_at_a_time_are_the_same_events(forty_ranks, monkeypatch):
    import dataclasses

    import pyarrow.parquet as pq

    from popvision_py.analysis.host import events, system
    from popvision_py.format import system as files

    paths = files.files_in(forty_ranks.parent / "system")
    assert len(paths) == 40
    # WHEN the 40 files are read 3 at a time (each three joined into one table as they come)
    monkeypatch.setattr(events, "FILES_AT_ONCE", 3)
    chunked = system.load_files(paths)
    # THEN the events are those of the 40 files read together, every file's rows there once
    whole = system.load(files.read_system_files(paths))
    assert len(chunked) == sum(pq.ParquetFile(p).metadata.num_rows for p in paths) > 0
    for field in dataclasses.fields(whole):
        a, b = getattr(whole, field.name), getattr(chunked, field.name)
        assert (np.array_equal(a, b, equal_nan=a.dtype.kind == "f") if isinstance(a, np.ndarray) else a == b), field
    assert len(chunked.processes) == 40
