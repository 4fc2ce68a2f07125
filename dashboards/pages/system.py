"""System: the host processes of a run on one time axis (PopVision's System Analyser view).

Each process's system timeline (compile, weights to and from the device, model calls, data loading
and the wait for it, optimiser updates; samples per second below), found beside the profile or
given with ``--system``. As on the Execution trace page, each zoom asks the server for the window
shown (``system.window``: each event while there are few, else bins), so a million events draw a
few thousand bars. Relative time starts at the run's first event; absolute time is the wall clock.
"""

from __future__ import annotations

from typing import Any

import dash
import numpy as np
from dash import Input, Output, State, dcc, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import ranks as rank_figures
from dashboards.figures import system as figures
from dashboards.figures.ranks import MANY_RANKS
from dashboards.figures.style import empty
from dashboards.zoom import follow_moves, moves_store, window_from_relayout
from popvision_py.format import system as S

dash.register_page(__name__, path="/system", name="System", title="popvision · system", order=6, icon="◷")

MAX_EVENTS = 2000  # each event drawn up to this many in the window; bins beyond
MAX_BINS = 500  # bins per row and name
TIME_OPTIONS = [{"label": "relative (from the first event)", "value": figures.RELATIVE},
                {"label": "absolute (wall clock, UTC)", "value": figures.ABSOLUTE}]


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            c.page_header("System", DESCRIPTION[False], description_id=ids.SYSTEM_DESCRIPTION),
            html.Div(id=ids.SYSTEM_NOTE, className="empty"),
            html.Div(id=ids.SYSTEM_FIGURES, className="cards-slot"),
            dcc.Store(id=ids.SYSTEM_WINDOW),
            c.section(
                "Timeline",
                html.Div([html.Label("time", htmlFor=ids.SYSTEM_TIME),
                          dcc.RadioItems(id=ids.SYSTEM_TIME, options=TIME_OPTIONS, value=figures.RELATIVE,
                                         inline=True, className="radio-inline"),
                          html.Span(id=ids.SYSTEM_LEVEL, className="level"),
                          html.Button("Whole run", id=ids.SYSTEM_RESET, n_clicks=0, className="button")],
                         className="controls"),
                c.graph(ids.SYSTEM_TIMELINE),
                moves_store(ids.SYSTEM_TIMELINE),
            ),
            c.section("Where host time went", html.Div(id=ids.SYSTEM_PROCESSES), note=EVENTS_NOTE[False],
                      note_id=ids.SYSTEM_EVENTS_NOTE),
        ]
    )


# What the page says for an IPU run's host processes (False) and for the ranks' CPU time lines a PyTorch
# trace's import writes (True): the page's description, and the note of the events' table
DESCRIPTION = {False: "Every host process of the run on one time axis: compile, weights to and from the device, "
                      "model calls, data loading and the wait for it, optimiser updates, and samples per second. Drag "
                      "to zoom; double-click to see the whole run.",
               True: "Each rank's CPU time line from its trace, on one time axis: its profiler steps, the operators "
                     "and annotations of its threads, its collective calls. Drag to zoom; double-click to see the "
                     "whole run."}
EVENTS_NOTE = {False: "Per process and event: count, total, mean and longest time, and the total as a share of the "
                      "process's wall time (nested events overlap: a model call holds its updates).",
               True: "Per rank and event: count, total, mean and longest time, and the total as a share of the "
                     "rank's wall time (nested events overlap: a profiler step holds its forward pass)."}


@dash.callback(
    Output(ids.SYSTEM_DESCRIPTION, "children"),
    Output(ids.SYSTEM_EVENTS_NOTE, "children"),
    Input(ids.PROFILE, "value"),
)
def render_words(profile: str | None):
    """An imported trace's words: its ranks' CPU time lines, not an IPU run's host processes."""
    imported = bool(data.report(profile).imported)
    return DESCRIPTION[imported], EVENTS_NOTE[imported]


def level_text(result: Any, origin_ns: int) -> str:
    span = result.end_ns - result.start_ns
    where = (f"{(result.start_ns - origin_ns) / 1e9:,.6f} s to {(result.end_ns - origin_ns) / 1e9:,.6f} s "
             f"from the first event")
    if result.level == "bins":
        return (f"level of detail: bins — {MAX_BINS:,} bins of {c.fmt_seconds(span / MAX_BINS / 1e9)} per row, "
                f"{result.events:,} events, {where}")
    return f"level of detail: events — {result.events:,} events, {where}"


