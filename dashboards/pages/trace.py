"""Execution trace: the BSP timeline of every IPU, zoomable from the whole run to single steps.

The level of detail is the analysis's (``trace.timeline``): each zoom asks the server for the
window shown, in at most ``MAX_BINS`` bins per IPU, so a trace of millions of rows draws a few
thousand bars. Below, the cycles of each tile in a chosen compute set.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import trace as figures
from dashboards.figures.style import IPUS, Naming, empty, ipu_label
from dashboards.zoom import window_from_relayout

dash.register_page(__name__, path="/trace", name="Execution trace", title="popvision · trace", order=3, icon="≡")

MAX_BINS = 800  # about one bar per pixel column of a wide screen
MAX_STEP_OPTIONS = 300


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            c.page_header("Execution trace", DESCRIPTION[False], description_id=ids.TRACE_DESCRIPTION),
            html.Div(id=ids.TRACE_FIGURES, className="cards-slot"),
            c.section(
                "BSP timeline",
                html.Div([html.Span(id=ids.TRACE_LEVEL, className="level"),
                          html.Button("Whole run", id=ids.TRACE_RESET, n_clicks=0, className="button")],
                         className="controls"),
                c.graph(ids.TRACE_TIMELINE),
                title_id=ids.TRACE_TIMELINE_TITLE,
            ),
            c.section(
                "Cycles per tile of a compute set",
                html.Div(
                    [
                        html.Label("IPU", htmlFor=ids.TRACE_IPU),
                        dcc.Dropdown(id=ids.TRACE_IPU, clearable=False, className="dropdown"),
                        html.Label("compute set", htmlFor=ids.TRACE_STEP),
                        dcc.Dropdown(id=ids.TRACE_STEP, clearable=False, className="dropdown wide-dropdown"),
                    ],
                    className="controls",
                ),
                c.graph(ids.TRACE_TILES),
                note="A BSP step lasts as long as its slowest tile; the others wait at the sync.",
                section_id=ids.TRACE_TILES_SECTION,
            ),
            # An imported trace's rank has no tiles: one line instead of the cycles per tile.
            c.section("Time per tile", c.one_line(NO_TILE_CYCLES, ids.TRACE_NO_TILES), section_id=ids.TRACE_TILES_NOTE,
                      hidden=True),
        ]
    )


# The page's description for an IPU profile (False) and one imported from PyTorch traces (True)
DESCRIPTION = {False: "Compute, sync, exchange and stream phases of every IPU over the run. Drag to zoom down to "
                      "single steps; double-click to see the whole run.",
               True: "Compute, exposed communication and idle time of every rank over the profiled steps. Drag to "
                     "zoom down to single operators; double-click to see the whole run."}
NO_TILE_CYCLES = "A rank has no tiles: each operator's and transfer's time is in the time line above."


@dash.callback(
    Output(ids.TRACE_DESCRIPTION, "children"),
    Output(ids.TRACE_TIMELINE_TITLE, "children"),
    Output(ids.TRACE_TILES_SECTION, "style"),
    Output(ids.TRACE_TILES_NOTE, "style"),
    Input(ids.PROFILE, "value"),
)
def render_words(profile: str | None):
    """An imported trace: its ranks' time line, and one line instead of the cycles per tile."""
    imported = data.naming(data.report(profile)).imported
    return (DESCRIPTION[imported], "Time line per rank" if imported else "BSP timeline", c.shown(not imported),
            c.shown(imported))


def level_text(level: str, window: tuple[int, int], frame: Any, naming: Naming = IPUS) -> str:
    span = window[1] - window[0]
    if naming.imported:  # one cycle is one ns
        where = f"{c.fmt_seconds(window[0] / 1e9)} to {c.fmt_seconds(window[1] / 1e9)}"
        if level == "bins":
            return f"level of detail: bins — {MAX_BINS:,} bins of {c.fmt_seconds(span / MAX_BINS / 1e9)} per rank, {where}"
        return f"level of detail: events — {len(frame):,} events, {where}"
    if level == "bins":
        return (f"level of detail: bins — {MAX_BINS:,} bins of {span / MAX_BINS:,.0f} cycles per IPU, "
                f"cycles {window[0]:,} to {window[1]:,}")
    return f"level of detail: events — {len(frame):,} events, cycles {window[0]:,} to {window[1]:,}"


def run_extent(report: Any) -> tuple[int, int]:
    """(first, last) cycle of the whole run."""
    start, end = report.trace.extent()
    return int(start), int(end)


