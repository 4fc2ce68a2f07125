"""Execution trace: the BSP timeline of every IPU, zoomable from the whole run to single steps.

The level of detail is the analysis's (``trace.timeline``): each zoom asks the server for the
window shown, in at most ``MAX_BINS`` bins per IPU, so a trace of millions of rows draws a few
thousand bars. Below, chosen tiles of one IPU as BSP rows over the same window (``tiles.timeline``:
numbers, a range or the busiest N; ``TILE_BINS`` bins shared by the rows), zoomable too, and the
tile balance: each tile's busy share of a chosen compute set, or of the compute sets in the window.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import trace as figures
from dashboards.figures.ranks import HEATMAP_BINS, MANY_RANKS, rows_in_view
from dashboards.figures.style import IPUS, Naming, empty, ipu_label
from dashboards.zoom import follow_moves, moves_store, window_from_relayout
from popvision_py.analysis.trace.levels import WindowTooWideError
from popvision_py.errors import OutOfRangeError

dash.register_page(__name__, path="/trace", name="Execution trace", title="popvision · trace", order=3, icon="≡")

MAX_BINS = 800  # about one bar per pixel column of a wide screen
MAX_STEP_OPTIONS = 300
# Bins of the tile rows, shared by the tiles shown (as many bars as the IPU rows of a 4-IPU run): 8 tiles
# get 400 bins each, 64 get 50.
TILE_BINS = 3200
DEFAULT_TILES = "worst 8"
# The Stores of the two time lines' axis moves (zooms), which their zoom callbacks listen to
IPU_MOVES = follow_moves(ids.TRACE_TIMELINE)
TILE_MOVES = follow_moves(ids.TRACE_TILE_TIMELINE)


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
                moves_store(ids.TRACE_TIMELINE),
                dcc.Store(id=ids.TRACE_ROWS, data=None),
                title_id=ids.TRACE_TIMELINE_TITLE,
            ),
            # An imported pipeline: the chain of passes and transfers that set one measured step
            c.section("Critical path of a step across ranks", c.graph(ids.TRACE_CRITICAL),
                      note="One measured step (the median): compute, communication and waiting on the chain that set "
                           "its time, joined in time order; the Stages page has its culprits and what-ifs.",
                      section_id=ids.TRACE_CRITICAL_SECTION, hidden=True),
            html.Div([
                c.section(
                    "Tiles in time",
                    html.Div(
                        [
                            html.Label("IPU", htmlFor=ids.TRACE_IPU),
                            dcc.Dropdown(id=ids.TRACE_IPU, clearable=False, className="dropdown"),
                            html.Label("tiles", htmlFor=ids.TRACE_TILE_CHOICE),
                            dcc.Input(id=ids.TRACE_TILE_CHOICE, type="text", value=DEFAULT_TILES, debounce=True,
                                      placeholder="0,5,17 · 100-131 · worst 8", className="step-input",
                                      style={"width": "200px"}),
                            html.Span(id=ids.TRACE_TILE_LEVEL, className="level"),
                        ],
                        className="controls",
                    ),
                    c.graph(ids.TRACE_TILE_TIMELINE),
                    moves_store(ids.TRACE_TILE_TIMELINE),
                    note=TILE_NOTE,
                ),
                c.section(
                    "Tile balance",
                    html.Div(
                        [
                            dcc.RadioItems(id=ids.TRACE_BALANCE_SCOPE, value="step", inline=True, className="radio",
                                           options=[{"label": "a compute set", "value": "step"},
                                                    {"label": "the compute sets in view", "value": "view"}]),
                            html.Label("compute set", htmlFor=ids.TRACE_STEP),
                            dcc.Dropdown(id=ids.TRACE_STEP, clearable=False, className="dropdown wide-dropdown"),
                        ],
                        className="controls",
                    ),
                    c.graph(ids.TRACE_TILES),
                    note="A BSP step lasts as long as its slowest tile; the others wait at the sync. Busy share: a "
                         "tile's compute cycles over the step's (or over the IPU's compute-set cycles in view).",
                ),
                dcc.Store(id=ids.TRACE_WINDOW, data=None),
            ], id=ids.TRACE_TILES_SECTION),
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
GPU_DESCRIPTION = ("Compute, exposed communication, copies and sets, and idle time of every rank's GPU over the "
                   "profiled steps. Drag to zoom in; double-click to see the whole run.")
NO_TILE_CYCLES = "A rank has no tiles: each operator's and transfer's time is in the time line above."
TILE_NOTE = ("Compute: the tile's cycles in each compute set (tile_cycles); wait: the rest of the step, done and "
             "waiting at the sync for the slowest tile. Sync, exchange and stream steps hold every tile. Drag to "
             "zoom (both time lines follow).")


@dash.callback(
    Output(ids.TRACE_DESCRIPTION, "children"),
    Output(ids.TRACE_TIMELINE_TITLE, "children"),
    Output(ids.TRACE_TILES_SECTION, "style"),
    Output(ids.TRACE_TILES_NOTE, "style"),
    Input(ids.PROFILE, "value"),
)
def render_words(profile: str | None):
    """An imported trace: its ranks' time line, and one line instead of the cycles per tile."""
    naming = data.naming(data.report(profile))
    imported = naming.imported
    return (GPU_DESCRIPTION if naming.gpu else DESCRIPTION[imported], "Time line per rank" if imported else
            "BSP timeline", c.shown(not imported), c.shown(imported))


