"""Liveness: not-always-live memory over program steps per IPU; choose a step to see what is live."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import liveness as figures
from dashboards.figures.ranks import MANY_RANKS
from dashboards.figures.style import empty, ipu_label
from popvision_py.analysis.imported import ranks as imported

dash.register_page(__name__, path="/liveness", name="Liveness", title="popvision · liveness", order=2, icon="◢")


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            c.page_header("Liveness", DESCRIPTION[False], description_id=ids.LIVENESS_DESCRIPTION),
            c.section("Memory over program steps", c.graph(ids.LIVENESS_PLOT), title_id=ids.LIVENESS_PLOT_TITLE),
            # One column: the list of live variables needs the page's width for its paths and byte counts.
            c.section("Peaks per IPU", html.Div(id=ids.LIVENESS_PEAKS), title_id=ids.LIVENESS_PEAKS_TITLE),
            c.section(
                "Live at the chosen step",
                html.Div(
                    [
                        html.Label("IPU", htmlFor=ids.LIVENESS_IPU, id=ids.LIVENESS_IPU_LABEL),
                        dcc.Dropdown(id=ids.LIVENESS_IPU, clearable=False, className="dropdown"),
                        html.Label("step", htmlFor=ids.LIVENESS_STEP),
                        dcc.Input(id=ids.LIVENESS_STEP, type="number", min=0, step=1, debounce=True,
                                  className="step-input"),
                    ],
                    className="controls",
                ),
                html.Div(id=ids.LIVENESS_LIVE_TITLE, className="tile-title"),
                html.Div(id=ids.LIVENESS_LIVE),
                title_id=ids.LIVENESS_LIVE_SECTION_TITLE,
            ),
        ]
    )


# The page's description for an IPU profile (False) and one imported from PyTorch traces (True)
DESCRIPTION = {False: "Memory live at each program step; click the plot, or choose an IPU and a step, to list the "
                      "variables live there.",
               True: "Memory each rank had allocated at each step (a row of its time line); click the plot, or "
                     "choose a rank and a step, to see it."}


@dash.callback(
    Output(ids.LIVENESS_DESCRIPTION, "children"),
    Output(ids.LIVENESS_PEAKS_TITLE, "children"),
    Output(ids.LIVENESS_IPU_LABEL, "children"),
    Output(ids.LIVENESS_PLOT_TITLE, "children"),
    Output(ids.LIVENESS_LIVE_SECTION_TITLE, "children"),
    Input(ids.PROFILE, "value"),
)
def render_words(profile: str | None):
    """An imported trace's IPUs are ranks, and what it records is allocations."""
    report = data.report(profile)
    naming = data.naming(report)
    if naming.imported:
        description = DESCRIPTION[True] if report.memory_recorded else imported.NO_MEMORY
        return description, "Peaks per rank", "rank", "Memory allocated over each rank's steps", \
            "Allocated at the chosen step"
    return DESCRIPTION[False], "Peaks per IPU", "IPU", "Memory over program steps", "Live at the chosen step"


@dash.callback(
    Output(ids.LIVENESS_PLOT, "figure"),
    Input(ids.LIVENESS_IPU, "value"),
    Input(ids.LIVENESS_STEP, "value"),
    State(ids.PROFILE, "value"),
)
def render_plot(ipu: int | None, step: Any, profile: str | None):
    """The steps plot, the chosen (IPU, step) marked."""
    report = data.report(profile)
    if not report.memory_recorded:
        return empty(imported.NO_MEMORY)
    selected = (int(ipu), int(step)) if ipu is not None and step is not None else None
    by_step = report.liveness.by_step()
    # past MANY_RANKS, a band over the IPUs and the few furthest past the median, not a line each
    draw = figures.liveness_band if by_step["ipu"].nunique() > MANY_RANKS else figures.liveness_steps
    return draw(by_step, int(report.target["bytes_per_tile"]), selected, naming=data.naming(report),
                capacity=data.capacity_known(report))


@dash.callback(
    Output(ids.LIVENESS_PEAKS, "children"),
    Input(ids.PROFILE, "value"),
)
def render_peaks(profile: str | None):
    report = data.report(profile)
    if not report.memory_recorded:
        return c.one_line(imported.NO_MEMORY, "liveness-not-recorded")
    peaks = report.liveness.peaks()
    naming = data.naming(report)
    step = c.fmt_int
    if len(peaks) > MANY_RANKS:  # rank_table's spread: the peak step is a place, not a figure to spread
        peaks, step = peaks.assign(peak_step=peaks["peak_step"].map(c.fmt_int)), str
    if naming.imported:  # a rank, its activations (allocated beyond its weights) and all it allocated
        return c.rank_table(peaks.assign(ipu=peaks["ipu"].map(naming.label)),
                            {"ipu": "rank", "peak_step": "peak step", "name": "in",
                             "not_always_live_bytes": "activations", "total_bytes": "allocated"},
                            formats={"ipu": str, "peak_step": step, "not_always_live_bytes": c.fmt_bytes,
                                     "total_bytes": c.fmt_bytes}, table_id="liveness-peaks-table", rank="ipu")
    return c.rank_table(peaks, {"ipu": "IPU", "peak_step": "peak step", "name": "step",
                                "not_always_live_bytes": "not always-live", "total_bytes": "total"},
                        formats={"ipu": c.fmt_int, "peak_step": step, "not_always_live_bytes": c.fmt_bytes,
                                 "total_bytes": c.fmt_bytes}, table_id="liveness-peaks-table", rank="ipu")


