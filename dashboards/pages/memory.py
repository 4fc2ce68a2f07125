"""Memory: every tile of an IPU as a heat map (out-of-memory tiles marked), categories, distribution.

Clicking a tile shows its memory by category and its largest variables.
"""

from __future__ import annotations

from typing import Any

import dash
import numpy as np
from dash import Input, Output, Patch, State, dcc, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import memory as figures
from dashboards.figures.ranks import MANY_RANKS
from dashboards.figures.style import IPUS, Naming, empty, ipu_label
from popvision_py.analysis.imported import ranks as imported
from popvision_py.analysis.ipu import memory_depth

dash.register_page(__name__, path="/memory", name="Memory", title="popvision · memory", order=1, icon="▦")


def layout(colour: str = "peak", tab: str = "variables", **_query: str) -> html.Div:
    """The page; ``?colour=category|variable`` and ``?tab=compute|vertices|exchanges`` open it so coloured and
    on that tab (the screenshots' "memory-depth" view)."""
    colour = colour if colour in {o["value"] for o in COLOURINGS} else "peak"
    tab = tab if tab in TABS else "variables"
    return html.Div(
        [
            c.page_header("Memory", DESCRIPTION[False], description_id=ids.MEMORY_DESCRIPTION),
            html.Div(id=ids.MEMORY_FIGURES, className="cards-slot"),
            # An imported trace's rank has no tiles: one line instead of the tile map, histogram and tile tables.
            c.section("Tiles", c.one_line(imported.NO_TILES, ids.MEMORY_NO_TILES), section_id=ids.MEMORY_TILES_NOTE,
                      hidden=True),
            html.Div(
                id=ids.MEMORY_TILE_VIEWS,
                children=[
                    c.section(
                        "Tile map",
                        html.Div([html.Label("IPU", htmlFor=ids.MEMORY_IPU),
                                  dcc.Dropdown(id=ids.MEMORY_IPU, clearable=False, className="dropdown"),
                                  html.Label("Tile", htmlFor=ids.MEMORY_TILE_INPUT),
                                  dcc.Input(id=ids.MEMORY_TILE_INPUT, type="number", min=0, step=1, debounce=True,
                                            placeholder="number", className="step-input")],
                                 className="controls"),
                        html.Div([html.Label("Colour by", htmlFor=ids.MEMORY_COLOUR_BY),
                                  dcc.RadioItems(id=ids.MEMORY_COLOUR_BY, options=COLOURINGS, value=colour,
                                                 inline=True),
                                  dcc.Dropdown(id=ids.MEMORY_VARIABLE, placeholder="a variable, largest first",
                                               searchable=True, className="wide-dropdown")],
                                 className="controls"),
                        dcc.Store(id=ids.MEMORY_SELECTED),
                        c.graph(ids.MEMORY_TILE_MAP),
                        note="Peak memory per tile, 0 to the fullest tile (to the tile's capacity when "
                             "tiles overflow); out-of-memory tiles are crossed in red. Or each tile's dominant "
                             "category, or one variable's bytes on each tile.",
                        class_name="wide",
                    ),
                    c.section(
                        "Selected tile",
                        html.Div(id=ids.MEMORY_TILE_TITLE, className="tile-title"),
                        c.graph(ids.MEMORY_TILE_BREAKDOWN),
                        class_name="narrow",
                    ),
                ],
                className="grid-wide-narrow",
            ),
            # Full width: six columns of long variable paths and byte counts do not fit the narrow panel.
            c.section("The selected tile in depth", dcc.Tabs(id=ids.MEMORY_TILE_TABS, value=tab, children=[
                dcc.Tab(label="Variables", value="variables", children=html.Div(id=ids.MEMORY_TILE_VARIABLES)),
                dcc.Tab(label="Compute sets", value="compute", children=html.Div(id=ids.MEMORY_TAB_COMPUTE)),
                dcc.Tab(label="Vertices", value="vertices", children=html.Div(id=ids.MEMORY_TAB_VERTICES)),
                dcc.Tab(label="Exchanges", value="exchanges", children=html.Div(id=ids.MEMORY_TAB_EXCHANGES)),
            ]), section_id=ids.MEMORY_VARIABLES_SECTION,
                note="Variables: the largest on the tile, with their liveness; compute sets: the tile's cycles in "
                     "each; vertices: by codelet; exchanges: the steps the tile takes part in, as far as the "
                     "profile says."),
            c.section("The fullest tiles over the program steps", c.graph(ids.MEMORY_WORST_STEPS),
                      section_id=ids.MEMORY_WORST_SECTION,
                      note="The selected IPU's five fullest tiles: always-live bytes plus the not-always-live "
                           "variables live on the tile at each step."),
            html.Div(
                [
                    c.section("Memory per IPU by category", c.graph(ids.MEMORY_CATEGORIES),
                              note=CATEGORIES_NOTE[False], title_id=ids.MEMORY_CATEGORIES_TITLE,
                              note_id=ids.MEMORY_CATEGORIES_NOTE),
                    c.section("Distribution over tiles", c.graph(ids.MEMORY_HISTOGRAM),
                              section_id=ids.MEMORY_HISTOGRAM_SECTION),
                ],
                id=ids.MEMORY_GRID,
                className="grid-2",
            ),
            c.section("Out-of-memory tiles", html.Div(id=ids.MEMORY_OOM), note="Largest excess first.",
                      section_id=ids.MEMORY_OOM_SECTION),
        ]
    )


