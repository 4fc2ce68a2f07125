"""The pages' callbacks and the CLI, called as plain functions on small synthetic profiles."""

from __future__ import annotations

import importlib
from pathlib import Path

import dash
import numpy as np
import pytest
from click.testing import CliRunner

from dashboards import ids
from popvision_py.cli import main


def page(name: str):
    # The app fixture built the app, which (re)loaded the page modules.
    return importlib.import_module(f"dashboards.pages.{name}")


def text(component) -> str:
    """All the text inside a Dash component tree."""
    if component is None:
        return ""
    if isinstance(component, (str, int, float)):
        return str(component)
    if isinstance(component, (list, tuple)):
        return " ".join(text(c) for c in component)
    return text(getattr(component, "children", None))


def test_pages_register_in_order_and_compare_needs_two_profiles(app):
    pages = list(dash.page_registry.values())
    assert [p["path"] for p in pages] == ["/", "/memory", "/liveness", "/trace", "/gpu", "/operations", "/stages",
                                          "/exchange", "/programs", "/system", "/compare", "/whatif"]
    assert pages[-2]["needs_two_profiles"] is True
    assert pages[-1]["needs_tune"] is True
    assert pages[4]["needs_kernels"] is True  # the GPU page: listed only for a GPU trace's import


def test_summary_says_the_run_does_not_fit(app):
    cards, ranges, time, memory, insights = page("summary").render("a")
    assert "Fits in memory no" in text(cards)
    assert ranges is None  # this synthetic profile's manifest has no prediction: no ranges panel
    assert "out of memory" in text(insights)
    assert [t.name.split()[0] for t in time.data] == ["compute", "sync", "exchange", "stream", "idle"]


def test_a_browser_cannot_name_a_file_only_a_served_profile(app, oom_profile):
    from dashboards import data

    profiles = data.current()
    assert profiles.key("../../etc/passwd") == "a"
    assert profiles.report("/etc/passwd").path == profiles.report("a").path


def test_clicked_tile_is_the_cell_under_the_click(app):
    memory = page("memory")
    # 64 tiles are laid 14 per row
    assert memory.clicked_tile({"points": [{"x": 11, "y": 0}]}, 64) == 11
    assert memory.clicked_tile({"points": [{"x": 7, "y": 4}]}, 64) == 63
    assert memory.clicked_tile({"points": [{"x": 8, "y": 4}]}, 64) is None  # past the last tile
    assert memory.clicked_tile(None, 64) is None


def test_a_tile_click_shows_that_tiles_breakdown_and_variables(app):
    highlight, title, breakdown, variables, selected = page("memory").show_tile({"points": [{"x": 11, "y": 0}]}, 0, "a")
    assert selected == {"ipu": 0, "tile": 11}
    assert text(title).startswith("IPU 0, tile 11")
    assert "out of memory" in text(title)
    assert "B1/weight" in text(variables)
    assert {bar.name for bar in breakdown.data} == {"always-live", "not always-live"}


def test_memory_opens_on_the_worst_ipu_and_its_fullest_tile(app):
    options, ipu, cards, *_ = page("memory").render_overview("a")
    assert ipu == 0 and len(options) == 2
    tile_map, title, _, _, _ = page("memory").render_ipu(0, "peak", None, None, "a")
    assert text(title).startswith("IPU 0, tile 0")
    assert tile_map.data[1].name == "out of memory (64)"


def test_liveness_starts_at_the_peak_and_lists_what_is_live_at_a_step(app):
    liveness = page("liveness")
    options, ipu, step = liveness.choose_peak("a")
    assert (ipu, step) == (0, 1)
    title, table = liveness.show_live(0, 1, "a")
    assert "B1/activation" in text(table) and "B2/activation" in text(table)
    title, table = liveness.show_live(0, 6, "a")
    assert "activation" not in text(table) and "B1/weight" in text(table)
    title, _ = liveness.show_live(0, 99, "a")
    assert "has no program step 99" in text(title)


def test_liveness_click_chooses_the_ipu_and_step_of_the_point(app):
    assert page("liveness").choose_clicked({"points": [{"x": 4, "customdata": ["1", "B4/bwd"]}]}) == (1, 4)
    with pytest.raises(dash.exceptions.PreventUpdate):
        page("liveness").choose_clicked({"points": [{"x": 4}]})


def test_zoom_windows_are_clamped_to_the_run(app):
    window = page("trace").window_from_relayout
    assert window({"xaxis.range[0]": -50.5, "xaxis.range[1]": 200.2}, (0, 1000)) == (0, 201)
    assert window({"xaxis.range": [900, 5000]}, (0, 1000)) == (900, 1000)
    assert window({"xaxis.autorange": True}, (0, 1000)) == (0, 1000)
    assert window({"dragmode": "pan"}, (0, 1000)) is None