def timeline(profile: str | None, window: tuple[int, int] | None, mode: str, revision: int = 0,
             processes: tuple[int, int] | None = None) -> tuple:
    """Figure, level-of-detail text and window (``[start, end]`` ns as strings, then the processes drawn, for the
    Store) of the timeline over ``window`` (None: the whole run). Past ``MANY_RANKS`` processes, a heat map of
    them all (``many_timeline``) unless ``processes`` (``(first, last + 1)``, at most ``MANY_RANKS``) are chosen:
    then theirs alone."""
    report = data.report(profile)
    if not report.system.files():
        return empty("No system timeline to show: see the line above.", height=260), "", None
    system = report.system
    origin, end = system.extent()
    window = window or (origin, end)
    events = system.words()
    if len(events.processes) > MANY_RANKS and processes is None:
        return many_timeline(profile, window, mode, revision)
    result = system.window(window[0], window[1], max_events=MAX_EVENTS, max_bins=MAX_BINS)
    frame, labels = result.frame, [events.label(r) for r in range(len(events.rows))]
    kept = [str(result.start_ns), str(result.end_ns)]
    if processes is not None:  # the rows of the processes chosen, numbered anew
        of = events.row_process
        rows = np.flatnonzero((of >= processes[0]) & (of < processes[1]))
        renumber = np.full(len(labels), -1, np.int64)
        renumber[rows] = np.arange(len(rows))
        frame = frame[renumber[frame["row"].to_numpy()] >= 0].assign(row=lambda f: renumber[f["row"].to_numpy()])
        labels = [labels[r] for r in rows.tolist()]
        kept += [str(processes[0]), str(processes[1])]
    fig = figures.system_timeline(frame, result.level, (result.start_ns, result.end_ns), labels, mode, origin)
    # A new revision (a reset, a new profile, the other time axis) drops the user's zoom for the one given.
    fig.update_layout(uirevision=f"{data.current().key(profile)}-{revision}-{mode}-{processes}")
    # as strings: the browser holds numbers as doubles, which round ns since 1970 to 256 ns
    return fig, level_text(result, origin), kept


def many_timeline(profile: str | None, window: tuple[int, int], mode: str, revision: int) -> tuple:
    """Past ``MANY_RANKS`` processes: a row per process of a heat map over ``window``, each bin's share during which
    the process had a span open on any thread (``ranks.busy_heatmap``); a box zoomed onto ``MANY_RANKS`` of them
    or fewer draws their own time lines."""
    system = data.report(profile).system
    events, origin = system.events(), system.extent()[0]
    span = events.kind == S.KINDS.index("span")
    fig = rank_figures.busy_heatmap(
        events.process[span], events.start[span], events.end[span], list(events.processes), window,
        lambda t: figures.x_of(t, mode, origin), "with a span open on one of its threads",
        "wall clock (UTC)" if mode == figures.ABSOLUTE else "seconds since the run's first event")
    fig.update_layout(uirevision=f"{data.current().key(profile)}-{revision}-{mode}-many")
    text = (f"level of detail: a heat map of {len(events.processes):,} processes, {rank_figures.HEATMAP_BINS} bins "
            f"of {c.fmt_seconds((window[1] - window[0]) / rank_figures.HEATMAP_BINS / 1e9)}; zoom a box onto "
            f"{MANY_RANKS} of them or fewer to see their time lines")
    return fig, text, [str(window[0]), str(window[1])]


def _mode(mode: str | None) -> str:
    if mode not in (figures.RELATIVE, figures.ABSOLUTE):
        raise ValueError(f"unknown time axis {mode!r}")  # a value no page sends: a 400
    return mode


@dash.callback(
    Output(ids.SYSTEM_TIMELINE, "figure"),
    Output(ids.SYSTEM_LEVEL, "children"),
    Output(ids.SYSTEM_WINDOW, "data"),
    Input(ids.PROFILE, "value"),
    Input(ids.SYSTEM_RESET, "n_clicks"),
    State(ids.SYSTEM_TIME, "value"),
)
def render_timeline(profile: str | None, resets: int | None, mode: str | None):
    """The whole run."""
    return timeline(profile, None, _mode(mode), resets or 0)


@dash.callback(
    Output(ids.SYSTEM_TIMELINE, "figure", allow_duplicate=True),
    Output(ids.SYSTEM_LEVEL, "children", allow_duplicate=True),
    Output(ids.SYSTEM_WINDOW, "data", allow_duplicate=True),
    Input(ids.SYSTEM_TIME, "value"),
    State(ids.PROFILE, "value"),
    State(ids.SYSTEM_RESET, "n_clicks"),
    State(ids.SYSTEM_WINDOW, "data"),
    prevent_initial_call=True,
)
def switch_time(mode: str | None, profile: str | None, resets: int | None, shown: list | None):
    """The window shown, on the other time axis."""
    window = None
    kept = _window(shown)
    if kept is not None:
        start, end = data.report(profile).system.extent()
        low, high = max(kept[0], start), min(kept[1], end)
        window = (low, high) if high > low else None
    return timeline(profile, window, _mode(mode), resets or 0, _processes(shown))


def _window(shown: Any) -> tuple[int, int] | None:
    """The Store's window, ``[start, end]`` ns as strings (then the processes drawn); None when it holds none."""
    if isinstance(shown, list) and len(shown) in (2, 4):
        return int(shown[0]), int(shown[1])
    return None