COLOURINGS = [{"label": "peak memory", "value": "peak"}, {"label": "dominant category", "value": "category"},
              {"label": "a variable", "value": "variable"}]
TABS = ("variables", "compute", "vertices", "exchanges")
WORST_TILES = 5  # tiles in "the fullest tiles over the program steps"

# What the page says, for an IPU profile (False) and one imported from PyTorch traces (True)
DESCRIPTION = {False: "Peak memory of every tile, by category; click a tile to see what it holds.",
               True: "Memory each rank allocated at its peak: its weights (allocated all along) and activations "
                     "(the rest)."}
CATEGORIES_NOTE = {False: "Hatched: not-always-live (at each tile's own peak).",
                   True: "Weights: what stayed allocated all along (parameters, gradients, optimiser state); "
                         "activations (hatched): the rest of the rank's peak."}

MANY_NOTE = (f"Past {MANY_RANKS} {{device}}s, a box for each category: its bytes over the {{device}}s, least to most "
             "with the quartiles; in red the {device}s furthest past each median, named.")


@dash.callback(
    Output(ids.MEMORY_DESCRIPTION, "children"),
    Output(ids.MEMORY_TILES_NOTE, "style"),
    Output(ids.MEMORY_TILE_VIEWS, "style"),
    Output(ids.MEMORY_VARIABLES_SECTION, "style"),
    Output(ids.MEMORY_HISTOGRAM_SECTION, "style"),
    Output(ids.MEMORY_OOM_SECTION, "style"),
    Output(ids.MEMORY_WORST_SECTION, "style"),
    Output(ids.MEMORY_GRID, "className"),
    Output(ids.MEMORY_CATEGORIES_TITLE, "children"),
    Output(ids.MEMORY_CATEGORIES_NOTE, "children"),
    Input(ids.PROFILE, "value"),
)
def render_words(profile: str | None):
    """An imported trace's ranks have no tiles: its one line shows and the tile views hide."""
    report = data.report(profile)
    naming = data.naming(report)
    imported_ = naming.imported
    tiles = c.shown(not imported_)
    many = len(report.memory.by_ipu()) > MANY_RANKS
    title = (f"Memory over the {naming.device}s by category" if many
             else f"Memory per {naming.device} by category")
    return (DESCRIPTION[imported_] if report.memory_recorded else imported.NO_MEMORY, c.shown(imported_), tiles,
            tiles, tiles, tiles, tiles,
            "" if imported_ else "grid-2",
            title, MANY_NOTE.format(device=naming.device) if many else CATEGORIES_NOTE[imported_])


