"""The GPU page on GPU traces the tests write (``gpu_pair``: two ranks; ``gpu_profile``: one), and the other
pages of such an import in a GPU job's words.

``gpu_pair``'s traces are laid out to be worked out by hand (times in µs): each rank's stream 7 runs a compute
kernel of 10 every 20 from 0 (``N`` of them, to 23,990); rank 0's stream 20 an all-reduce [0, 1,000), half of
it behind compute; rank 1's [24,000, 25,000), after its last compute kernel, none of it hidden. ``2N + 2``
kernels: more than the page draws one by one, so the whole trace is drawn in bins.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from dashboards import ids
from popvision_py.analysis.gpu_view import NO_KERNELS_EMULATED
from popvision_py.cli import main
from tests.dashboard.test_browser import ZOOM_THEN_DRAG_MODES, errors, wait_for_figures
from tests.dashboard.test_browser_overlaps import OVERLAPS, WRAPPED_CARDS, show_at
from tests.dashboard.test_callbacks import text
from tests.dashboard.test_layout import CUT_TEXT, TEXT
from tests.importer.test_gpu_timeline import CPU, HEADER, import_gpu_trace, kernel
from tests.importer.test_import_ranges import kineto

N = 1200
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
ALL_REDUCE = {0: (0, 1000), 1: (24_000, 1000)}  # each rank's all-reduce: start, duration (µs)
# Words of an IPU run that no page of a GPU job may say
IPU_WORDS = ("IPU", "Memory over tiles", "FP32", "FP16", "model call", "waits for other ranks", "cycle", "FLOP")
# The summed drawn width of a bar trace's bars (by its name) over the x axis's length, in the browser.
DRAWN_SHARE = """
const gd = document.querySelector(arguments[0] + ' .js-plotly-plot');
const at = gd.data.findIndex(t => t.name === arguments[1]);
let width = 0;
gd.querySelectorAll('.barlayer .trace.bars')[at].querySelectorAll('path').forEach(p => { width += p.getBBox().width; });
return width / gd._fullLayout.xaxis._length;
"""
PAGES = {"/": [ids.SUMMARY_TIME], "/memory": [], "/liveness": [], "/trace": [ids.TRACE_TIMELINE],
         "/gpu": [ids.GPU_TIMELINE, ids.GPU_TEMPORAL, ids.GPU_KERNEL_TYPES, ids.GPU_OVERLAP],
         "/operations": [ids.OPERATIONS_TRACE], "/stages": [ids.STAGES_IMBALANCE], "/exchange": [ids.EXCHANGE_PHASES],
         "/programs": [], "/system": [ids.SYSTEM_TIMELINE]}


def page(name: str):
    return importlib.import_module(f"dashboards.pages.{name}")


@pytest.fixture(scope="module")
def gpu_pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ranks' GPU traces (the module's docstring), imported through the CLI: the profile's path."""
    # a folder named as a user names one: the run's name in the Summary's model card, 20 characters
    folder = tmp_path_factory.mktemp("resnet50_ddp_2ranks")
    for rank, (start, length) in ALL_REDUCE.items():
        header = {**HEADER, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}}
        events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 25_000, **CPU}]
        events += [kernel("ampere_sgemm_128x64_tn", 20 * i, 10, 7) for i in range(N)]
        events.append(kernel(NCCL, start, length, 20))
        (folder / f"rank{rank}.json").write_text(kineto(header, events))
    result = CliRunner().invoke(main, ["import", str(folder / "rank0.json"), str(folder / "rank1.json"), "-o",
                                       str(folder / "out"), "-q"])
    assert result.exit_code == 0, result.output
    return folder / "out" / "profile.pop"


@pytest.fixture()
def pair_app(gpu_pair: Path):
    from dashboards.app import create_app

    return create_app([str(gpu_pair)])


def test_the_gpu_page_is_listed_for_a_gpu_trace_and_says_why_not_elsewhere(pair_app, gpu_pair, oom_profile):
    from dashboards import app as shell, data

    # GIVEN a GPU trace's import THEN the navigation lists the GPU page after the execution trace
    links = [link.children[1] for link in shell.navigation(False, False, shell.any_kernels(data.current()))]
    assert links[3:6] == ["Execution trace", "GPU", "Operations"]
    # AND an IPU profile's does not; opened there, the page says why in one sentence and shows nothing else
    shell.create_app([str(oom_profile)])
    assert not shell.any_kernels(data.current())
    assert "GPU" not in [link.children[1] for link in shell.navigation(False, False, False)]
    note, content, *rest = page("gpu").render("a")
    assert note == NO_KERNELS_EMULATED and content == {"display": "none"}