def _processes(shown: Any) -> tuple[int, int] | None:
    """The processes the Store says are drawn (``[start, end, first, last + 1]``); None: every one (or a heat map)."""
    if isinstance(shown, list) and len(shown) == 4:
        return int(shown[2]), int(shown[3])
    return None


@dash.callback(
    Output(ids.SYSTEM_TIMELINE, "figure", allow_duplicate=True),
    Output(ids.SYSTEM_LEVEL, "children", allow_duplicate=True),
    Output(ids.SYSTEM_WINDOW, "data", allow_duplicate=True),
    Input(follow_moves(ids.SYSTEM_TIMELINE), "data"),
    State(ids.PROFILE, "value"),
    State(ids.SYSTEM_TIME, "value"),
    State(ids.SYSTEM_RESET, "n_clicks"),
    State(ids.SYSTEM_WINDOW, "data"),
    prevent_initial_call=True,
)
def zoom_timeline(relayout: dict | None, profile: str | None, mode: str | None, resets: int | None,
                  shown: list | None = None):
    """The window a zoom (or a double-click back to the whole run) asks for, at its own level of detail;
    nothing when it is the window shown, as far as the axis can tell (a date axis's range is rounded)."""
    mode = _mode(mode)
    system = data.report(profile).system
    if not system.files():
        raise dash.exceptions.PreventUpdate
    origin, end = system.extent()
    precision = figures.DATE_PRECISION_NS if mode == figures.ABSOLUTE else 0
    window = window_from_relayout(relayout, (origin, end), lambda x: figures.from_x(x, mode, origin), snap=precision)
    processes = _processes(shown)
    many = len(system.words().processes)
    if processes is None and many > MANY_RANKS:  # the heat map: a box onto a few processes draws theirs
        chosen = rank_figures.rows_in_view(relayout, many)
        if chosen is not None and chosen[1] - chosen[0] <= MANY_RANKS:
            return timeline(profile, window or _window(shown), mode, resets or 0, chosen)
    if window is None:
        raise dash.exceptions.PreventUpdate
    kept = _window(shown)
    if kept is not None and all(abs(a - b) <= precision for a, b in zip(kept, window)):
        raise dash.exceptions.PreventUpdate
    return timeline(profile, window, mode, resets or 0, processes)


@dash.callback(
    Output(ids.SYSTEM_NOTE, "children"),
    Output(ids.SYSTEM_FIGURES, "children"),
    Output(ids.SYSTEM_PROCESSES, "children"),
    Input(ids.PROFILE, "value"),
)
def render_figures(profile: str | None):
    """One card per process (wall time, model calls, median samples/s, wait for data; a rank's: its profiler steps,
    its DataLoader fetches' share, its events and threads) and the event table; without system timeline files, the
    one line saying how to record them."""
    report = data.report(profile)
    system = report.system
    if not system.files():
        return system.missing(), None, None
    processes = system.processes()
    if len(processes) > MANY_RANKS:  # a card a process would be a wall of them: their spread, the longest named
        wall = processes["wall_ms"].to_numpy()
        longest = processes.iloc[int(wall.argmax())]
        items = [("Processes", c.fmt_int(len(processes)), f"{c.fmt_int(int(processes['events'].sum()))} events"),
                 ("Wall time", c.fmt_seconds(float(np.median(wall)) / 1e3),
                  f"median; {c.fmt_seconds(wall.min() / 1e3)} to {c.fmt_seconds(wall.max() / 1e3)}"),
                 ("Longest", str(longest["process"]), c.fmt_seconds(float(longest["wall_ms"]) / 1e3))]
    elif report.imported:  # a rank's CPU time line: its profiler steps and DataLoader fetches, no samples per second
        items = [(row.process, c.fmt_seconds(row.wall_ms / 1e3),
                  f"{c.fmt_quantity(row.model_calls, 'step')} · waits for data {c.fmt_pct(row.wait_for_data_pct)} · "
                  f"{c.fmt_quantity(row.events, 'event')} on {c.fmt_quantity(row.threads, 'thread')}")
                 for row in processes.itertuples(index=False)]
    else:
        items = [(row.process, c.fmt_seconds(row.wall_ms / 1e3),
                  f"{c.fmt_quantity(row.model_calls, 'model call')} · {c.fmt_int(row.samples_per_second)} samples/s "
                  f"(median) · waits for data {c.fmt_pct(row.wait_for_data_pct)}")
                 for row in processes.itertuples(index=False)]
    table = c.rank_table(system.by_name(), rank="process",
                         columns={"process": "process", "channel": "channel", "name": "event", "kind": "kind",
                                  "count": "count", "total_ms": "total", "mean_ms": "mean", "max_ms": "longest",
                                  "wall_pct": "of wall time"},
                         formats={"total_ms": _ms, "mean_ms": _ms, "max_ms": _ms, "count": c.fmt_int},
                         table_id="system-events-table")
    return None, c.cards(items), table


def _ms(value: Any) -> str:
    return c.fmt_seconds(value / 1e3) if value == value else "–"