def ipu_cards(by_ipu: Any, naming: Naming = IPUS, capacity: bool = True) -> list[tuple]:
    """One card per IPU: used share of its memory, headroom, out-of-memory tiles. An imported trace's rank:
    its peak allocation, its weights and activations, and its share of the device's memory when known."""
    if naming.imported:
        return [(naming.label(row.ipu), c.fmt_bytes(row.total_bytes),
                 f"weights {c.fmt_bytes(row.always_live_bytes)}, activations {c.fmt_bytes(row.not_always_live_bytes)}"
                 + (f"; {c.fmt_pct(row.used_pct)} of {c.fmt_bytes(row.capacity_bytes)}" if capacity else ""),
                 "bad" if capacity and row.total_bytes > row.capacity_bytes else "")
                for row in by_ipu.itertuples(index=False)]
    items = []
    for row in by_ipu.itertuples(index=False):
        oom = int(row.oom_tiles)
        items.append((
            ipu_label(row.ipu),
            c.fmt_pct(row.used_pct),
            f"{c.fmt_bytes(row.total_bytes)} of {c.fmt_bytes(row.capacity_bytes)}; "
            + (f"{oom:,} tiles out of memory" if oom else f"largest tile {c.fmt_bytes(row.max_tile_bytes)}"),
            "bad" if oom else "",
        ))
    return items


def many_cards(by_ipu: Any, naming: Naming = IPUS, capacity: bool = True) -> list[tuple]:
    """Past ``MANY_RANKS`` IPUs (or ranks), four cards instead of one each: how many, the median peak, the least
    and most, and the fullest one named (with its out-of-memory tiles, or its share of the device's memory)."""
    total = by_ipu["total_bytes"].to_numpy()
    fullest = by_ipu.iloc[int(total.argmax())]
    device = naming.device
    if naming.imported:
        share = f"; {c.fmt_pct(fullest.used_pct)} of {c.fmt_bytes(fullest.capacity_bytes)}" if capacity else ""
        over = capacity and bool((total > by_ipu["capacity_bytes"].to_numpy()).any())
        note, tone = f"{c.fmt_bytes(fullest.total_bytes)} at its peak{share}", "bad" if over else ""
        count = f"{c.fmt_bytes(int(total.sum()))} allocated at their peaks"
    else:
        oom = int(by_ipu["oom_tiles"].sum())
        note = (f"{c.fmt_pct(fullest.used_pct)} of {c.fmt_bytes(fullest.capacity_bytes)}; "
                f"{int(fullest.oom_tiles):,} tiles out of memory")
        tone = "bad" if oom else ""
        count = f"{oom:,} tiles out of memory" if oom else "every tile fits"
    alike = c.fmt_bytes(float(total.min())) == c.fmt_bytes(float(total.max()))  # as the card would show them
    spread = ("Least to most", c.fmt_bytes(float(total.min())), f"every {device}'s peak alike") if alike else (
        "Least to most", c.fmt_range(float(total.min()), float(total.max()), c.fmt_bytes), "peak")
    return [(f"{device[0].upper()}{device[1:]}s", c.fmt_int(len(by_ipu)), count),
            ("Median peak", c.fmt_bytes(float(np.median(total))), f"over the {len(by_ipu):,} {device}s"),
            spread,
            (f"Fullest {device}", naming.label(int(fullest.ipu)), note, tone)]


def oom_table(oom: Any, shown: int = 12) -> html.Div:
    """The out-of-memory tiles, largest excess first, the first ``shown`` of them."""
    if oom.empty:
        return html.Div("Every tile fits.", className="empty good")
    more = len(oom) - shown
    return html.Div([
        c.table(oom.head(shown),
                {"ipu": "IPU", "tile": "tile", "total_bytes": "peak", "excess_bytes": "over capacity by"},
                formats={"ipu": c.fmt_int, "tile": c.fmt_int}, table_id="memory-oom-table"),
        html.P(f"… and {more:,} more tiles out of memory.", className="section-note") if more > 0 else "",
    ])