def test_the_breakdowns_per_rank_are_the_gpu_views(pair_app, gpu_pair):
    import popvision_py as pv

    with pv.open(gpu_pair) as report:
        overlap, temporal, by_name = report.gpu.overlap(), report.gpu.temporal(), report.gpu.kernels_by_name(25)
    # WHEN the page renders
    note, content, cards, options, value, _, temporal_fig, types_fig, overlap_fig, *_, by_rank, kernels = \
        page("gpu").render("a")  # (the tables between: what bound each step, the kernels worth a look, phases)
    assert note is None and content == {} and [o["label"] for o in options] == ["Rank 0", "Rank 1"] and value == [0, 1]
    assert "2,402" in text(cards)  # 2 x 1,200 compute kernels and 2 all-reduces
    # THEN the communication hidden behind computation is the report's: rank 0's all-reduce [0, 1,000) runs
    # beside compute kernels of 10 every 20, half its time; rank 1's after its last compute kernel, none
    shown = list(overlap_fig.data[0].x)
    assert shown == list(overlap["comm_comp_overlap_pct"]) == [50.0, 0.0]
    assert list(overlap_fig.data[0].text) == ["50.0 %", "0.0 %"]
    # AND the temporal breakdown is the report's, from each rank's first kernel to its last: rank 0's 23,990 µs
    # hold 12,000 of compute and 500 of exposed all-reduce; rank 1's 25,000 hold 12,000 and 1,000
    compute = {t.name: list(t.x) for t in temporal_fig.data}
    assert compute["compute"] == list(temporal["compute_pct"])
    assert compute["compute"] == pytest.approx([100 * 12_000 / 23_990, 48.0])
    assert compute["non-compute (communication, memory)"] == pytest.approx([100 * 500 / 23_990, 4.0])
    assert compute["idle"] == pytest.approx([100 * 11_490 / 23_990, 48.0])
    # AND the kernel types show the overlap as its own set on rank 0 only
    sets = {t.name: list(t.y) for t in types_fig.data}
    assert sets["computation overlapping communication"] == ["Rank 0"]
    # AND the kernel table holds the report's rows, times in µs: 1,200 compute kernels of 10 µs on each rank
    rows = kernels.data
    assert len(rows) == len(by_name) == 4 and kernels.sort_action == "native"
    assert rows[0] | {"name": None} == {"rank": 0, "kind": "compute", "name": None, "kernels": N, "sum_us": 12_000.0,
                                        "mean_us": 10.0, "max_us": 10.0, "busy_pct": 48.0}
    # AND popvision's own time per rank within the profiled steps (25,000 µs) is its table
    assert "gpu-by-rank-table" in str(by_rank) and "25.00 ms" in text(by_rank)


def lane_bars(fig, kind: str, lane: str) -> tuple[list[float], list[float]]:
    """The (bases, widths) in ms of one kind's bars on one lane."""
    trace = next(t for t in fig.data if t.name == kind)
    keep = [k for k, y in enumerate(trace.y) if y == lane]
    return [trace.base[k] for k in keep], [trace.x[k] for k in keep]


