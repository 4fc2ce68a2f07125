"""Operations: every op (or block, or layer) with its cycles, FLOPs and memory over the run.

A sortable, filterable table (``report.operations``); clicking a row marks where that op runs in one
iteration of the execution trace and lists its variables. The trace is the iteration's own rows
(``operations.iteration_rows``: a row group or two of the file), at the trace page's levels of detail.
"""

from __future__ import annotations

import math
from typing import Any

import dash
import numpy as np
from dash import Input, Output, dash_table, dcc, html
from dash.dash_table.Format import Format, Scheme

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import operations as figures
from dashboards.figures import trace as trace_figures
from dashboards.figures.ranks import HEATMAP_BINS, MANY_RANKS
from dashboards.figures.style import empty
from popvision_py.analysis.trace import timeline as _trace
from popvision_py.render.rank_words import PROGRAM_KINDS, as_ranks, name as rank_name

dash.register_page(__name__, path="/operations", name="Operations", title="popvision · operations", order=3.5,
                   icon="⚙")

MAX_BINS = 800  # as the trace page: about one bar per pixel column
GROUPS = [{"label": " op", "value": "op"}, {"label": " block", "value": "block"}, {"label": " layer", "value": "layer"}]
DESCRIPTION = {False: "Every op of the model with its cycles, FLOPs and memory over the run, or the same by block "
                      "and by layer. Sort and filter the table; click a row to see where it runs and its variables.",
               True: "Every operator and module of the traces (the program steps the import names) with its time "
                     "over the run, by rank and pass, or by name over the ranks. Click a row to see where it runs."}
# The table's columns per grouping: (column, header); the numeric ones are formatted by their unit.
KEYS = {"op": [("name", "op"), ("kind", "kind"), ("block", "block"), ("stage", "stage"), ("ipu", "IPU"),
               ("pass", "pass"), ("executions", "executions")],
        "block": [("block", "block"), ("stage", "stage"), ("ipu", "IPU"), ("ops", "ops")],
        "layer": [("layer", "layer"), ("stage", "stage"), ("ipu", "IPU"), ("ops", "ops")]}
FIGURES = [("compute_cycles", "compute"), ("exchange_cycles", "exchange"), ("sync_cycles", "sync"),
           ("stream_cycles", "stream"), ("total_cycles", "total"), ("step_pct", "% of time"),
           ("flops", "FLOPs"), ("flops_per_s", "FLOP/s"), ("peak_pct", "% of peak"), ("variables", "variables"),
           ("variable_bytes", "variable bytes"), ("always_live_bytes", "always-live bytes")]
# An imported trace's figures: its time in ns by the phases it has (no syncs; a GPU's copies and sets are its
# stream phase), none of FLOPs or variables (the traces count neither)
IMPORTED_FIGURES = [("compute_cycles", "compute (ns)"), ("exchange_cycles", "communication (ns)"),
                    ("stream_cycles", "copies and sets (ns)"), ("total_cycles", "total (ns)"),
                    ("step_pct", "% of time")]
TABLE_NOTE = {False: "Cycles over the run: each program step's cycles × how often it ran. % of time: the share of the "
                     "run's traced time its IPU spends in it. Filter a column by typing in the row under its header "
                     "(e.g. layer3, > 1000).",
              True: "Time over the profiled steps, in ns. Stretches: the pieces of the rank's time line under the "
                    "name, a kernel cut where another starts or ends beside it, so not a count of calls or kernels "
                    "(the GPU page counts kernels). % of time: the share of its rank's traced time spent in it. "
                    "Filter a column by typing in the row under its header (e.g. nccl, > 1000)."}