@dash.callback(
    Output(ids.MEMORY_IPU, "options"),
    Output(ids.MEMORY_IPU, "value"),
    Output(ids.MEMORY_FIGURES, "children"),
    Output(ids.MEMORY_CATEGORIES, "figure"),
    Output(ids.MEMORY_HISTOGRAM, "figure"),
    Output(ids.MEMORY_OOM, "children"),
    Input(ids.PROFILE, "value"),
)
def render_overview(profile: str | None):
    """Everything on the page that does not depend on the IPU or tile chosen."""
    report = data.report(profile)
    by_ipu = report.memory.by_ipu()
    by_tile = report.memory.by_tile()
    bytes_per_tile = int(report.target["bytes_per_tile"])
    oom = report.memory.out_of_memory()
    naming = data.naming(report)
    summary = report.summary.figures()
    first = int(summary.worst_ipu) if summary.worst_ipu >= 0 else int(by_ipu["ipu"].iloc[0])  # -1: no tile memory
    # the picker chooses an IPU's tile map: an imported trace's is hidden (a rank has no tiles), so its picker
    # holds the rank it is set to, not thousands of options no one sees
    options = c.ipu_options([first] if naming.imported else by_ipu["ipu"], naming)
    if not report.memory_recorded:  # an imported trace without [memory] events: not a number, one line
        return (options, first, c.one_line(imported.NO_MEMORY, "memory-not-recorded"), empty(imported.NO_MEMORY),
                empty(imported.NO_TILES), oom_table(oom))
    capacity = data.capacity_known(report)
    many = len(by_ipu) > MANY_RANKS
    return (
        options,
        first,
        c.cards(many_cards(by_ipu, naming, capacity) if many else ipu_cards(by_ipu, naming, capacity)),
        (figures.category_spread if many else figures.category_stacks)(report.memory.by_category(), naming=naming),
        # an imported trace's rank has no tiles: its histogram's section is hidden, so not drawn
        empty(imported.NO_TILES) if naming.imported else figures.tile_histogram(by_tile, bytes_per_tile),
        oom_table(oom),
    )


def clicked_tile(click: dict | None, tiles_per_ipu: int) -> int | None:
    """The tile at the clicked cell (or out-of-memory marker) of the tile map: x is its column, y its row."""
    try:
        point = click["points"][0]
        column, row = int(point["x"]), int(point["y"])
    except (TypeError, KeyError, IndexError, ValueError):
        return None
    columns = figures.tile_columns(tiles_per_ipu)
    tile = row * columns + column
    return tile if 0 <= column < columns and 0 <= tile < tiles_per_ipu else None


def tile_panel(report: Any, ipu: int, tile: int) -> tuple:
    """Title, breakdown figure and variables table of one tile, and the tile for the tabs (``MEMORY_SELECTED``)."""
    bytes_per_tile = int(report.target["bytes_per_tile"])
    breakdown = report.memory.tile_breakdown(ipu, tile)
    variables = report.memory.tile_variables(ipu, tile, n=15)
    total = int(breakdown["bytes"].sum()) if len(breakdown) else 0
    over = total - bytes_per_tile
    title = [
        html.Strong(f"{ipu_label(ipu)}, tile {tile}"),
        html.Span(f" · {c.fmt_bytes(total)} of {c.fmt_bytes(bytes_per_tile)}"),
        html.Span(f" · out of memory by {c.fmt_bytes(over)}", className="bad-text") if over > 0 else "",
    ]
    table = c.table(
        variables,
        {"name": "variable", "category": "category", "always_live": "always-live", "bytes_on_tile": "on tile",
         "live_from_step": "live from", "live_to_step": "to"},
        formats={"bytes_on_tile": c.fmt_bytes, "live_from_step": c.fmt_int, "live_to_step": c.fmt_int},
        table_id="memory-tile-variables-table",
    )
    return (html.Div(title, id="memory-tile-name"), figures.tile_breakdown(breakdown, bytes_per_tile), table,
            {"ipu": ipu, "tile": tile})


TILE_PANEL = (Output(ids.MEMORY_TILE_TITLE, "children"), Output(ids.MEMORY_TILE_BREAKDOWN, "figure"),
              Output(ids.MEMORY_TILE_VARIABLES, "children"), Output(ids.MEMORY_SELECTED, "data"))