def test_the_streams_are_binned_past_the_threshold_and_each_kernel_once_zoomed_in(pair_app):
    gpu = page("gpu")
    # GIVEN more kernels (2,402) than the page draws one by one (MAX_KERNELS)
    assert 2 * N + 2 > gpu.MAX_KERNELS
    # WHEN the whole trace is drawn THEN it is in bins: 400 of 62.5 µs over [0, 25,000) µs, each lane's kinds'
    # busy time in each (the compute kernels run in the first 384, to 23,990 µs), which sum to the stream's busy
    # time: 1,200 kernels of 10 µs
    fig, level = gpu.render_timeline("a", 0, None)
    assert fig.layout.meta["level"] == "bins" and level.startswith("level of detail: bins — 400 bins of 62.50 µs")
    bases, widths = lane_bars(fig, "compute", "Rank 0 · stream 7")
    assert len(widths) == 384 and sum(widths) == pytest.approx(12.0)
    assert max(widths) <= 0.0625 and bases[0] == 0.0
    # WHEN zoomed to [0, 0.99) ms THEN each kernel is drawn where it ran: 50 compute kernels a rank and rank 0's
    # all-reduce, with its name, duration and stream on hover
    fig, level = gpu.zoom_timeline({"xaxis.range[0]": 0.0, "xaxis.range[1]": 0.99}, "a", 0, None)
    assert fig.layout.meta["level"] == "events" and level.startswith("level of detail: kernels — 101 kernels")
    bases, widths = lane_bars(fig, "compute", "Rank 1 · stream 7")
    assert bases == pytest.approx([0.02 * i for i in range(50)]) and widths == pytest.approx([0.01] * 50)
    comm = next(t for t in fig.data if t.name == "communication")
    assert list(comm.y) == ["Rank 0 · stream 20"] and list(comm.x) == [1.0]
    assert comm.customdata[0][0] == NCCL and comm.customdata[0][2] == 20
    # AND a rank chosen alone keeps its lanes only; double-click is the whole trace again, in bins
    fig, _ = gpu.zoom_timeline({"xaxis.range[0]": 0.0, "xaxis.range[1]": 0.99}, "a", 0, [1])
    assert set(fig.layout.yaxis.categoryarray) == {"Rank 1 · stream 7", "Rank 1 · stream 20"}
    fig, _ = gpu.zoom_timeline({"xaxis.autorange": True}, "a", 0, None)
    assert fig.layout.meta["level"] == "bins"


def test_a_lone_gpu_rank_is_not_said_to_wait_for_others(tmp_path):
    from dashboards.app import create_app

    # GIVEN a one-rank GPU trace's import (tests/importer/test_gpu_timeline.py's)
    create_app([str(import_gpu_trace(tmp_path))])
    # THEN its idle card, Stages' and Exchange's say what idle is on a GPU, and the System page has no model call
    cards = text(page("summary").render("a")[0])
    assert "Idle 55.0 % of the rank time: no kernel runs on the GPU" in cards and "other ranks" not in cards
    assert "no kernel runs on the GPU" in text(page("stages").render("a")[0])
    assert "no kernel runs on the GPU" in text(page("exchange").render("a")[0])
    assert "model call" not in text(page("system").render_figures("a")[1])
    # AND the Summary's tile insights are hidden
    assert page("summary").render_words("a")[2] == {"display": "none"}


def test_a_gpu_traces_copies_and_sets_are_a_share_of_their_own_on_the_summary_and_the_trace(tmp_path):
    from dashboards.app import create_app

    # GIVEN the one-rank GPU trace of tests/importer/test_gpu_timeline.py: of its 1,000 µs, compute 250, the
    # all-reduce alone 150, a copy of 40 µs and a set of 10 µs, idle 550
    create_app([str(import_gpu_trace(tmp_path))])
    # THEN the Summary's bar of the rank's time has the copies and sets as a share of their own, and its shares
    # add up to the whole time
    bar = page("summary").render("a")[2]
    shares = {t.name.rsplit(" ", 2)[0]: float(t.x[0]) for t in bar.data}
    assert shares == {"compute": 25.0, "exposed communication": 15.0, "copies and sets": 5.0, "idle": 55.0}
    # AND the Execution trace's cards say the same, and its time line draws the copy and the set where they ran
    assert "copies and sets" in page("trace").render_words("a")[0]
    cards = text(page("trace").render_figures("a")[0])
    assert "copies and sets 5.0 % of rank time" in cards and "idle 55.0 % of rank time" in cards
    timeline = page("trace").render_timeline("a", None)[0]
    copies = next(t for t in timeline.data if t.name == "copies and sets")
    spans = sorted(zip(copies.base, copies.base + copies.x))
    assert spans == pytest.approx([(0.52, 0.56), (0.6, 0.61)])  # ms from the step's start, on an axis of ms
    # AND the Exchange page's rank stacks compute, exposed communication, copies and sets and idle to its 1 ms
    figure, table = page("exchange").render_communication("a")
    stacked = {t.name: float(t.y[0]) for t in figure.data if t.offsetgroup == "time"}
    assert stacked == pytest.approx({"compute": 0.25, "exposed communication": 0.15, "copies and sets": 0.05,
                                     "idle": 0.55})  # ms
    assert "copies and sets" in text(table)


