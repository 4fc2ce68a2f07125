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
from dash import Input, Output, State, dcc, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import system as figures
from dashboards.figures.style import empty
from dashboards.zoom import window_from_relayout

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


def timeline(profile: str | None, window: tuple[int, int] | None, mode: str, revision: int = 0) -> tuple:
    """Figure, level-of-detail text and window (``[start, end]`` ns as strings, for the Store) of the timeline
    over ``window`` (None: the whole run)."""
    report = data.report(profile)
    if not report.system.files():
        return empty("No system timeline to show: see the line above.", height=260), "", None
    system = report.system
    origin, end = system.extent()
    window = window or (origin, end)
    result = system.window(window[0], window[1], max_events=MAX_EVENTS, max_bins=MAX_BINS)
    events = system.events()
    fig = figures.system_timeline(result.frame, result.level, (result.start_ns, result.end_ns),
                                  [events.label(r) for r in range(len(events.rows))], mode, origin)
    # A new revision (a reset, a new profile, the other time axis) drops the user's zoom for the one given.
    fig.update_layout(uirevision=f"{data.current().key(profile)}-{revision}-{mode}")
    # as strings: the browser holds numbers as doubles, which round ns since 1970 to 256 ns
    return fig, level_text(result, origin), [str(result.start_ns), str(result.end_ns)]


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
    return timeline(profile, window, _mode(mode), resets or 0)


def _window(shown: Any) -> tuple[int, int] | None:
    """The Store's window, ``[start, end]`` ns as strings; None when it holds none."""
    if isinstance(shown, list) and len(shown) == 2:
        return int(shown[0]), int(shown[1])
    return None


@dash.callback(
    Output(ids.SYSTEM_TIMELINE, "figure", allow_duplicate=True),
    Output(ids.SYSTEM_LEVEL, "children", allow_duplicate=True),
    Output(ids.SYSTEM_WINDOW, "data", allow_duplicate=True),
    Input(ids.SYSTEM_TIMELINE, "relayoutData"),
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
    if window is None:
        raise dash.exceptions.PreventUpdate
    kept = _window(shown)
    if kept is not None and all(abs(a - b) <= precision for a, b in zip(kept, window)):
        raise dash.exceptions.PreventUpdate
    return timeline(profile, window, mode, resets or 0)


@dash.callback(
    Output(ids.SYSTEM_NOTE, "children"),
    Output(ids.SYSTEM_FIGURES, "children"),
    Output(ids.SYSTEM_PROCESSES, "children"),
    Input(ids.PROFILE, "value"),
)
def render_figures(profile: str | None):
    """One card per process (wall time, model calls, median samples/s, wait for data; a rank's: its events and
    threads) and the event table; without system timeline files, the one line saying how to record them."""
    report = data.report(profile)
    system = report.system
    if not system.files():
        return system.missing(), None, None
    processes = system.processes()
    if report.imported:  # a rank's CPU time line: no PopTorch model calls, samples per second or data waits
        items = [(row.process, c.fmt_seconds(row.wall_ms / 1e3),
                  f"{c.fmt_quantity(row.events, 'event')} on {c.fmt_quantity(row.threads, 'thread')}")
                 for row in processes.itertuples(index=False)]
    else:
        items = [(row.process, c.fmt_seconds(row.wall_ms / 1e3),
                  f"{c.fmt_quantity(row.model_calls, 'model call')} · {c.fmt_int(row.samples_per_second)} samples/s "
                  f"(median) · waits for data {c.fmt_pct(row.wait_for_data_pct)}")
                 for row in processes.itertuples(index=False)]
    table = c.table(system.by_name(), columns={"process": "process", "channel": "channel", "name": "event",
                                                "kind": "kind", "count": "count", "total_ms": "total",
                                                "mean_ms": "mean", "max_ms": "longest", "wall_pct": "of wall time"},
                    formats={"total_ms": _ms, "mean_ms": _ms, "max_ms": _ms, "count": c.fmt_int},
                    table_id="system-events-table")
    return None, c.cards(items), table


def _ms(value: Any) -> str:
    return c.fmt_seconds(value / 1e3) if value == value else "–"
