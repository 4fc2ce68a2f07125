"""The figure builders and formatters, called as plain functions on frames shaped like the API's."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dashboards import components as c
from dashboards.figures.exchange import exchange_matrix, phase_shares
from dashboards.figures.liveness import liveness_steps
from dashboards.figures.memory import tile_map
from dashboards.figures.stages import micro_batch_labels, stage_cycles, stage_imbalance, stage_utilisation, stages_gantt
from dashboards.figures.trace import timeline_bars, trace_timeline


def by_tile_frame(totals: list[int], capacity: int) -> pd.DataFrame:
    totals = np.array(totals)
    return pd.DataFrame({
        "ipu": 0, "tile": np.arange(len(totals)), "always_live_bytes": totals, "not_always_live_bytes": 0,
        "total_bytes": totals, "excess_bytes": np.maximum(totals - capacity, 0), "oom": totals > capacity,
    })


def test_tile_map_lays_every_tile_on_a_grid_and_crosses_the_out_of_memory_ones():
    # GIVEN 10 tiles of 1 KiB capacity, tiles 3 and 9 over it
    frame = by_tile_frame([512] * 3 + [2048] + [256] * 5 + [1536], capacity=1024)
    # WHEN drawn 4 tiles per row
    fig = tile_map(frame, tiles_per_ipu=10, bytes_per_tile=1024, selected_tile=5, columns=4)
    # THEN the heat map is 3 rows of 4, the 2 cells past tile 9 are blank, the scale ends at capacity
    heat = fig.data[0]
    z = np.array(heat.z, dtype=float)
    assert z.shape == (3, 4)
    assert np.isnan(z[2, 2]) and np.isnan(z[2, 3])
    assert z[0, 3] == 2.0 and z[2, 1] == 1.5
    assert heat.zmax == 1.0
    # AND the out-of-memory marker sits on tiles 3 (row 0, col 3) and 9 (row 2, col 1)
    oom = fig.data[1]
    assert list(oom.x) == [3, 1] and list(oom.y) == [0, 2]
    assert oom.name == "out of memory (2)"
    # AND the selected tile 5 (row 1, col 1) is outlined
    shape = fig.layout.shapes[0]
    assert (shape.x0, shape.x1, shape.y0, shape.y1) == (0.5, 1.5, 0.5, 1.5)


def test_tile_map_cells_carry_their_tile_number_for_clicks():
    fig = tile_map(by_tile_frame([1, 2, 3, 4, 5], 10), tiles_per_ipu=5, bytes_per_tile=10, columns=2)
    custom = np.array(fig.data[0].customdata, dtype=float)
    assert custom[2, 0, 0] == 4  # row 2, column 0 is tile 4
    assert np.isnan(custom[2, 1, 0])  # past the last tile


def test_binned_phases_are_laid_side_by_side_inside_their_bin_in_phase_order():
    # GIVEN one bin of 100 cycles on IPU 0 holding 30 exchange, 60 compute and 10 sync cycles
    frame = pd.DataFrame({
        "ipu": [0, 0, 0, 1], "start_cycle": [0, 0, 0, 0], "end_cycle": [100, 100, 100, 100],
        "phase": ["exchange", "compute", "sync", "idle"], "cycles": [30, 60, 10, 100], "events": [2, 3, 1, 1],
    })
    # WHEN placed
    bars = timeline_bars(frame)
    # THEN compute starts the bin, sync follows at 60, exchange at 70; each as wide as its cycles
    ipu0 = bars[bars["ipu"] == 0].set_index("phase")
    assert ipu0.loc["compute", "base"] == 0 and ipu0.loc["sync", "base"] == 60 and ipu0.loc["exchange", "base"] == 70
    assert list(ipu0["width"]) == [60, 10, 30]
    assert bars[bars["ipu"] == 1]["base"].tolist() == [0]


def test_events_are_drawn_where_they_ran():
    frame = pd.DataFrame({"ipu": [0, 0], "start_cycle": [0, 40], "end_cycle": [40, 50],
                          "phase": ["compute", "sync"], "cycles": [40, 10], "events": [1, 1]})
    bars = timeline_bars(frame)
    assert bars["base"].tolist() == [0, 40] and bars["width"].tolist() == [40, 10]


def test_trace_timeline_draws_one_bar_trace_per_phase_over_the_window():
    frame = pd.DataFrame({"ipu": [0, 0, 1], "start_cycle": [0, 40, 0], "end_cycle": [40, 50, 50],
                          "phase": ["compute", "sync", "idle"], "cycles": [40, 10, 50], "events": [1, 1, 1]})
    fig = trace_timeline(frame, "events", (0, 50), [0, 1])
    assert [t.name for t in fig.data] == ["compute", "sync", "exchange", "stream", "idle"]
    assert sum(len(t.x) for t in fig.data) == 3
    assert list(fig.layout.xaxis.range) == [0, 50]
    assert fig.layout.meta["level"] == "events"
    assert fig.data[0].marker.color != fig.data[1].marker.color


def gantt_frame() -> pd.DataFrame:
    # 2 stages on 2 IPUs, 2 micro-batches, 2 iterations: F then B per micro-batch
    rows = []
    for iteration in range(2):
        for mb in range(2):
            for ipu in range(2):
                start = iteration * 1000 + mb * 100 + ipu * 10
                rows.append((ipu, ipu, "forward", iteration, mb, start, start + 10))
                rows.append((ipu, ipu, "backward", iteration, mb, start + 500, start + 520))
    return pd.DataFrame(rows, columns=["ipu", "stage", "pass", "iteration", "micro_batch", "start_cycle", "end_cycle"])


def test_micro_batches_are_numbered_from_one_through_the_run_as_in_the_tutorial():
    labels = micro_batch_labels(gantt_frame())
    assert labels.iloc[0] == "F1"
    assert set(labels[gantt_frame()["iteration"] == 1]) == {"F3", "F4", "B3", "B4"}


def test_gantt_draws_forward_and_backward_in_two_colours_per_ipu():
    fig = stages_gantt(gantt_frame())
    forward, backward = fig.data
    assert (forward.name, backward.name) == ("forward", "backward")
    assert forward.marker.color != backward.marker.color
    assert len(forward.x) == 8 and set(forward.y) == {"IPU 0", "IPU 1"}
    assert list(forward.base[:1]) == [0] and list(forward.x[:1]) == [10]
    assert "F1" in list(forward.text)


def test_gantt_of_a_profile_without_stages_says_so():
    fig = stages_gantt(gantt_frame().iloc[0:0])
    assert fig.layout.annotations[0].text == "No pipeline stages in this profile."


def test_a_long_reason_for_an_empty_figure_is_wrapped_not_cut():
    # GIVEN the sentence a memory figure shows for a trace without memory events (79 characters)
    from dashboards.figures.style import EMPTY_LINE_CHARS, empty

    reason = "the traces hold no [memory] events (record them with torch.profiler.profile(profile_memory=True))"
    lines = empty(reason).layout.annotations[0].text.split("<br>")
    # THEN it is drawn on several lines, none longer than a half-width panel holds, every word kept in order
    assert len(lines) > 1 and all(len(line) <= EMPTY_LINE_CHARS for line in lines)
    assert " ".join(lines) == reason


def test_exchange_matrix_names_the_host_and_streaming_memory():
    matrix = pd.DataFrame({"src_ipu": [0, 1, -1, -2], "dst_ipu": [1, 0, 0, 0], "bytes": [800, 800, 100, 400],
                           "cycles": [5, 5, 2, 3]})
    fig = exchange_matrix(matrix)
    heat = fig.data[0]
    assert list(heat.x) == ["IPU 0", "IPU 1", "host", "streaming memory"]
    z = np.array(heat.z, dtype=float)
    assert z[0, 1] == 800  # IPU 1 -> IPU 0
    assert z[0, 3] == 400  # streaming memory -> IPU 0
    assert math.isnan(z[3, 3])


def test_an_imported_traces_matrix_of_time_is_in_ms_and_an_ipus_in_cycles():
    from dashboards.figures.exchange import exchange_submatrix
    from dashboards.figures.style import Naming

    # GIVEN ranks 0 and 1 sending each other 12.5 ms and 250 µs (an imported trace's cycles are ns)
    matrix = pd.DataFrame({"src_ipu": [0, 1], "dst_ipu": [1, 0], "bytes": [800, 800], "cycles": [12_500_000, 250_000]})
    ranks = Naming((0, 1), gpu=True)
    for fig in (exchange_matrix(matrix, "cycles", ranks), exchange_submatrix(matrix, "cycles", ranks, [0, 1], [0, 1])):
        heat = fig.data[0]
        z = np.array(heat.z, dtype=float)
        # THEN the colour bar counts ms (plotly's ticks of ns read "10M"), and the hover says ms
        assert heat.colorbar.title.text == "ms" and (z[1, 0], z[0, 1]) == (12.5, 0.25)
        assert "%{z:,.3f} ms" in heat.hovertemplate
    # AND each cell's text keeps its own unit
    assert list(exchange_matrix(matrix, "cycles", ranks).data[0].text[1]) == ["12.50 ms", ""]
    # AND an IPU's time stays in cycles, as they are
    heat = exchange_matrix(matrix, "cycles").data[0]
    assert heat.colorbar.title.text == "cycles" and np.array(heat.z, dtype=float)[1, 0] == 12_500_000


def test_stage_cycles_lays_a_stages_passes_end_to_end():
    summary = pd.DataFrame({"stage": [0, 0, 0, 1, 1], "pass": ["forward", "backward", "update", "forward", "backward"],
                            "cycles_per_micro_batch": [10, 20, 5, 30, 60]})
    assert stage_cycles(summary)["cycles_per_micro_batch"].tolist() == [30, 90]


def test_phase_shares_stack_to_the_given_percentages():
    fig = phase_shares({"compute": 50.0, "sync": 10.0, "exchange": 20.0, "stream": 5.0, "idle": 15.0})
    assert [t.x[0] for t in fig.data] == [50.0, 10.0, 20.0, 5.0, 15.0]
    assert fig.data[0].name == "compute 50.0 %"


def test_liveness_plot_marks_capacity_and_the_chosen_step():
    by_step = pd.DataFrame({"ipu": [0, 0, 1, 1], "step": [0, 1, 0, 1], "name": ["a", "b", "c", "d"],
                            "always_live_bytes": 10, "not_always_live_bytes": [0, 2**20, 0, 0],
                            "total_bytes": 10, "worst_tile": [0, 1, 0, 0], "worst_tile_bytes": [100, 2048, 5, 5],
                            "capacity_bytes": 4096})
    fig = liveness_steps(by_step, bytes_per_tile=2048, selected=(0, 1))
    nal = fig.data[0]
    assert list(nal.y) == [0, 1.0]  # MiB
    capacity = [t for t in fig.data if t.name == "tile capacity"][0]
    assert list(capacity.y) == [2.0, 2.0]  # KiB
    assert fig.layout.shapes[0].x0 == 1


def test_formats_use_binary_units_and_say_nothing_for_missing_values():
    assert c.fmt_bytes(638976) == "624.00 KiB"
    assert c.fmt_bytes(512) == "512 B"
    assert c.fmt_bytes(float("nan")) == "–"
    assert c.fmt_count(12_345_678) == "12.3 M"
    assert c.fmt_seconds(0.00123) == "1.23 ms"
    assert c.fmt_rate(2 * 2**30) == "2.00 GiB/s"
    assert c.fmt_for_column("achieved_bytes_per_s") is c.fmt_rate
    assert c.fmt_for_column("excess_bytes") is c.fmt_bytes
    assert c.fmt_for_column("bubble_pct") is c.fmt_pct


def test_a_long_runs_gantt_draws_its_first_iterations_and_says_so():
    # GIVEN 2 iterations of 8 bars each, and room for 10 bars
    fig = stages_gantt(gantt_frame(), max_bars=10)
    # THEN only iteration 0 is drawn, and the axis says so
    assert sum(len(t.x) for t in fig.data) == 8
    assert fig.layout.xaxis.title.text == "cycles (the first 1 of 2 iterations)"


def test_stage_utilisation_bars_reach_the_run_length():
    # GIVEN two stages over a 1,000-cycle run: stage 0 busy 300 and idle 200 (500 in host calls),
    # stage 1 busy 600 and idle 400
    summary = pd.DataFrame({
        "stage": [0, 0, 1, 1], "ipu": [0, 0, 1, 1], "pass": ["forward", "all", "forward", "all"],
        "busy_cycles": [300, 300, 600, 600], "idle_cycles": [200, 200, 400, 400], "total_cycles": 1000,
    })
    # WHEN drawn
    fig = stage_utilisation(summary)
    busy, idle, other = fig.data
    # THEN each stack is busy + idle + other = the run's 1,000 cycles
    assert list(busy.y) == [300, 600] and list(idle.y) == [200, 400] and list(other.y) == [500, 0]


def test_stage_imbalance_draws_per_micro_batch_passes_and_not_the_update_run_once_per_step():
    # GIVEN a stage table whose update is per step (285,096 cycles once), its forward and backward per micro-batch
    summary = pd.DataFrame({"stage": [1, 1, 1, 1], "ipu": [1, 1, 1, 1],
                            "pass": ["forward", "backward", "update", "all"],
                            "per": ["micro_batch", "micro_batch", "step", "micro_batch"],
                            "cycles_per_micro_batch": [2_516_845, 7_366_368, 285_096, 9_883_213]})
    fig = stage_imbalance(summary, bottleneck_stage=1)
    # THEN the bars stack forward and backward, 9,883,213 cycles per micro-batch; the update is not drawn
    assert {t.name: list(t.y) for t in fig.data} == {"forward": [2_516_845], "backward": [7_366_368]}


def test_a_long_liveness_is_drawn_by_each_runs_peaks_and_says_so(monkeypatch):
    # GIVEN two IPUs of 10 steps each: IPU 0's not-always-live peak at step 6, its worst tile's at step 2; the
    # figure draws at most 3 points' worth of runs an IPU
    from dashboards.figures import liveness
    from popvision_py.render import figures as render_figures

    steps = np.arange(10)
    by_step = pd.DataFrame({"ipu": np.repeat([0, 1], 10), "step": np.tile(steps, 2), "name": "s",
                            "always_live_bytes": 0, "total_bytes": 0, "worst_tile": 0,
                            "not_always_live_bytes": np.r_[np.where(steps == 6, 90, steps), steps],
                            "worst_tile_bytes": np.r_[np.where(steps == 2, 80, 1), steps], "capacity_bytes": 100})
    monkeypatch.setattr(render_figures, "MAX_STEPS", 3)
    # WHEN it is cut into runs (10 steps in at most 3 runs: 4 steps a run), the chosen step 9 of IPU 0 kept
    drawn, width = liveness.by_runs(by_step, selected=(0, 9))
    # THEN each run's step of most not-always-live bytes (3, 6, 9) and of most worst-tile bytes (2; the first of a
    # run's equal ones: 4, 8) is drawn, and the chosen step
    assert width == 4
    assert drawn[drawn["ipu"] == 0]["step"].tolist() == [2, 3, 4, 6, 8, 9]
    assert drawn[drawn["ipu"] == 1]["step"].tolist() == [3, 7, 9]
    # AND the figure's panels say what a point is; a short liveness is drawn step by step
    fig = liveness.liveness_steps(by_step, bytes_per_tile=100, selected=(0, 9))
    assert all("each point the most of 4 steps" in a.text for a in fig.layout.annotations[:2])
    assert list(fig.data[0].x) == [2, 3, 4, 6, 8, 9] and max(fig.data[0].y) == 90
    assert liveness.by_runs(by_step.head(3))[1] == 1


def test_a_tiles_long_memory_over_steps_is_drawn_by_each_runs_peak(monkeypatch):
    # GIVEN tile 5's memory over 10 steps, its peak at step 6, drawn at most 3 runs a tile
    from dashboards.figures import memory
    from popvision_py.render import figures as render_figures

    over = pd.DataFrame({"tile": 5, "step": np.arange(10), "always_live_bytes": 0,
                         "total_bytes": np.where(np.arange(10) == 6, 9 * 1024, np.arange(10) * 1024)})
    monkeypatch.setattr(render_figures, "MAX_STEPS", 3)
    fig = memory.worst_over_steps(over, bytes_per_tile=64 * 1024)
    # THEN each run of 4 steps is its step of most memory, and the axis says so
    assert list(fig.data[0].x) == [3, 6, 9] and list(fig.data[0].y) == [3, 9, 9]
    assert fig.layout.xaxis.title.text == "program step (each point the most of 4 steps)"


def test_exchange_by_kind_says_when_no_size_is_recorded_instead_of_an_empty_axis():
    from dashboards.figures.exchange import exchange_by_kind
    from dashboards.figures.style import Naming

    # GIVEN a GPU trace's exchanges by kind whose kernels record no message size (HTA's sampled SendRecv kernels)
    by_kind = pd.DataFrame({"kind": ["inter_ipu", "all_reduce"], "bytes": [0, 0], "cycles": [130_655_000, 32_780_000],
                            "time_pct": [4.5, 1.1]})
    fig = exchange_by_kind(by_kind, Naming((0,), gpu=True))
    # THEN the bytes panel says so, its axis without ticks, and the time panel is drawn in ms (130,655,000 ns is
    # 130.655 ms; plotly's ticks of ns read "100M")
    assert [a.text for a in fig.layout.annotations if a.text == "the traces record no sizes"]
    assert fig.layout.yaxis.showticklabels is False and list(fig.data[1].y) == [130.655, 32.78]
    assert [a.text for a in fig.layout.annotations if a.text in ("ms", "ns")] == ["ms"]
    assert fig.data[1].hovertemplate.startswith("%{x}: %{y:,} ms")
    # AND with a size recorded, no such sentence
    sized = exchange_by_kind(by_kind.assign(bytes=[2_000, 4_000]), Naming((0,), gpu=True))
    assert not [a for a in sized.layout.annotations if a.text == "the traces record no sizes"]


def test_the_html_reports_liveness_draws_a_long_run_by_each_runs_peak_and_says_so(monkeypatch):
    # GIVEN two ranks' memory over 10 steps (rank 1's peak at step 6), drawn at most 3 runs a line; and the same
    # over 40 ranks, past the lines drawn one a rank
    from popvision_py.render import figures as render_figures

    steps = np.arange(10)
    one = pd.DataFrame({"step": steps, "name": [f"op{s}" for s in steps]})
    by_step = pd.concat([one.assign(ipu=0, total_bytes=steps * 10),
                         one.assign(ipu=1, total_bytes=np.where(steps == 6, 900, steps))], ignore_index=True)
    monkeypatch.setattr(render_figures, "MAX_STEPS", 3)
    # WHEN the HTML report draws them
    fig = render_figures.liveness(by_step)
    many = render_figures.liveness(pd.concat([by_step.assign(ipu=by_step["ipu"] + 2 * r) for r in range(20)]))
    # THEN each line is a point a run of 4 steps (its most), rank 1's peak kept, and the title says so
    lines = {t.name: (list(t.x), list(t.y)) for t in fig.data}
    assert lines == {"IPU 0": ([3, 7, 9], [30, 70, 90]), "IPU 1": ([3, 6, 9], [3, 900, 9])}
    assert fig.layout.title.text.endswith("each point the most of 4 steps")
    # and over many ranks, the band and the fullest lines the same way
    band = {t.name: list(t.x) for t in many.data}
    assert band["most"] == band["least"] == band["median"] == [3, 6, 9]  # (the most over the ranks: 900 at 6)
    assert list(many.data[-1].y) == [3, 900, 9] and "each point the most of 4 steps" in many.layout.title.text