def test_zooming_asks_the_server_for_a_finer_level_of_detail(app, monkeypatch):
    trace = page("trace")
    monkeypatch.setattr(trace, "MAX_BINS", 40)
    whole, level, _ = trace.render_timeline("a", 0)
    assert level.startswith("level of detail: bins")
    assert sum(len(t.x) for t in whole.data) <= 40 * 5 * 2
    zoomed, level, _ = trace.zoom_timeline({"xaxis.range[0]": 0, "xaxis.range[1]": 300}, "a", 0)
    assert level.startswith("level of detail: events")
    assert list(zoomed.layout.xaxis.range) == [0, 301]


def test_tile_cycles_of_the_costliest_compute_set(app):
    trace = page("trace")
    options, step = trace.choose_ipu(0, "a")
    assert options[0]["label"].startswith(f"step {step} ")
    # IPU 0's costliest compute set is B1's backward: 2 x 100 cycles, run 6 micro-batches x 2 iterations
    assert options[0]["label"] == "step 4 · B1/bwd · 200 cycles × 12"
    fig = trace.show_tile_cycles(step, 0, "a")
    assert len(fig.data[0].x) == 64
    # tile t computes 200 x (64 - t) // 64 cycles (tests/synthetic.py): tile 0 is the slowest, busy all the step
    cycles = [200 * (64 - t) // 64 for t in range(64)]
    assert list(fig.data[0].customdata) == cycles
    assert list(fig.data[0].y) == [100 * c / 200 for c in cycles]
    shares = [100 * c / 200 for c in cycles]
    assert (f"least {min(shares):.1f} % · mean {sum(shares) / 64:.1f} % · most 100.0 %"
            in fig.layout.title.text)


def test_stages_show_the_gantt_and_the_split(app):
    cards, gantt, imbalance, utilisation, split_text, split_fig, table = page("stages").render("a")
    assert {t.name for t in gantt.data} == {"forward", "backward"}
    assert "F1" in list(gantt.data[0].text)
    # one bar per stage, micro-batch and iteration in each pass: 2 x 6 x 2
    assert [len(t.x) for t in gantt.data] == [24, 24]
    assert "Stages 2" in text(cards)
    # B1,B2 | B3,B4 already splits the forward cycles 160 | 160: no better split to suggest
    assert text(split_text) == "The current split is already the best one the analysis finds."
    assert "B1,B2" in text(table) and "B3,B4" in text(table)


def test_exchange_matrix_and_costliest_steps(app):
    cards, phases, kinds, bandwidth, costliest = page("exchange").render("a")
    assert "IPU 0" in text(costliest)
    # each stage's 50-cycle exchange to the other runs 6 micro-batches x 2 iterations: 600 cycles
    assert "S0/fwd/exchange inter_ipu IPU 0 IPU 1 7.81 KiB 50 12 600" in text(costliest)
    assert "S1/bwd/exchange inter_ipu IPU 1 IPU 0 7.81 KiB 50 12 600" in text(costliest)
    matrix = page("exchange").render_matrix("a", "cycles")
    assert matrix.data[0].colorbar.title.text == "cycles"
    z = np.array(matrix.data[0].z, dtype=float)  # rows are destinations, columns sources
    assert list(matrix.data[0].x) == ["IPU 0", "IPU 1"] and z[0, 1] == z[1, 0] == 600
    assert np.isnan(z[0, 0]) and np.isnan(z[1, 1])


def test_compare_with_one_profile_says_how_to_compare(app):
    header, *_ = page("compare").render("a")
    assert "two profiles" in text(header)


def test_compare_puts_both_profiles_side_by_side(compare_app):
    header, cards, memory, stages, phases, tables = page("compare").render("a")
    assert "A · synthetic pipelined" in text(header) and "B · synthetic sharded" in text(header)
    assert "time per step" in text(cards)
    assert [t.name for t in memory.data] == [
        "A · synthetic pipelined (pipelined.pop)", "B · synthetic sharded (sharded.pop)"]


def test_cli_rejects_a_bad_profile_before_starting_a_server(tmp_path: Path, monkeypatch):
    started = []
    monkeypatch.setattr(dash.Dash, "run", lambda self, **kw: started.append(kw))
    bad = tmp_path / "bad.pop"
    bad.write_bytes(b"not a profile")
    result = CliRunner().invoke(main, ["dashboard", str(bad)])
    assert result.exit_code == 2
    assert result.output.startswith("Error: ") and "Traceback" not in result.output
    assert started == []


def test_cli_serves_on_localhost_and_warns_elsewhere(oom_profile: Path, monkeypatch):
    started = []
    monkeypatch.setattr(dash.Dash, "run", lambda self, **kw: started.append(kw))
    result = CliRunner().invoke(main, ["dashboard", str(oom_profile)])
    assert result.exit_code == 0, result.output
    assert started[-1]["host"] == "127.0.0.1" and started[-1]["port"] == 8050
    assert "Warning" not in result.output
    result = CliRunner().invoke(main, ["dashboard", str(oom_profile), str(oom_profile), "--host", "0.0.0.0",
                                       "--port", "9000"])
    assert result.exit_code == 0, result.output
    assert started[-1]["host"] == "0.0.0.0" and started[-1]["port"] == 9000
    assert "Warning: listening on 0.0.0.0" in result.output


def test_the_warm_up_reads_the_trace_for_the_trace_and_stages_pages_too(pipelined_profile, monkeypatch):
    # GIVEN a dashboard whose background warm-up has run
    from dashboards import data
    from dashboards.app import create_app
    from popvision_py.format import Profile

    create_app([str(pipelined_profile)], warm=True)

    # WHEN the trace and stages pages then ask for the timeline and the Gantt chart
    def no_more_reads(self, *args, **kwargs):
        raise AssertionError("the trace was read again after the warm-up")

    monkeypatch.setattr(Profile, "iter_batches", no_more_reads)
    monkeypatch.setattr(Profile, "read_table", no_more_reads)
    page("trace").render_timeline("a", 0)
    page("trace").zoom_timeline({"xaxis.range[0]": 100, "xaxis.range[1]": 5000}, "a", 0)
    page("stages").render("a")
    # THEN they are answered from the cache: no table is read again
    report = data.report("a")
    assert len(report.stages.gantt()) > 0


def test_an_error_in_the_warm_up_index_thread_is_raised_by_the_warm_up(pipelined_profile, monkeypatch):
    # GIVEN a dashboard whose timeline index (built in a thread of the warm-up) cannot be made
    from dashboards import data
    from dashboards.app import create_app
    from popvision_py.analysis.trace import rows as tracerows

    create_app([str(pipelined_profile)])

    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise MemoryError("no room for the index")

    monkeypatch.setattr(tracerows, "timeline_arrays", broken)
    # WHEN the warm-up runs THEN the thread's own error comes out of it (not lost in the thread and met
    # again by the timeline asked for after it: the index was attempted once)
    with pytest.raises(MemoryError, match="no room for the index"):
        data.current().warm()
    assert calls == [1]


@pytest.mark.parametrize("setting,on", [(None, False), ("1", True), ("0", False)])
def test_the_dashboard_process_leaves_numpy_on_small_pages_unless_told(pipelined_profile, setting, on):
    # GIVEN a fresh process (NumPy's switch is per process), with or without NUMPY_MADVISE_HUGEPAGE
    import os
    import subprocess
    import sys

    code = ("import sys, numpy as np\n"
            "from dashboards import data\n"
            "data.Profiles([sys.argv[1]])\n"
            "core = getattr(np, '_core', None) or np.core  # NumPy 2, NumPy 1\n"
            "print(core.multiarray._set_madvise_hugepage(True))\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if setting is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = setting
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = str(root)
    # WHEN the dashboard's profiles are made THEN NumPy asks for huge pages only if the user said so
    done = subprocess.run([sys.executable, "-c", code, str(pipelined_profile)], env=env, cwd=root,
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(on)


def test_tiles_in_time_follow_the_window_at_its_level_of_detail(app, monkeypatch):
    trace = page("trace")
    monkeypatch.setattr(trace, "MAX_BINS", 40)
    # GIVEN the page's first draw: the 8 busiest tiles of IPU 0 over the whole run, in bins
    fig, level = trace.render_tile_timeline(None, "worst 8", 0, "a")
    assert level.startswith("level of detail: bins — 40 bins") and level.endswith(
        "the 8 busiest tiles (most compute cycles over the run)")
    assert list(fig.layout.yaxis.ticktext) == [f"tile {t}" for t in range(8)]
    assert {t.name for t in fig.data} >= {"compute", "wait (done, at the sync)", "sync", "exchange", "idle"}
    # WHEN the IPU time line is zoomed to 300 cycles THEN the window is stored and the tiles show its executions
    window = trace.follow_window({"xaxis.range[0]": 0, "xaxis.range[1]": 300}, None, 0, "a", trigger=trace.IPU_MOVES)
    assert window == [0, 301]
    fig, level = trace.render_tile_timeline(window, "0, 63", 0, "a")
    assert level.startswith("level of detail: events") and level.endswith("· 2 tiles")
    assert list(fig.layout.xaxis.range) == [0, 301]
    # tile 63 computes 100 × 1 // 64 = 1 cycle of B1's 100-cycle forward compute set, then waits 99
    compute = next(t for t in fig.data if t.name == "compute")
    wait = next(t for t in fig.data if t.name == "wait (done, at the sync)")
    assert 1 in list(compute.x) and 99 in list(wait.x)
    # AND a choice the analysis cannot read is its one sentence, in place of the figure
    fig, level = trace.render_tile_timeline(window, "0-3, x", 0, "a")
    assert level == "'x' is not a tile, a range like 100-131 or 'worst N'."
    # AND a reset (or a new profile) goes back to the whole run
    assert trace.follow_window(None, None, 1, "a", trigger=ids.TRACE_RESET) is None