def level_text(level: str, window: tuple[int, int], frame: Any, naming: Naming = IPUS) -> str:
    span = window[1] - window[0]
    bins, width = MAX_BINS, span / MAX_BINS
    if level == "bins" and len(frame):  # the trace's levels of detail have bins of their own width
        first = frame.iloc[0]
        width = int(first["end_cycle"]) - int(first["start_cycle"])
        bins = min(MAX_BINS, -(-span // max(width, 1)))
    if naming.imported:  # one cycle is one ns
        where = f"{c.fmt_seconds(window[0] / 1e9)} to {c.fmt_seconds(window[1] / 1e9)}"
        if level == "bins":
            return f"level of detail: bins — {bins:,} bins of {c.fmt_seconds(width / 1e9)} per rank, {where}"
        return f"level of detail: events — {len(frame):,} events, {where}"
    if level == "bins":
        return (f"level of detail: bins — {bins:,} bins of {width:,.0f} cycles per IPU, "
                f"cycles {window[0]:,} to {window[1]:,}")
    return f"level of detail: events — {len(frame):,} events, cycles {window[0]:,} to {window[1]:,}"


def run_extent(report: Any) -> tuple[int, int]:
    """(first, last) cycle of the whole run."""
    start, end = report.trace.extent()
    return int(start), int(end)


def timeline(profile: str | None, window: tuple[int, int] | None, revision: int = 0,
             rows: tuple[int, int] | None = None) -> tuple:
    """Figure and level-of-detail text of the timeline over ``window`` (None: the whole run). Past ``MANY_RANKS``
    IPUs, a heat map of them all unless ``rows`` (``(first, last + 1)``, at most ``MANY_RANKS``) are chosen: then
    theirs alone."""
    report = data.report(profile)
    window = window or run_extent(report)
    ipus = list(range(int(report.target["num_ipus"])))
    many = len(ipus) > MANY_RANKS and rows is None
    chosen = ipus if rows is None else ipus[rows[0]:rows[1]]
    try:
        result = report.trace.timeline(window[0], window[1], max_bins=HEATMAP_BINS if many else MAX_BINS,
                                       ipus=None if rows is None else chosen)
    except WindowTooWideError as error:  # too wide for the rows, too narrow for the levels: the zoom that fits
        return empty(str(error)), str(error)
    naming = data.naming(report)
    if many:
        fig = figures.compute_heatmap(result.frame, result.level, window, ipus, naming)
        text = heatmap_text(result.level, window, result.frame, len(ipus), naming)
    else:
        fig = figures.trace_timeline(result.frame, result.level, window, chosen, naming)
        text = level_text(result.level, window, result.frame, naming)
    # A new revision (a reset, a new profile) makes plotly drop the user's zoom and show the run.
    fig.update_layout(uirevision=f"{data.current().key(profile)}-{revision}-{rows}")
    return fig, text


def heatmap_text(level: str, window: tuple[int, int], frame: Any, ipus: int, naming: Naming) -> str:
    """What the heat map of many IPUs draws: its bins, and how to see a few IPUs' own time lines."""
    if level == "bins" and len(frame):
        width = int(frame.iloc[0]["end_cycle"]) - int(frame.iloc[0]["start_cycle"])
    else:
        width = (window[1] - window[0]) / HEATMAP_BINS
    each = c.fmt_seconds(width / 1e9) if naming.imported else f"{width:,.0f} cycles"
    return (f"level of detail: a heat map of {ipus:,} {naming.device}s, bins of {each}, each cell the bin's share "
            f"in compute; zoom a box onto {MANY_RANKS} of them or fewer to see their time lines")


def _rows(kept: Any) -> tuple[int, int] | None:
    """The rows the Store says are drawn; None: every one (or a heat map)."""
    return (int(kept[0]), int(kept[1])) if isinstance(kept, list) and len(kept) == 2 else None


@dash.callback(
    Output(ids.TRACE_TIMELINE, "figure"),
    Output(ids.TRACE_LEVEL, "children"),
    Output(ids.TRACE_ROWS, "data"),
    Input(ids.PROFILE, "value"),
    Input(ids.TRACE_RESET, "n_clicks"),
)
def render_timeline(profile: str | None, resets: int | None):
    """The whole run (every IPU, or past ``MANY_RANKS`` the heat map of them)."""
    return *timeline(profile, None, resets or 0), None


@dash.callback(
    Output(ids.TRACE_TIMELINE, "figure", allow_duplicate=True),
    Output(ids.TRACE_LEVEL, "children", allow_duplicate=True),
    Output(ids.TRACE_ROWS, "data", allow_duplicate=True),
    Input(IPU_MOVES, "data"),
    State(ids.PROFILE, "value"),
    State(ids.TRACE_RESET, "n_clicks"),
    State(ids.TRACE_ROWS, "data"),
    State(ids.TRACE_WINDOW, "data"),
    prevent_initial_call=True,
)
def zoom_timeline(relayout: dict | None, profile: str | None, resets: int | None, kept: list | None = None,
                  shown: list | None = None):
    """The window a zoom (or a double-click back to the whole run) asks for, at its own level of detail; on the
    heat map of many IPUs, a box onto ``MANY_RANKS`` of them or fewer draws their own time lines."""
    report = data.report(profile)
    window = window_from_relayout(relayout, run_extent(report), data.naming(report).from_x)
    rows, many = _rows(kept), int(report.target["num_ipus"])
    if rows is None and many > MANY_RANKS:
        chosen = rows_in_view(relayout, many)
        if chosen is not None and chosen[1] - chosen[0] <= MANY_RANKS:
            return *timeline(profile, window or _window(report, shown), resets or 0, chosen), list(chosen)
    if window is None:
        raise dash.exceptions.PreventUpdate
    return *timeline(profile, window, resets or 0, rows), kept


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
    if naming.imported:  # in time (a cycle is a ns), over the profiled steps; no syncs (``Naming.phases``)
        items = [("Profiled", c.fmt_seconds(summary.total_cycles / summary.clock_hz),
                  f"over {c.fmt_quantity(summary.iterations, 'step')}")]
        items += [(naming.phase(phase), c.fmt_pct(shares[phase]), f"of {naming.time}") for phase in naming.phases]
    else:
        items = [
            ("Run", f"{c.fmt_count(summary.total_cycles)} cycles",
             f"{c.fmt_seconds(summary.total_cycles / summary.clock_hz)} over "
             f"{c.fmt_quantity(summary.iterations, 'iteration')}"),
        ] + [(phase, c.fmt_pct(pct), "of IPU time") for phase, pct in shares.items()]
    options = c.ipu_options(range(int(report.target["num_ipus"])), naming)
    return c.cards(items), options, 0


def step_options(steps: Any) -> list[dict]:
    """Compute sets of one IPU, the costliest over the run first (``trace.steps``)."""
    sets = steps[steps["type"].astype(str) == "compute_set"]
    sets = sets.assign(total=sets["cycles"] * sets["executions"]).sort_values(["total", "step"],
                                                                              ascending=[False, True])
    return [
        {"label": f"step {int(r.step)} · {r.name} · {int(r.cycles):,} cycles × {int(r.executions):,}",
         "value": int(r.step)}
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


def show_tile_cycles(step: int | None, ipu: int | None, profile: str | None):
    """The tile balance of one compute set (what the balance figure shows with its first choice)."""
    return show_tile_balance(step, "step", None, ipu, profile)


@dash.callback(
    Output(ids.TRACE_TILES, "figure"),
    Input(ids.TRACE_STEP, "value"),
    Input(ids.TRACE_BALANCE_SCOPE, "value"),
    Input(ids.TRACE_WINDOW, "data"),
    State(ids.TRACE_IPU, "value"),
    State(ids.PROFILE, "value"),
)
def show_tile_balance(step: int | None, scope: str | None, window: list | None, ipu: int | None, profile: str | None):
    """Each tile's busy share of one compute set, or of the IPU's compute sets in the window shown."""
    report = data.report(profile)
    if ipu is None or report.imported:
        return empty("This IPU runs no compute set.", height=300)
    ipu = int(ipu)
    if scope == "view":
        a, b = _window(report, window)
        try:
            frame, cycles = report.tiles.window_balance(ipu, a, b)
        except WindowTooWideError as error:  # the window's rows are too many to read: the zoom that fits
            return empty(str(error), height=300)
        title = f"{ipu_label(ipu)}, compute sets in cycles {a:,} to {b:,} ({cycles:,} cycles of compute sets)"
        return figures.tile_balance(frame, title, "of the compute sets' cycles in view")
    if scope == "step" and triggered(every=True) == {ids.TRACE_WINDOW}:
        raise dash.exceptions.PreventUpdate  # one compute set's balance does not depend on the window
    if step is None:
        return empty("This IPU runs no compute set.", height=300)
    steps = report.trace.steps(ipu)
    name = steps.loc[steps["step"] == int(step), "name"]
    title = f"{ipu_label(ipu)}, step {int(step)}" + (f" · {name.iloc[0]}" if len(name) else "")
    return figures.tile_balance(report.tiles.step_balance(ipu, int(step)), title)


# -- tiles in time ---------------------------------------------------------------------------------


def triggered(every: bool = False) -> Any:
    """The id of the input that fired the callback (``every``: the set of those that did, together); None
    outside one (a direct call)."""
    try:
        if every:
            return {key.split(".", 1)[0] for key in dash.ctx.triggered_prop_ids}
        return dash.ctx.triggered_id
    except dash.exceptions.MissingCallbackContextException:
        return None


def _window(report: Any, window: list | None) -> tuple[int, int]:
    """The window the store holds, or the whole run."""
    if window and len(window) == 2:
        return int(window[0]), int(window[1])
    return run_extent(report)


@dash.callback(
    Output(ids.TRACE_WINDOW, "data"),
    Input(IPU_MOVES, "data"),
    Input(TILE_MOVES, "data"),
    Input(ids.TRACE_RESET, "n_clicks"),
    Input(ids.PROFILE, "value"),
)
def follow_window(ipu_zoom: dict | None, tile_zoom: dict | None, resets: int | None, profile: str | None,
                  trigger: str | None = None):
    """The window a zoom on either time line asks for (None: the whole run, after a reset or a new profile).
    ``trigger``: the Store of the moves of the graph zoomed (``IPU_MOVES``, ``TILE_MOVES``), when called outside
    Dash (tests)."""
    trigger = trigger or triggered()
    if trigger not in (IPU_MOVES, TILE_MOVES):
        return None
    report = data.report(profile)
    window = window_from_relayout(ipu_zoom if trigger == IPU_MOVES else tile_zoom, run_extent(report),
                                  data.naming(report).from_x)
    if window is None:
        raise dash.exceptions.PreventUpdate
    return list(window)


@dash.callback(
    Output(ids.TRACE_TIMELINE, "figure", allow_duplicate=True),
    Output(ids.TRACE_LEVEL, "children", allow_duplicate=True),
    Output(ids.TRACE_ROWS, "data", allow_duplicate=True),
    Input(TILE_MOVES, "data"),
    State(ids.PROFILE, "value"),
    State(ids.TRACE_RESET, "n_clicks"),
    State(ids.TRACE_ROWS, "data"),
    prevent_initial_call=True,
)
def zoom_from_tiles(relayout: dict | None, profile: str | None, resets: int | None, kept: list | None = None):
    """A zoom on the tiles' time line zooms the IPUs' too (in time only: the tiles' rows are not IPUs)."""
    window = window_from_relayout(relayout, run_extent(data.report(profile)))
    if window is None:
        raise dash.exceptions.PreventUpdate
    return *timeline(profile, window, resets or 0, _rows(kept)), kept


def tile_level_text(level: str, window: tuple[int, int], frame: Any, bins: int, described: str) -> str:
    if level == "bins":
        return (f"level of detail: bins — {bins:,} bins of {(window[1] - window[0]) / bins:,.0f} cycles per tile, "
                f"cycles {window[0]:,} to {window[1]:,} · {described}")
    return f"level of detail: events — {len(frame):,} bars, cycles {window[0]:,} to {window[1]:,} · {described}"


def describe_choice(spec: str, tiles: list[int]) -> str:
    """What the tiles shown are, in words: the busiest N say by what."""
    if spec.strip().lower().split()[:1] in (["worst"], ["busiest"]):
        return f"the {len(tiles)} busiest tiles (most compute cycles over the run)"
    return f"{len(tiles)} tile{'s' if len(tiles) != 1 else ''}"


def tile_timeline(profile: str | None, ipu: int, spec: str, window: tuple[int, int] | None) -> tuple:
    """Figure and level-of-detail text of the chosen tiles over ``window`` (None: the whole run)."""
    report = data.report(profile)
    window = window or run_extent(report)
    try:
        tiles = report.tiles.choose(ipu, spec)
    except OutOfRangeError as error:  # a choice the analysis cannot read: its one sentence
        return empty(str(error), height=220), str(error)
    bins = max(min(MAX_BINS, TILE_BINS // len(tiles)), 1)
    try:
        result = report.tiles.timeline(ipu, tiles, window[0], window[1], max_bins=bins)
    except WindowTooWideError as error:  # the tiles need the window's rows: too many, so the zoom that fits
        return empty(str(error), height=220), str(error)
    names = None
    if result.level == "events":
        steps = report.trace.steps(ipu)
        names = dict(zip(steps["step"].astype(int), steps["name"].astype(str)))
    fig = figures.tile_timeline(result.frame, result.level, window, tiles, names)
    fig.update_layout(title=dict(text=f"{ipu_label(ipu)}: {', '.join(map(str, tiles[:12]))}"
                                      + (" …" if len(tiles) > 12 else ""), x=0, xanchor="left", font=dict(size=13),
                                 y=1, yref="container", yanchor="top", pad=dict(t=8)),
                      margin=dict(t=72),  # the title above the legend, not under it
                      uirevision=f"{data.current().key(profile)}-{window[0]}-{window[1]}")
    return fig, tile_level_text(result.level, window, result.frame, bins, describe_choice(spec, tiles))


@dash.callback(
    Output(ids.TRACE_TILE_TIMELINE, "figure"),
    Output(ids.TRACE_TILE_LEVEL, "children"),
    Input(ids.TRACE_WINDOW, "data"),
    Input(ids.TRACE_TILE_CHOICE, "value"),
    Input(ids.TRACE_IPU, "value"),
    State(ids.PROFILE, "value"),
)
def render_tile_timeline(window: list | None, spec: str | None, ipu: int | None, profile: str | None):
    """The chosen tiles over the window both time lines show."""
    report = data.report(profile)
    if ipu is None or report.imported:
        return empty("Choose an IPU.", height=220), ""
    return tile_timeline(profile, int(ipu), spec or DEFAULT_TILES, _window(report, window))


@dash.callback(
    Output(ids.TRACE_CRITICAL_SECTION, "style"),
    Output(ids.TRACE_CRITICAL, "figure"),
    Input(ids.PROFILE, "value"),
)
def render_critical_path(profile: str | None):
    """An imported pipeline's critical path of one step; hidden for any other profile."""
    from popvision_py.analysis.pipeline.replay import ReplayError

    report = data.report(profile)
    if not data.replayable(report):
        return c.shown(False), empty("")
    try:
        return c.shown(True), figures.critical_chain(report.critical_path.chain(), data.naming(report))
    except ReplayError as exc:
        return c.shown(True), empty(str(exc))