def timeline(profile: str | None, window: tuple[int, int] | None, revision: int = 0) -> tuple:
    """Figure and level-of-detail text of the timeline over ``window`` (None: the whole run)."""
    report = data.report(profile)
    window = window or run_extent(report)
    result = report.trace.timeline(window[0], window[1], max_bins=MAX_BINS)
    ipus = list(range(int(report.target["num_ipus"])))
    naming = data.naming(report)
    fig = figures.trace_timeline(result.frame, result.level, window, ipus, naming)
    # A new revision (a reset, a new profile) makes plotly drop the user's zoom and show the run.
    fig.update_layout(uirevision=f"{data.current().key(profile)}-{revision}")
    return fig, level_text(result.level, window, result.frame, naming)


@dash.callback(
    Output(ids.TRACE_TIMELINE, "figure"),
    Output(ids.TRACE_LEVEL, "children"),
    Input(ids.PROFILE, "value"),
    Input(ids.TRACE_RESET, "n_clicks"),
)
def render_timeline(profile: str | None, resets: int | None):
    """The whole run."""
    return timeline(profile, None, resets or 0)


@dash.callback(
    Output(ids.TRACE_TIMELINE, "figure", allow_duplicate=True),
    Output(ids.TRACE_LEVEL, "children", allow_duplicate=True),
    Input(ids.TRACE_TIMELINE, "relayoutData"),
    State(ids.PROFILE, "value"),
    State(ids.TRACE_RESET, "n_clicks"),
    prevent_initial_call=True,
)
def zoom_timeline(relayout: dict | None, profile: str | None, resets: int | None):
    """The window a zoom (or a double-click back to the whole run) asks for, at its own level of detail."""
    window = window_from_relayout(relayout, run_extent(data.report(profile)))
    if window is None:
        raise dash.exceptions.PreventUpdate
    return timeline(profile, window, resets or 0)


@dash.callback(
    Output(ids.TRACE_FIGURES, "children"),
    Output(ids.TRACE_IPU, "options"),
    Output(ids.TRACE_IPU, "value"),
    Input(ids.PROFILE, "value"),
)
def render_figures(profile: str | None):
    report = data.report(profile)
    summary = report.summary.figures()
    naming = data.naming(report)
    shares = data.phase_shares(report)
    if naming.imported:  # in time (a cycle is a ns), over the profiled steps; no syncs or streams
        items = [("Profiled", c.fmt_seconds(summary.total_cycles / summary.clock_hz),
                  f"over {c.fmt_quantity(summary.iterations, 'step')}")]
        items += [(naming.phase(phase), c.fmt_pct(shares[phase]), f"of {naming.time}") for phase in naming.phases]
    else:
        items = [
            ("Run", f"{c.fmt_count(summary.total_cycles)} cycles",
             f"{c.fmt_seconds(summary.total_cycles / summary.clock_hz)} over {c.fmt_quantity(summary.iterations, 'iteration')}"),
        ] + [(phase, c.fmt_pct(pct), "of IPU time") for phase, pct in shares.items()]
    options = c.ipu_options(range(int(report.target["num_ipus"])), naming)
    return c.cards(items), options, 0


def step_options(steps: Any) -> list[dict]:
    """Compute sets of one IPU, the costliest over the run first (``trace.steps``)."""
    sets = steps[steps["type"].astype(str) == "compute_set"]
    sets = sets.assign(total=sets["cycles"] * sets["executions"]).sort_values(["total", "step"], ascending=[False, True])
    return [
        {"label": f"step {int(r.step)} · {r.name} · {int(r.cycles):,} cycles × {int(r.executions):,}", "value": int(r.step)}
        for r in sets.head(MAX_STEP_OPTIONS).itertuples(index=False)
    ]


@dash.callback(
    Output(ids.TRACE_STEP, "options"),
    Output(ids.TRACE_STEP, "value"),
    Input(ids.TRACE_IPU, "value"),
    State(ids.PROFILE, "value"),
)
def choose_ipu(ipu: int | None, profile: str | None):
    if ipu is None:
        raise dash.exceptions.PreventUpdate
    options = step_options(data.report(profile).trace.steps(int(ipu)))
    return options, options[0]["value"] if options else None


@dash.callback(
    Output(ids.TRACE_TILES, "figure"),
    Input(ids.TRACE_STEP, "value"),
    State(ids.TRACE_IPU, "value"),
    State(ids.PROFILE, "value"),
)
def show_tile_cycles(step: int | None, ipu: int | None, profile: str | None):
    if step is None or ipu is None:
        return empty("This IPU runs no compute set.", height=300)
    report = data.report(profile)
    steps = report.trace.steps(int(ipu))
    name = steps.loc[steps["step"] == int(step), "name"]
    title = f"{ipu_label(int(ipu))}, step {int(step)}" + (f" · {name.iloc[0]}" if len(name) else "")
    return figures.tile_cycles(report.trace.tile_cycles(int(ipu), int(step)), title)