def clicked_step(click: dict | None) -> tuple[int | None, int] | None:
    """(ipu, step) of a click on the liveness plot: x is the step, customdata[0] the IPU; a click on the band of
    many IPUs (``figures.NO_IPU``: no IPU of its own) gives the step alone, IPU None."""
    try:
        point = click["points"][0]
        ipu, step = int(c.custom_value(point, 0)), int(point["x"])
    except (TypeError, KeyError, IndexError, ValueError):
        return None
    return (None if ipu == figures.NO_IPU else ipu), step


@dash.callback(
    Output(ids.LIVENESS_IPU, "options"),
    Output(ids.LIVENESS_IPU, "value"),
    Output(ids.LIVENESS_STEP, "value"),
    Input(ids.PROFILE, "value"),
)
def choose_peak(profile: str | None):
    """A profile starts at its highest not-always-live peak."""
    report = data.report(profile)
    peaks = report.liveness.peaks()
    options = c.ipu_options(peaks["ipu"], data.naming(report))
    if peaks.empty or not report.memory_recorded:
        return options, None, None
    top = peaks.loc[peaks["not_always_live_bytes"].idxmax()]
    return options, int(top["ipu"]), int(top["peak_step"])


@dash.callback(
    Output(ids.LIVENESS_IPU, "value", allow_duplicate=True),
    Output(ids.LIVENESS_STEP, "value", allow_duplicate=True),
    Input(ids.LIVENESS_PLOT, "clickData"),
    prevent_initial_call=True,
)
def choose_clicked(click: dict | None):
    """A click on the plot chooses its IPU and step."""
    chosen = clicked_step(click)
    if chosen is None:
        raise dash.exceptions.PreventUpdate
    ipu, step = chosen
    return dash.no_update if ipu is None else ipu, step


@dash.callback(
    Output(ids.LIVENESS_LIVE_TITLE, "children"),
    Output(ids.LIVENESS_LIVE, "children"),
    Input(ids.LIVENESS_IPU, "value"),
    Input(ids.LIVENESS_STEP, "value"),
    State(ids.PROFILE, "value"),
    prevent_initial_call=True,
)
def show_live(ipu: int | None, step: Any, profile: str | None):
    """What is live on ``ipu`` at ``step`` (``liveness.live_at``), largest first."""
    if ipu is None or step is None:
        raise dash.exceptions.PreventUpdate
    report = data.report(profile)
    naming = data.naming(report)
    ipu, step = int(ipu), int(step)
    steps = report.liveness.by_step(ipu)
    known = steps[steps["step"] == step]
    if known.empty:
        last = int(steps["step"].max()) if len(steps) else -1
        return (html.Span(f"{naming.label(ipu)} has no {'' if naming.imported else 'program '}step {step} "
                          f"(steps 0 to {last}).", className="bad-text"), html.Div())
    row = known.iloc[0]
    if naming.imported:  # the traces record allocations, not named tensors
        return ([html.Strong(f"{naming.label(ipu)}, step {step}"), html.Span(f" · {row['name']}"),
                 html.Span(f" · {c.fmt_bytes(row['not_always_live_bytes'])} activations, "
                           f"{c.fmt_bytes(row['total_bytes'])} allocated in all")],
                c.one_line(imported.NO_VARIABLES, "liveness-no-variables"))
    live = report.liveness.live_at(ipu, step)
    title = [
        html.Strong(f"{ipu_label(ipu)}, step {step}"), html.Span(f" · {row['name']}"),
        html.Span(f" · {c.fmt_bytes(row['not_always_live_bytes'])} not always-live, "
                  f"{c.fmt_bytes(row['total_bytes'])} in all · {len(live):,} variables"),
    ]
    table = c.table(live, {"name": "variable", "category": "category", "always_live": "always-live", "bytes": "bytes",
                           "live_from_step": "live from", "live_to_step": "to"},
                    formats={"live_from_step": c.fmt_int, "live_to_step": c.fmt_int}, max_rows=100,
                    table_id="liveness-live-table")
    return title, table