def test_a_trace_that_states_no_world_and_a_step_of_seconds_reads_as_such_on_the_summary(tmp_path):
    from dashboards.app import create_app
    from tests.importer.test_gpu_timeline import events

    # GIVEN a GPU trace without distributedInfo whose one profiler step lasts 40 s (a model's first, slow step)
    header = {k: v for k, v in HEADER.items() if k != "distributedInfo"}
    steps = [{**e, "dur": 40e6} if e["name"] == "ProfilerStep#1" else e for e in events()]
    (tmp_path / "rank0.json").write_text(kineto(header, steps))
    result = CliRunner().invoke(main, ["import", str(tmp_path / "rank0.json"), "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.output
    create_app([str(tmp_path / "out" / "profile.pop")])
    # THEN the Summary says the traces state no world size (not "None"), and a step each 40 s, 0.025 a second
    summary = page("summary").render("a")
    cards, source = text(summary[0]), text(summary[1])
    assert "a world size the traces do not state" in cards and "None" not in cards
    assert "rank 0 of a world size the traces do not state" in source and "None" not in source
    assert f"Throughput {1 / 40:.3g} /s" in cards


@pytest.mark.browser
def test_a_gpu_imports_pages_draw_in_a_gpu_jobs_words(dash_duo, pair_app, gpu_pair):
    import popvision_py as pv

    with pv.open(gpu_pair) as report:
        overlap = report.gpu.overlap()
    # GIVEN the dashboard on a two-rank GPU trace's import
    dash_duo.start_server(pair_app)
    for path, graphs in PAGES.items():
        # WHEN each page is opened THEN it draws with no console error, and says no IPU run's words
        dash_duo.wait_for_page(url=f"{dash_duo.server_url}{path}")
        wait_for_figures(dash_duo, graphs)
        dash_duo.wait_for_element(".page-description", timeout=10)
        if path in ("/", "/gpu", "/system"):
            dash_duo.wait_for_element(".cards .card", timeout=10)
        if path == "/gpu":
            dash_duo.wait_for_contains_text(f"#{ids.GPU_LEVEL}", "level of detail: bins", timeout=10)
            # AND the compute bins are drawn as wide as their busy time: each rank's 1,200 kernels of 10 µs on the
            # 25 ms axis, 0.96 of its length over the two lanes (a bin's bar of about a pixel is not widened to two)
            drawn = dash_duo.driver.execute_script(DRAWN_SHARE, f"#{ids.GPU_TIMELINE}", "compute")
            assert drawn == pytest.approx(2 * N * 10 / 25_000, abs=0.03)
            # AND the communication hidden behind computation is the report's, to its one decimal
            labels = [t.text for t in dash_duo.find_elements(f"#{ids.GPU_OVERLAP} .bartext")]
            assert labels == [f"{p:.1f} %" for p in overlap["comm_comp_overlap_pct"]] == ["50.0 %", "0.0 %"]
            # AND a zoom to [0, 0.49] ms (as a drag sets the axis) draws each kernel there: 25 compute kernels a
            # rank and rank 0's all-reduce
            graph = f"document.querySelector('#{ids.GPU_TIMELINE} .js-plotly-plot')"
            dash_duo.driver.execute_script(f"Plotly.relayout({graph}, {{'xaxis.range[0]': 0, 'xaxis.range[1]': 0.49}})")
            dash_duo.wait_for_contains_text(f"#{ids.GPU_LEVEL}", "level of detail: kernels — 51 kernels", timeout=10)
            # AND at 1,280 and 1,920 px no card, table or panel cuts its text, no mode bar covers a legend or title
            for width in (1280, 1920):
                show_at(dash_duo, width)
                found = [dash_duo.driver.execute_script(check, *args) for check, args in (
                    (CUT_TEXT, [TEXT]), (OVERLAPS, []), (WRAPPED_CARDS, []))]
                assert found == [[], [], []], width
        # (the rendered text: what a reader sees, none of a hidden panel's)
        shown = dash_duo.driver.execute_script("return document.getElementById('_pages_content').innerText")
        assert errors(dash_duo) == [], path
        assert [w for w in IPU_WORDS if w in shown] == [], path
        if path == "/":
            assert "no kernel runs on the GPU" in shown
            # AND the run's name holds one line of its card at 1,280 and 1,920 px (set smaller, not broken)
            assert "resnet50_ddp_2ranks0" in shown
            for width in (1280, 1920):
                show_at(dash_duo, width)
                assert dash_duo.driver.execute_script(WRAPPED_CARDS) == [], width
    # AND the navigation lists the GPU page after the execution trace
    links = [link.text.split("\n")[-1] for link in dash_duo.find_elements(".nav-link")]
    assert links == ["Summary", "Memory", "Liveness", "Execution trace", "GPU", "Operations", "Stages", "Exchange",
                     "Program tree", "System"]


# the cells of one short word (16 characters at most) drawn on more than one line
BROKEN_WORDS = ("return [...document.querySelectorAll(arguments[0] + ' td')].filter(td => {"
                "const t = td.textContent; if (t.length > 16 || /\\s/.test(t)) return false;"
                "const r = document.createRange(); r.selectNodeContents(td); return r.getClientRects().length > 1;"
                "}).map(td => td.textContent);")
SCROLLS = ("const box = document.querySelector(arguments[0] + ' .dash-spreadsheet-container');"
           "return box ? box.scrollWidth - box.clientWidth : null;")


@pytest.mark.browser
def test_the_tables_of_kernels_with_long_names_fit_a_page_1280_px_wide(dash_duo, tmp_path):
    from dashboards.app import create_app
    from tests.importer.test_gpu_timeline import events

    # GIVEN a GPU trace whose kernel has a C++ template's long name and whose operator's has no space to wrap at
    name = "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<c10::Half, " \
           "float, c10::Half, 2ul, 32>(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>)"
    op = "torch::autograd::CppNode<SplitLookupFunction_rowwise_adagrad_Op>"
    trace = [{**e, "name": op} if e["name"] == "aten::mm" else {**e, "name": name} if e["name"].startswith(
        "ampere_sgemm") else e for e in events()]
    # (and a module's annotation named by its class's whole path, as TorchRec's are)
    trace.append({"ph": "X", "cat": "user_annotation", "ts": 60, "dur": 30, **CPU, "name": "<class '<torch_package_0>"
                  ".dper3.modules.grouped_embedding._FeatureProcessorWrapper_with_a_long_name_of_its_own'>"})
    (tmp_path / "rank0.json").write_text(kineto(HEADER, trace))
    result = CliRunner().invoke(main, ["import", str(tmp_path / "rank0.json"), "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.output
    dash_duo.start_server(create_app([str(tmp_path / "out" / "profile.pop")]))
    # WHEN the Operations and GPU pages are opened in a window 1,280 px wide
    for path, table in (("/operations", ids.OPERATIONS_TABLE), ("/gpu", "gpu-worth-table")):
        dash_duo.wait_for_page(url=f"{dash_duo.server_url}{path}")
        dash_duo.wait_for_element(f"#{table} td", timeout=20)
        show_at(dash_duo, 1280)
        # THEN the table shows every column without scrolling sideways (its names wrap instead)
        assert dash_duo.driver.execute_script(SCROLLS, f"#{table}") == 0, path
        assert errors(dash_duo) == [], path
    # AND the System page's table of host events breaks the long name, not a short word beside it ("annotation")
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/system")
    dash_duo.wait_for_element("#system-events-table td", timeout=20)
    show_at(dash_duo, 1280)
    assert dash_duo.driver.execute_script(BROKEN_WORDS, "#system-events-table") == []


@pytest.mark.browser
def test_a_zoom_is_drawn_though_the_drag_mode_changes_while_it_is_asked_for(dash_duo, pair_app):
    # GIVEN the GPU page of a two-rank GPU trace's import, its whole trace drawn in bins
    dash_duo.start_server(pair_app)
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/gpu")
    dash_duo.wait_for_contains_text(f"#{ids.GPU_LEVEL}", "level of detail: bins", timeout=10)
    # WHEN a zoom to [0, 0.49] ms is followed at once by clicks on the mode bar's pan and zoom
    dash_duo.driver.execute_script(ZOOM_THEN_DRAG_MODES, f"#{ids.GPU_TIMELINE}", 0, 0.49)
    # THEN the zoom's kernels are drawn all the same: 25 compute kernels a rank and rank 0's all-reduce
    dash_duo.wait_for_contains_text(f"#{ids.GPU_LEVEL}", "level of detail: kernels — 51 kernels", timeout=10)
    assert errors(dash_duo) == []


def test_the_exchange_page_lists_a_gpu_traces_collectives_by_process_group(tmp_path):
    from dashboards.app import create_app

    # GIVEN a one-rank GPU trace's import: one all-reduce of 1,000 BFloat16 elements over a group of 1, 250 µs
    create_app([str(import_gpu_trace(tmp_path))])
    exchange = page("exchange")
    # WHEN the Exchange page is drawn THEN its collectives section shows: 2,000 bytes in 250 µs is 0.008 GB/s
    style, table = exchange.render_collectives("a")
    assert style == {} or style.get("display") != "none"
    row = text(table)
    assert all(word in row for word in ("Rank 0", "AllReduce", "1 rank", "1.95 KiB", "0.008"))
    # AND the source-destination matrix draws no rank-to-itself cell, saying why
    matrix = exchange.render_matrix("a", "bytes")
    said = " ".join(a.text for a in matrix.layout.annotations).replace("<br>", " ")
    assert not matrix.data and exchange.NO_POINT_TO_POINT in said
    # AND the longest transfers name the kernel without its arguments, sent to its group
    transfers = text(exchange.render("a")[4])
    assert "ncclKernel_AllReduce_RING_LL_Sum_bf16 " in transfers + " " and "its group" in transfers
    # AND the bandwidth achieved by kind is a table: the all-reduce's size is known
    assert "collective" in text(exchange.render("a")[3]) and exchange.NO_SIZES not in text(exchange.render("a")[3])


def test_the_exchange_page_says_why_no_bandwidth_is_shown_where_no_transfer_has_a_size(pair_app):
    # GIVEN two ranks whose NCCL kernels record no message size
    exchange = page("exchange")
    # THEN the Exchange page's bandwidth by kind says why it is empty, not "Nothing to show."
    assert text(exchange.render("a")[3]) == exchange.NO_SIZES


def import_unnamed_peers(folder: Path) -> Path:
    """A one-rank GPU trace (``events()``'s) whose rank also ran a SendRecv and a Recv kernel on a stream of its own,
    no c10d call naming their peer (as HTA's sampled traces hold them), imported: the profile's path."""
    from tests.importer.test_gpu_timeline import events

    kernels = [kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", 700, 30, 21),
               kernel("ncclDevKernel_Recv(ncclDevKernelArgsStorage<4096ul>)", 750, 20, 21)]
    (folder / "rank0.json").write_text(kineto(HEADER, events() + kernels))
    result = CliRunner().invoke(main, ["import", str(folder / "rank0.json"), "-o", str(folder / "out"), "-q"])
    assert result.exit_code == 0, result.output
    return folder / "out" / "profile.pop"


def test_a_point_to_point_kernel_whose_peer_the_trace_does_not_name_is_not_said_to_go_to_its_own_rank(tmp_path):
    from dashboards.app import create_app

    # GIVEN a GPU trace whose rank ran a SendRecv and a Recv kernel, their peer named by no c10d call
    create_app([str(import_unnamed_peers(tmp_path))])
    # THEN the longest transfers say the SendRecv goes from the rank to a peer the traces do not name, and the Recv
    # comes from one to the rank; neither from Rank 0 to Rank 0
    shown = page("exchange").render("a")[4]
    body = next(part for part in shown.children.children if type(part).__name__ == "Tbody")  # Div > Table
    cells = [[td.children for td in tr.children] for tr in body.children]  # rank, step, name, kind, from, to, ...
    rows = {row[2]: (row[4], row[5]) for row in cells if "Recv" in row[2]}
    peer = page("exchange").UNNAMED_PEER
    assert rows == {"ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t": ("Rank 0", peer),
                    "ncclDevKernel_Recv": (peer, "Rank 0")}


def test_the_kernels_worth_a_look_leave_out_an_empty_module_and_break_a_long_operator_name(pair_app):
    import pandas as pd

    # GIVEN kernels launched from an operator whose C++ name has no space to wrap at, and no module recorded
    op = "torch::autograd::CppNode<SplitLookupFunction_rowwise_adagrad_Op>"
    frame = pd.DataFrame({"rank": [0], "name": ["void split_embedding_backward<c10::Half>"], "op": [op],
                          "module": [""], "kernels": [2], "total_us": [23_469.0], "median_us": [11_734.5],
                          "launch_median_us": [8.0], "why": ["long"]})
    table = page("gpu").names_table(frame, page("gpu").WORTH_COLUMNS, "t", text=("name", "op", "module", "why"))
    # THEN the module column is left out, and every column of words may break inside a word (the table fits a
    # page 1,280 px wide instead of scrolling: the operator's name alone is 65 characters)
    assert [c["id"] for c in table.columns] == ["rank", "name", "op", "kernels", "total_us", "median_us",
                                                 "launch_median_us", "why"]
    styles = {s["if"]["column_id"]: s for s in table.style_cell_conditional}
    assert all(styles[k]["wordBreak"] == "break-word" for k in ("name", "op", "why"))
    assert table.data[0]["op"] == op


def test_the_gpu_page_says_what_bound_each_step_the_kernels_worth_a_look_and_the_phases(tmp_path):
    from dashboards.app import create_app
    from tests.importer.test_gpu_bound import HEADER as BOUND_HEADER, events as bound_events

    # GIVEN tests/importer/test_gpu_bound.py's trace: a launch-, an input- and a GPU-bound step, a tiny kernel
    # launched 100 times in aten::add, two micro-batches on two streams overlapping 400 µs
    (tmp_path / "rank0.json").write_text(kineto(BOUND_HEADER, bound_events()))
    result = CliRunner().invoke(main, ["import", str(tmp_path / "rank0.json"), "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.output
    create_app([str(tmp_path / "out" / "profile.pop")])
    gpu = page("gpu")
    built = {t.title: t.build(data_report()) for t in gpu.TABLES}
    tables = {title: text(table) for title, table in built.items()}
    # THEN the steps' verdicts read in order, with the tiny kernel's operator and module, and mb0 beside mb1
    bounds = tables["What bound each step"]
    assert bounds.index("launch-bound") < bounds.index("input-bound") < bounds.index("gpu-bound")
    worth = {row["name"]: row for row in built["Kernels worth a look"].data}  # a sortable table's rows
    tiny = worth["void tiny_add_kernel<float>"]
    assert (tiny["op"], tiny["module"], tiny["kernels"], tiny["median_us"]) == ("aten::add", "nn.Module: Bias_0",
                                                                                 100, 2.0)
    phases = tables["Phases from the trace's annotations"]
    assert "mb0" in phases and "400.00 µs" in phases and "40.0 %" in phases


def data_report():
    from dashboards import data

    return data.report("a")


def test_a_long_runs_steps_are_summed_up_a_rank_then_the_slowest_listed(tmp_path):
    from dashboards import components as c
    from dashboards.app import create_app
    from tests.importer.test_gpu_bound import import_long_run

    # GIVEN one rank's 30 profiler steps of 1 ms, but step 17 of 3 ms, every one GPU-bound
    create_app([str(import_long_run(tmp_path, 30))])
    gpu = page("gpu")
    # WHEN the page says what bound each step
    shown = gpu.bounds_table(data_report())
    words = text(shown)
    # THEN not 30 rows: the rank's steps in one row (30 of them, each GPU-bound, the median 1 ms, the slowest step
    # 17 of 3 ms), then the 25 slowest steps, step 17 first
    summary, note, slowest = shown.children
    assert len(summary.children.children[1].children) == 1  # the summary table's one row
    assert all(w in text(summary) for w in ("30 gpu-bound", c.fmt_seconds(1e-3), c.fmt_seconds(3e-3), "17"))
    assert "The 25 slowest of 30 steps" in words
    rows = slowest.children.children[1].children
    assert len(rows) == 25 and text(rows[0]).split()[:2] == ["0", "17"]