def tile_map(report: Any, ipu: int, colour_by: str | None, variable: int | None, tile: int) -> Any:
    """The tile map of one IPU coloured by peak memory, dominant category or one variable's bytes."""
    target = report.target
    tiles_per_ipu = int(target["tiles_per_ipu"])
    depth = report.memory.depth
    if colour_by == "category":
        categories, grid = depth.categories(ipu)
        return figures.category_map(depth.dominant(ipu).frame(), list(categories), grid, tiles_per_ipu,
                                    selected_tile=tile)
    if colour_by == "variable" and variable is not None:
        choices = depth.choices(ipu)
        row = np.flatnonzero(np.asarray(choices["var_id"]) == int(variable))
        if len(row):  # a variable of this IPU (the picker may still hold the last IPU's)
            return figures.footprint_map(depth.footprint(int(variable)).frame(), str(choices["name"][row[0]]),
                                         tiles_per_ipu, selected_tile=tile)
    by_tile = report.memory.by_tile(ipu)
    return figures.tile_map(by_tile, tiles_per_ipu, int(target["bytes_per_tile"]), selected_tile=tile)


@dash.callback(
    Output(ids.MEMORY_TILE_MAP, "figure"),
    *TILE_PANEL,
    Input(ids.MEMORY_IPU, "value"),
    Input(ids.MEMORY_COLOUR_BY, "value"),
    Input(ids.MEMORY_VARIABLE, "value"),
    State(ids.MEMORY_SELECTED, "data"),
    State(ids.PROFILE, "value"),
)
def render_ipu(ipu: int | None, colour_by: str | None, variable: int | None, selected: dict | None,
               profile: str | None):
    """The tile map of one IPU as coloured; the tile shown stays while the IPU does (a new colouring),
    else the IPU's fullest tile is shown."""
    if ipu is None:
        raise dash.exceptions.PreventUpdate
    report = data.report(profile)
    ipu = int(ipu)
    if isinstance(selected, dict) and selected.get("ipu") == ipu and isinstance(selected.get("tile"), int):
        tile = int(selected["tile"])
    else:
        by_tile = report.memory.by_tile(ipu)
        tile = int(by_tile.loc[by_tile["total_bytes"].idxmax(), "tile"]) if len(by_tile) else 0
    return (tile_map(report, ipu, colour_by, variable, tile), *tile_panel(report, ipu, tile))


@dash.callback(
    Output(ids.MEMORY_VARIABLE, "options"),
    Output(ids.MEMORY_VARIABLE, "value"),
    Input(ids.MEMORY_IPU, "value"),
    State(ids.PROFILE, "value"),
)
def variable_options(ipu: int | None, profile: str | None):
    """The IPU's variables for the picker, largest first: name, category and bytes."""
    if ipu is None:
        raise dash.exceptions.PreventUpdate
    choices = data.report(profile).memory.depth.choices(int(ipu))
    labels = [f"{name} · {category} · {c.fmt_bytes(size)}" for name, category, size in
              zip(choices["name"].tolist(), choices["category"].tolist(), choices["bytes"].tolist())]
    return [{"label": label, "value": int(v)} for label, v in zip(labels, choices["var_id"].tolist())], None


@dash.callback(
    Output(ids.MEMORY_COLOUR_BY, "value"),
    Input(ids.MEMORY_VARIABLE, "value"),
    prevent_initial_call=True,
)
def colour_by_variable(variable: int | None):
    """Picking a variable shows its footprint."""
    if variable is None:
        raise dash.exceptions.PreventUpdate
    return "variable"


@dash.callback(
    Output(ids.MEMORY_TILE_MAP, "figure", allow_duplicate=True),
    *(Output(o.component_id, o.component_property, allow_duplicate=True) for o in TILE_PANEL),
    Input(ids.MEMORY_TILE_MAP, "clickData"),
    State(ids.MEMORY_IPU, "value"),
    State(ids.PROFILE, "value"),
    prevent_initial_call=True,
)
def show_tile(click: dict | None, ipu: int | None, profile: str | None):
    """The clicked tile's breakdown and tabs; the map marks it."""
    report = data.report(profile)
    return select(report, ipu, clicked_tile(click, int(report.target["tiles_per_ipu"])))