EXECUTIONS = {False: "executions", True: rank_name("executions")}  # an imported trace's: stretches (TABLE_NOTE)
TEXT = {"name", "kind", "block", "pass", "layer"}
TRACE_NOTE = {imported_: "One iteration of the trace (the middle one of the first run): every iteration runs the "
                         "same program steps. The dark stripes are the selection's "
                         f"{EXECUTIONS[imported_]}." for imported_ in (False, True)}


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            c.page_header("Operations", DESCRIPTION[False], description_id=ids.OPERATIONS_DESCRIPTION),
            html.Div(id=ids.OPERATIONS_FIGURES, className="cards-slot"),
            c.section(
                "Operations",
                html.Div([html.Span("one row per", className="level"),
                          dcc.RadioItems(id=ids.OPERATIONS_GROUP, options=GROUPS, value="op", inline=True,
                                         className="radio")], className="controls"),
                dash_table.DataTable(
                    id=ids.OPERATIONS_TABLE, sort_action="native", filter_action="native", page_action="native",
                    page_size=25, sort_by=[], style_table={"overflowX": "auto"},
                    style_cell={"fontFamily": "inherit", "fontSize": "13px", "padding": "4px 6px"},
                    style_header={"fontWeight": "600", "whiteSpace": "normal"},
                    # a name and a header wrap (a kernel's name runs to hundreds of characters), so that the
                    # figures after them show at 1,280 px without scrolling
                    style_cell_conditional=[{"if": {"column_id": column}, "textAlign": "left"} for column in TEXT]
                    + [{"if": {"column_id": "name"}, "textAlign": "left", "whiteSpace": "normal",
                        "wordBreak": "break-word", "minWidth": "150px", "maxWidth": "300px"},
                       {"if": {"column_id": "kind"}, "textAlign": "left", "whiteSpace": "normal", "maxWidth": "90px"}],
                    style_data_conditional=[{"if": {"state": "active"}, "backgroundColor": "#e8f0fb",
                                             "border": "1px solid #3B7DD8"}]),
                note=TABLE_NOTE[False], note_id=ids.OPERATIONS_TABLE_NOTE,
            ),
            c.section("Where it runs", html.P(id=ids.OPERATIONS_SELECTED, className="section-note"),
                      c.graph(ids.OPERATIONS_TRACE), note=TRACE_NOTE[False], note_id=ids.OPERATIONS_TRACE_NOTE),
            c.section("Its variables", html.Div(id=ids.OPERATIONS_VARIABLES)),
        ]
    )


def _format(column: str) -> dict[str, Any]:
    if column in TEXT:
        return {"type": "text"}
    if column == "flops_per_s":  # 1.40T, as the Peak card says it, not 1.40e+12
        return {"type": "numeric", "format": Format(precision=3, scheme=Scheme.decimal_si_prefix)}
    if column.endswith("_pct"):
        return {"type": "numeric", "format": Format(precision=3, scheme=Scheme.decimal_or_exponent)}
    return {"type": "numeric", "format": Format().group(True)}


def _rows(frame: Any, columns: list[str]) -> list[dict[str, Any]]:
    """The table's rows: each with its ``id`` (its row in the analysis' order) and NaN as empty."""
    records = frame[columns].to_dict("records")
    for k, row in enumerate(records):
        for key, value in row.items():
            if isinstance(value, float) and math.isnan(value):
                row[key] = None
        row["id"] = k
    return records


def table_for(report: Any, by: str) -> Any:
    if by == "block":
        return report.operations.by_block()
    if by == "layer":
        return report.operations.by_layer()
    return report.operations.by_op()


@dash.callback(
    Output(ids.OPERATIONS_DESCRIPTION, "children"),
    Output(ids.OPERATIONS_FIGURES, "children"),
    Output(ids.OPERATIONS_GROUP, "options"),
    Output(ids.OPERATIONS_TABLE, "columns"),
    Output(ids.OPERATIONS_TABLE, "data"),
    Output(ids.OPERATIONS_TABLE, "active_cell"),
    Output(ids.OPERATIONS_TABLE, "sort_by"),
    Output(ids.OPERATIONS_TABLE, "filter_query"),
    Output(ids.OPERATIONS_TABLE_NOTE, "children"),
    Output(ids.OPERATIONS_TRACE_NOTE, "children"),
    Input(ids.PROFILE, "value"),
    Input(ids.OPERATIONS_GROUP, "value"),
)
def render_table(profile: str | None, by: str | None):
    """The table for the grouping chosen (an imported trace has no blocks), costliest first and unfiltered (a
    filter on a column the grouping lacks would hide every row), and the section's key figures."""
    report = data.report(profile)
    naming = data.naming(report)
    by = by if by in KEYS and not (by == "block" and naming.imported) else "op"
    frame = table_for(report, by)
    keys = [(k, naming.device if k == "ipu" else EXECUTIONS[True] if k == "executions" and naming.imported else h)
            for k, h in KEYS[by] if not (naming.imported and k == "block")]
    shown = keys + (IMPORTED_FIGURES if naming.imported else FIGURES)
    if naming.imported and "kind" in frame:
        frame = frame.assign(kind=frame["kind"].astype(str).map(lambda k: PROGRAM_KINDS.get(k, k)))
    if naming.imported and "ipu" in frame:  # each row's rank as the traces number it (an import of rank 3 alone)
        frame = frame.assign(ipu=as_ranks("ipu", frame["ipu"].to_numpy(), np.asarray(naming.ranks)))
    columns = [{"name": header, "id": column, **_format(column)} for column, header in shown]
    options = [{**o, "disabled": o["value"] == "block" and naming.imported} for o in GROUPS]
    cell = {"row": 0, "column": 0, "row_id": 0, "column_id": shown[0][0]} if len(frame) else None
    return (DESCRIPTION[naming.imported], c.cards(cards(report, naming)), options, columns,
            _rows(frame, [k for k, _ in shown]), cell, [], "", TABLE_NOTE[naming.imported], TRACE_NOTE[naming.imported])