@dash.callback(
    Output(ids.MEMORY_TILE_MAP, "figure", allow_duplicate=True),
    *(Output(o.component_id, o.component_property, allow_duplicate=True) for o in TILE_PANEL),
    Input(ids.MEMORY_TILE_INPUT, "value"),
    State(ids.MEMORY_IPU, "value"),
    State(ids.PROFILE, "value"),
    prevent_initial_call=True,
)
def type_tile(number: int | float | None, ipu: int | None, profile: str | None):
    """The tile whose number was typed, as if clicked (a number off the IPU changes nothing)."""
    report = data.report(profile)
    tiles_per_ipu = int(report.target["tiles_per_ipu"])
    tile = int(number) if isinstance(number, (int, float)) and number == int(number) else None
    return select(report, ipu, tile if tile is not None and 0 <= tile < tiles_per_ipu else None)


def select(report: Any, ipu: int | None, tile: int | None) -> tuple:
    """The map's mark moved to ``tile`` and the tile's panel; nothing changes without a tile."""
    if ipu is None or tile is None:
        raise dash.exceptions.PreventUpdate
    highlight = Patch()
    row, col = figures.tile_position(tile, figures.tile_columns(int(report.target["tiles_per_ipu"])))
    highlight["layout"]["shapes"] = [figures.tile_highlight(row, col)]
    return (highlight, *tile_panel(report, int(ipu), tile))


@dash.callback(
    Output(ids.MEMORY_TAB_COMPUTE, "children"),
    Output(ids.MEMORY_TAB_VERTICES, "children"),
    Output(ids.MEMORY_TAB_EXCHANGES, "children"),
    Input(ids.MEMORY_SELECTED, "data"),
    State(ids.PROFILE, "value"),
)
def tile_tabs(selected: dict | None, profile: str | None):
    """The selected tile's compute sets, vertices and exchanges."""
    if not isinstance(selected, dict) or not {"ipu", "tile"} <= set(selected):
        raise dash.exceptions.PreventUpdate
    depth = data.report(profile).memory.depth
    ipu, tile = int(selected["ipu"]), int(selected["tile"])
    compute = depth.compute_sets(ipu, tile).frame()
    shown = {"step": "step", "name": "compute set", "pass": "pass", "cycles": "cycles on the tile",
             "step_cycles": "step (slowest tile)", "busy_pct": "busy"}
    if depth.vertices_recorded:
        shown["vertices"] = "vertices"
    compute_table = c.table(compute, shown, formats={"step": c.fmt_int}, table_id="memory-tile-compute-table")
    if depth.vertices_recorded:
        vertices = c.table(depth.vertices(ipu, tile).frame(),
                           {"kind": "codelet (op kind)", "pass": "pass", "compute_sets": "compute sets",
                            "vertices": "vertices", "max_vertices": "most in one compute set"},
                           table_id="memory-tile-vertices-table")
    else:
        vertices = c.one_line(memory_depth.NOT_RECORDED, "memory-tile-vertices-note")
    exchanges = c.table(depth.exchanges(ipu, tile).frame(),
                        {"step": "step", "name": "exchange", "kind": "kind", "src_ipu": "from IPU", "dst_ipu": "to IPU",
                         "tiles": "tiles", "bytes": "bytes", "cycles": "cycles"},
                        formats={"step": c.fmt_int, "src_ipu": c.fmt_int, "dst_ipu": c.fmt_int},
                        table_id="memory-tile-exchanges-table")
    return compute_table, vertices, exchanges


@dash.callback(
    Output(ids.MEMORY_WORST_STEPS, "figure"),
    Input(ids.MEMORY_IPU, "value"),
    State(ids.PROFILE, "value"),
)
def worst_steps(ipu: int | None, profile: str | None):
    """The IPU's fullest tiles over its program steps."""
    if ipu is None:
        raise dash.exceptions.PreventUpdate
    report = data.report(profile)
    over = report.memory.depth.over_steps(int(ipu), WORST_TILES).frame()
    programs = report.table("programs")
    names = programs.loc[programs["ipu"] == int(ipu)].sort_values("step")["name"].astype(str).to_numpy()
    return figures.worst_over_steps(over, int(report.target["bytes_per_tile"]), names)