def cards(report: Any, naming: Any) -> list[tuple]:
    f = report.operations.figures()
    time = naming.time
    def share(cycles: int) -> str:
        return c.fmt_pct(100 * cycles / f.ipu_cycles if f.ipu_cycles else float("nan"))

    spent = c.fmt_seconds(f.op_cycles / 1e9) if naming.imported else f"{c.fmt_count(f.op_cycles)} cycles"
    items = [("In ops", c.fmt_pct(f.op_pct), f"of the {time}: {spent}"),
             ("Idle", share(f.idle_cycles), f"of the {time}")]
    if not naming.imported:
        items.insert(1, ("Outside ops", share(f.other_cycles), "host calls, copies between stages, pipeline syncs"))
        items += [("FLOPs", c.fmt_count(f.total_flops), "over the run"),
                  ("Peak", c.fmt_count(f.peak_flops_per_s_per_ipu), f"FLOP/s per IPU ({f.precision})")]
    return items


@dash.callback(
    Output(ids.OPERATIONS_SELECTED, "children"),
    Output(ids.OPERATIONS_TRACE, "figure"),
    Output(ids.OPERATIONS_VARIABLES, "children"),
    Input(ids.PROFILE, "value"),
    Input(ids.OPERATIONS_GROUP, "value"),
    Input(ids.OPERATIONS_TABLE, "active_cell"),
)
def select(profile: str | None, by: str | None, cell: dict | None):
    """The clicked row (its ``row_id``: the row in the analysis' order, whatever the sort and filter): its
    executions marked in one iteration of the trace, and its variables."""
    report = data.report(profile)
    naming = data.naming(report)
    by = by if by in KEYS and not (by == "block" and naming.imported) else "op"
    frame = table_for(report, by)
    row = cell.get("row_id") if isinstance(cell, dict) else None
    if not isinstance(row, int) or not 0 <= row < len(frame):
        return "Click a row of the table.", empty("Click a row of the table to see where it runs."), None
    chosen = frame.iloc[row]
    value = row if by == "op" else str(chosen[by])
    label = (f"{chosen['name']} ({chosen['pass']}, {naming.label(int(chosen['ipu']))})" if by == "op"
             else f"{by} {chosen[by]}")
    marks = report.operations.executions_in_window(by, value)
    base = window_figure(report, naming)
    if base is None:
        return label, empty("The trace has no rows."), None
    ipus = report.operations.window_index().ipus  # cached by the Report, as ``window_figure`` built it
    rows = len(ipus) if len(ipus) > MANY_RANKS else None  # a heat map's rows: its marks drawn taller
    fig = figures.marked(base, figures.marks_trace(marks, label, naming, rows))
    said = (f"{label}: {len(marks):,} {EXECUTIONS[naming.imported]} in this iteration" if len(marks)
            else f"{label}: it does not run in this iteration")
    return said, fig, variables_table(report, naming, by, value)


def window_figure(report: Any, naming: Any) -> dict | None:
    """The iteration's timeline as a figure dict, built once per profile (the Report's cache); None without rows."""
    def build() -> dict | None:
        index = report.operations.window_index()
        if not index.ipus:
            return None
        window = (index.start_cycle, index.end_cycle)
        if len(index.ipus) > MANY_RANKS:  # a row per IPU would be a wall of them: a heat map of their compute
            timeline = _trace.timeline(index, None, None, HEATMAP_BINS)
            fig = trace_figures.compute_heatmap(timeline.frame, timeline.level, window, index.ipus, naming)
            return figures.below(fig).to_dict()
        timeline = _trace.timeline(index, None, None, MAX_BINS)
        return figures.window_trace(timeline.frame, timeline.level, (index.start_cycle, index.end_cycle), index.ipus,
                                    naming).to_dict()

    return report.memo(("operations page", "window figure"), build)


def variables_table(report: Any, naming: Any, by: str, value: Any) -> Any:
    if naming.imported:
        return c.one_line("The traces record allocations, not named tensors: an operator has no variables here.")
    variables = (report.operations.variables(value) if by == "op" else report.operations.group_variables(by, value))
    return c.table(variables, {"name": "variable", "category": "category", "ipu": "IPU", "bytes": "bytes",
                               "tiles": "tiles", "always_live": "always-live", "live_from_step": "live from step",
                               "live_to_step": "to step"},
                   formats={"ipu": c.fmt_int, "tiles": c.fmt_int, "live_from_step": c.fmt_int,
                            "live_to_step": c.fmt_int, "always_live": lambda v: "yes" if v else "no"},
                   table_id="operations-variables-table")
