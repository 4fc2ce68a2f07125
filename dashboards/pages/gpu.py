"""GPU: a GPU trace's kernels (the profile's ``kernels`` table, ``report.gpu``). Each rank's streams over time,
its kernels coloured by kind; the breakdowns per rank the report's gpu section gives; the costliest kernels.

The streams are drawn as the Execution trace and System pages draw their time lines: each zoom asks the
analysis for the window shown (``gpu.stream_window``), which gives each kernel while the window holds at
most ``MAX_KERNELS``, else each kind's occupancy of each stream in ``MAX_BINS`` bins, so a trace of millions
of kernels draws a few thousand bars. The navigation lists the page only for a profile holding kernels
(``data.has_kernels``); opened on any other, it says in one sentence why there is nothing to show.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

import dash
from dash import Input, Output, State, dash_table, dcc, html
from dash.dash_table.Format import Format, Scheme

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import gpu as figures
from dashboards.figures.ranks import MANY_RANKS
from dashboards.figures.style import empty
from dashboards.zoom import follow_moves, moves_store, window_from_relayout
from popvision_py.analysis.common.spread import outlier_ranks

dash.register_page(__name__, path="/gpu", name="GPU", title="popvision · GPU", order=3.2, icon="▥",
                   needs_kernels=True)

MAX_KERNELS = 2000  # each kernel drawn up to this many in the window; each kind's occupancy in bins beyond
MAX_BINS = 400  # bins per stream and kind
RANKS_SHOWN = 8  # the ranks whose streams are drawn at first; the picker chooses others
KERNELS_PER_RANK = 25  # the kernel table's rows per rank, the most time first
NAME_CHARS = 160  # a kernel's name shown in the table; the whole name is its tooltip
DESCRIPTION = ("Each rank's GPU streams over time, kernels coloured by kind; how each rank's GPU time splits into "
               "idle, compute and the rest; how much communication hides behind computation; the costliest "
               "kernels. Drag to zoom down to single kernels; double-click to see the whole trace.")
HTA = "As Holistic Trace Analysis 0.5 computes it (popvision report --section gpu): "


class TableSection(NamedTuple):
    """A table of the page: its panel's title and note, its element's id, and the component it shows for a
    report. The page's tables are ``TABLES``: a table of the gpu view is one entry there. (A NamedTuple: Dash
    runs a page's module outside ``sys.modules``, where a dataclass cannot be made.)"""

    title: str
    note: str
    element_id: str
    build: Callable[[Any], Any]


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            c.page_header("GPU", DESCRIPTION),
            html.Div(id=ids.GPU_NOTE, className="empty"),
            html.Div([
                html.Div(id=ids.GPU_FIGURES, className="cards-slot"),
                c.section(
                    "Streams over time",
                    html.Div([html.Div([html.Label("ranks", htmlFor=ids.GPU_RANKS),
                                        dcc.Dropdown(id=ids.GPU_RANKS, multi=True, clearable=False,
                                                     className="dropdown wide-dropdown")],
                                       id=ids.GPU_RANKS_BOX, className="controls"),
                              html.Span(id=ids.GPU_LEVEL, className="level"),
                              html.Button("Whole trace", id=ids.GPU_RESET, n_clicks=0, className="button")],
                             className="controls"),
                    c.graph(ids.GPU_TIMELINE),
                    moves_store(ids.GPU_TIMELINE),
                    note="A row per rank and stream. Zoomed out, each bin shows the share of it each kind of kernel "
                         "keeps the stream busy, side by side; zoomed in to at most "
                         f"{MAX_KERNELS:,} kernels, each kernel where it ran (hover: its name, time and stream).",
                ),
                html.Div([
                    c.section("Time per rank", c.graph(ids.GPU_TEMPORAL, modebar=False),
                              note=HTA + "compute, other kernels (communication, memory) and idle, from each rank's "
                                         "first kernel to its last."),
                    c.section("Kernel types and their overlaps", c.graph(ids.GPU_KERNEL_TYPES, modebar=False),
                              note=HTA + "the time each type, or set of types at once, runs, of the rank's time "
                                         "with a kernel running."),
                ], className="grid-2"),
                c.section("Communication hidden behind computation", c.graph(ids.GPU_OVERLAP, modebar=False),
                          note=HTA + "of the time a communication kernel runs, the share during which a computation "
                                     "kernel runs too."),
                *[c.section(t.title, html.Div(id=t.element_id), note=t.note) for t in TABLES],
            ], id=ids.GPU_CONTENT),
        ]
    )


def _seconds(ns: Any) -> str:
    return c.fmt_seconds(ns / 1e9) if ns == ns else "–"


def by_rank_table(report: Any) -> Any:
    """popvision's GPU time per rank within the profiled steps (``gpu.by_rank``)."""
    frame = report.gpu.by_rank()
    return c.rank_table(frame, columns={"rank": "rank", "window_ns": "profiled", "busy_ns": "busy", "idle_pct": "idle",
                                   "compute_pct": "compute", "non_compute_pct": "non-compute",
                                   "communication_ns": "communication", "memory_ns": "memory",
                                   "comm_comp_overlap_pct": "communication hidden behind compute"},
                   formats={"rank": c.fmt_int, **{k: _seconds for k in ("window_ns", "busy_ns", "communication_ns",
                                                                         "memory_ns")}},
                   table_id="gpu-by-rank-table")


PHASES_PER_RANK = 20  # the phases listed per rank, the most GPU time first

# The kernel table's columns: (column of gpu.kernels_by_name, header); times shown in µs, numbers so they sort
KERNEL_COLUMNS = [("rank", "rank"), ("kind", "kind"), ("name", "kernel"), ("kernels", "kernels"),
                  ("sum_us", "total (µs)"), ("mean_us", "mean (µs)"), ("max_us", "longest (µs)"),
                  ("busy_pct", "% of the steps")]


def kernel_table(report: Any) -> Any:
    """Each rank's costliest kernels by name within the profiled steps (``gpu.kernels_by_name``), sortable."""
    named = named_ranks(report)
    frame = of_named(report.gpu.kernels_by_name(KERNELS_PER_RANK), named)
    frame = frame.assign(**{f"{k}_us": frame[f"{k}_ns"] / 1e3 for k in ("sum", "mean", "max")})
    return with_named(names_table(frame, KERNEL_COLUMNS, ids.GPU_KERNELS, text=("kind", "name")), named)


def names_table(frame: Any, columns: list[tuple[str, str]], table_id: str, text: tuple[str, ...]) -> Any:
    """A sortable, filterable table of kernels by name: a name wraps in its column; past ``NAME_CHARS`` (a C++
    template's runs to thousands) it ends in "…", whole on hover. ``text``: the columns that are words, each
    broken anywhere it must (an operator's C++ name has no space to wrap at: ``torch::autograd::CppNode<...>``),
    so that the table fits a page 1,280 px wide; one of them empty on every row (no module recorded) left out."""
    columns = [(k, header) for k, header in columns
               if k not in text or k == "name" or frame[k].astype(str).ne("").any()]
    names = frame["name"].astype(str)
    shown = frame.assign(name=names.where(names.str.len() <= NAME_CHARS, names.str.slice(0, NAME_CHARS - 1) + "…"))
    whole, tenths = Format().group(True), Format(precision=1, scheme=Scheme.fixed).group(True)
    spec = [{"name": header, "id": column, **({"type": "text"} if column in text else
                                              {"type": "numeric", "format": whole if column in ("rank", "kernels")
                                               else tenths})} for column, header in columns]
    return dash_table.DataTable(
        id=table_id, columns=spec, data=shown[[k for k, _ in columns]].to_dict("records"),
        sort_action="native", filter_action="native", page_action="native", page_size=25,
        style_table={"overflowX": "auto"}, style_header={"fontWeight": "600", "whiteSpace": "normal"},
        style_cell={"fontFamily": "inherit", "fontSize": "13px", "padding": "4px 8px"},
        tooltip_data=[{"name": n} for n in names.tolist()], tooltip_duration=None,  # the whole name
        style_cell_conditional=[*({"if": {"column_id": k}, "textAlign": "left", "whiteSpace": "normal",
                                   "wordBreak": "break-word", "minWidth": "110px", "maxWidth": "240px"}
                                  for k in text if k != "name"),
                                {"if": {"column_id": "name"}, "textAlign": "left", "whiteSpace": "normal",
                                 "wordBreak": "break-word", "minWidth": "240px", "maxWidth": "380px"}])


STEPS_LISTED = 25  # past this many steps in all, each rank's steps summed up and the slowest steps listed
BOUND_STEP_COLUMNS = {"rank": "rank", "step": "step", "verdict": "bound by", "step_ns": "step",
                      "gpu_busy_pct": "GPU busy", "launch_wait_pct": "waits for launches",
                      "input_wait_pct": "waits for input", "other_idle_pct": "other idle", "kernels": "kernels",
                      "kernel_median_ns": "median kernel", "launch_median_ns": "median launch"}


def _step(v: Any) -> str:
    return "whole trace" if v < 0 else f"{v:,}"


BOUND_FORMATS = {"rank": c.fmt_int, "step": _step, "verdict": str, "steps": c.fmt_int, "verdicts": str,
                 "slowest_step": _step, "slowest_verdict": str,
                 **{k: _seconds for k in ("step_ns", "kernel_median_ns", "launch_median_ns", "median_step_ns",
                                          "slowest_ns")}}


def bounds_table(report: Any) -> Any:
    """What bound each rank's steps (``gpu.bounds``): the verdict, and the GPU's busy time and its waits. Past
    ``STEPS_LISTED`` steps in all (a long run profiles thousands), each rank's steps summed up
    (``gpu.step_summary``), then the slowest steps (of the ranks that stand out, past ``MANY_RANKS`` ranks)."""
    frame = report.gpu.bounds()
    named = named_ranks(report)
    if len(frame) <= STEPS_LISTED or frame["rank"].is_unique:  # few steps, or a step a rank: each step
        return c.rank_table(frame, named=named, table_id="gpu-bounds-table", columns=BOUND_STEP_COLUMNS,
                            formats=BOUND_FORMATS, keys=("step",))
    summary = c.rank_table(report.gpu.step_summary(), named=named, keys=("slowest_step",),
                           table_id="gpu-bounds-summary", formats=BOUND_FORMATS,
                           columns={"rank": "rank", "steps": "steps", "verdicts": "bound by",
                                    "median_step_ns": "median step", "gpu_busy_pct": "GPU busy (median)",
                                    "launch_wait_pct": "waits for launches (median)",
                                    "input_wait_pct": "waits for input (median)", "slowest_step": "slowest step",
                                    "slowest_ns": "its time", "slowest_verdict": "it was"})
    steps = of_named(frame, named)
    slowest = steps.nlargest(STEPS_LISTED, "step_ns", keep="first")
    return html.Div([
        summary,
        html.P(f"The {len(slowest):,} slowest of {len(steps):,} steps{'' if named is None else ' of those ranks'} "
               "(popvision report --section gpu --format csv lists every one):", className="note"),
        c.table(slowest, BOUND_STEP_COLUMNS, BOUND_FORMATS, table_id="gpu-bounds-table"),
    ])


WORTH_COLUMNS = [("rank", "rank"), ("name", "kernel"), ("op", "launched in"), ("module", "module"),
                 ("kernels", "kernels"), ("total_us", "total (µs)"), ("median_us", "median (µs)"),
                 ("launch_median_us", "median launch (µs)"), ("why", "why")]


def worth_table(report: Any) -> Any:
    """The kernels worth a look (``gpu.worth_a_look``): why, and the operator and module that launched them."""
    named = named_ranks(report)
    frame = of_named(report.gpu.worth_a_look(), named)
    frame = frame.assign(**{f"{k}_us": frame[f"{k}_ns"] / 1e3 for k in ("total", "median", "launch_median")})
    return with_named(names_table(frame, WORTH_COLUMNS, "gpu-worth-table", text=("name", "op", "module", "why")),
                      named)


def phases_table(report: Any) -> Any:
    """The phases the trace's own annotations name (``gpu.phases``): GPU time and what ran beside it."""
    frame = report.gpu.phases(PHASES_PER_RANK)
    if frame.empty:
        return html.Div("The trace's annotations name no phase (record_function spans beside the steps and "
                        "passes).", className="empty")
    return c.rank_table(
        frame, named=named_ranks(report), table_id="gpu-phases-table",
        columns={"rank": "rank", "phase": "phase", "spans": "spans", "kernels": "kernels", "gpu_ns": "GPU time",
                 "overlap_ns": "beside another phase", "overlap_pct": "of its GPU time",
                 "overlapped_with": "mostly beside"},
        formats={"rank": c.fmt_int, "phase": str, "overlapped_with": str,
                 **{k: _seconds for k in ("gpu_ns", "overlap_ns")}})


TABLES = [
    TableSection("What bound each step", "Per rank and profiler step: GPU-bound (kernels run most of the step), "
                 "launch-bound (the GPU idles until the CPU launches its next kernel), input-bound (it idles while "
                 "the DataLoader fetches), or other idle; a wait is the verdict when it takes 20 % of the step or "
                 f"more (docs/reports.md, \"GPU\"). Past {STEPS_LISTED} steps, each rank's steps summed up, then "
                 "the slowest steps.", ids.GPU_BY_RANK + "-bounds", bounds_table),
    TableSection("Kernels worth a look", "The longest kernels by total time, and the short ones launched many "
                 "times (median under 10 µs, or shorter than their launch): each with the operator and module "
                 "most of its launches ran in.", ids.GPU_BY_RANK + "-worth", worth_table),
    TableSection("Phases from the trace's annotations", "Each phase the trace's own record_function spans name: its "
                 "kernels' GPU time and how much of it ran beside another phase's kernels (two micro-batches "
                 "or chunks at once on two streams).", ids.GPU_BY_RANK + "-phases", phases_table),
    TableSection("GPU time per rank within the profiled steps", "popvision's own figures: the rank's busy and idle "
                 "time within its profiled steps, by the kinds the import gives each kernel.", ids.GPU_BY_RANK,
                 by_rank_table),
    TableSection("Kernels", f"Each rank's {KERNELS_PER_RANK} costliest kernels by name within the profiled steps: "
                 "how many ran, their total, mean and longest time. Sort by a column's arrows; filter by typing "
                 "under its header (e.g. nccl, > 1000).", ids.GPU_KERNELS + "-section", kernel_table),
]


def named_ranks(report: Any) -> Any:
    """Past ``MANY_RANKS`` ranks, those furthest past the median in compute, communication and idle time (the
    tables of several rows a rank show theirs); else None."""
    frame = report.gpu.by_rank()
    if len(frame) <= MANY_RANKS:
        return None
    return outlier_ranks(frame["rank"].to_numpy(), {k: frame[k].to_numpy(np.float64) for k in (
        "compute_ns", "communication_ns", "idle_ns")})


def of_named(frame: Any, named: Any) -> Any:
    """``frame``'s rows of the ``named`` ranks (every row for None): a sortable table past ``MANY_RANKS`` ranks
    holds the ranks that stand out, not every rank's rows."""
    return frame if named is None else frame[frame["rank"].isin(np.asarray(named))]


def with_named(table: Any, named: Any) -> Any:
    """A table of the ``named`` ranks' rows, with a line saying which they are (the table alone for None)."""
    if named is None:
        return table
    return html.Div([html.P(f"The ranks furthest past the median in compute, communication or idle time: "
                            f"{', '.join(map(str, np.asarray(named).tolist()))}.", className="note"), table])


def ranks_of(report: Any) -> list[int]:
    """The IPUs (the trace's ranks, by position) that hold a kernel, in order."""
    return sorted(set(report.gpu.streams().lanes["ipu"].tolist()))


def _chosen(ranks: Any) -> list[int] | None:
    """The picker's IPUs (None: the first ``RANKS_SHOWN`` ranks', as the picker starts); anything but a list of
    whole numbers is a value no page sends."""
    if ranks is None:
        return None
    if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
        raise ValueError("the ranks are a list of IPU numbers")
    return ranks


def level_text(result: Any) -> str:
    where = f"{c.fmt_seconds(result.start_ns / 1e9)} to {c.fmt_seconds(result.end_ns / 1e9)}"
    if result.level == "bins":
        bins = min(MAX_BINS, result.end_ns - result.start_ns)
        width = c.fmt_seconds((result.end_ns - result.start_ns) / bins / 1e9)
        return f"level of detail: bins — {bins:,} bins of {width} per stream, {result.kernels:,} kernels, {where}"
    return f"level of detail: kernels — {result.kernels:,} kernels, {where}"


def timeline(profile: str | None, window: tuple[int, int] | None, ranks: list[int] | None,
             revision: int = 0) -> tuple:
    """Figure and level-of-detail text of the chosen ranks' streams over ``window`` (None: the whole trace)."""
    report = data.report(profile)
    if report.gpu.missing():
        return empty(report.gpu.missing()), ""
    index = report.gpu.streams()
    window = window or (index.start_ns, index.end_ns)
    if ranks is None:  # the picker not filled yet (the page's first call): the ranks it will hold, not every one
        ranks = ranks_of(report)[:RANKS_SHOWN]
    result = report.gpu.stream_window(window[0], window[1], ranks, max_kernels=MAX_KERNELS, max_bins=MAX_BINS)
    fig = figures.streams_timeline(result.frame, result.level, (result.start_ns, result.end_ns), result.lanes)
    # A new revision (a reset, a new profile, other ranks) makes plotly drop the user's zoom for the one given.
    fig.update_layout(uirevision=f"{data.current().key(profile)}-{revision}-{ranks}")
    return fig, level_text(result)


@dash.callback(
    Output(ids.GPU_TIMELINE, "figure"),
    Output(ids.GPU_LEVEL, "children"),
    Input(ids.PROFILE, "value"),
    Input(ids.GPU_RESET, "n_clicks"),
    Input(ids.GPU_RANKS, "value"),
)
def render_timeline(profile: str | None, resets: int | None, ranks: Any):
    """The whole trace, for the ranks chosen."""
    return timeline(profile, None, _chosen(ranks), resets or 0)


@dash.callback(
    Output(ids.GPU_TIMELINE, "figure", allow_duplicate=True),
    Output(ids.GPU_LEVEL, "children", allow_duplicate=True),
    Input(follow_moves(ids.GPU_TIMELINE), "data"),
    State(ids.PROFILE, "value"),
    State(ids.GPU_RESET, "n_clicks"),
    State(ids.GPU_RANKS, "value"),
    prevent_initial_call=True,
)
def zoom_timeline(relayout: dict | None, profile: str | None, resets: int | None, ranks: Any):
    """The window a zoom (or a double-click back to the whole trace) asks for, at its own level of detail."""
    report = data.report(profile)
    if report.gpu.missing():
        raise dash.exceptions.PreventUpdate
    index = report.gpu.streams()
    window = window_from_relayout(relayout, (index.start_ns, index.end_ns), lambda x: float(x) * figures.NS_PER_MS)
    if window is None:
        raise dash.exceptions.PreventUpdate
    return timeline(profile, window, _chosen(ranks), resets or 0)


@dash.callback(
    Output(ids.GPU_NOTE, "children"),
    Output(ids.GPU_CONTENT, "style"),
    Output(ids.GPU_FIGURES, "children"),
    Output(ids.GPU_RANKS, "options"),
    Output(ids.GPU_RANKS, "value"),
    Output(ids.GPU_RANKS_BOX, "style"),
    Output(ids.GPU_TEMPORAL, "figure"),
    Output(ids.GPU_KERNEL_TYPES, "figure"),
    Output(ids.GPU_OVERLAP, "figure"),
    *[Output(t.element_id, "children") for t in TABLES],
    Input(ids.PROFILE, "value"),
)
def render(profile: str | None):
    """The cards, the rank picker, the breakdowns per rank and the tables; where the profile holds no GPU kernel,
    the one sentence saying why, and nothing else."""
    report = data.report(profile)
    why = report.gpu.missing()
    if why:
        return (why, c.shown(False), None, [], [], c.shown(False), empty(""), empty(""), empty(""),
                *[None for _ in TABLES])
    naming = data.naming(report)
    lanes = report.gpu.streams().lanes
    ranks = ranks_of(report)
    items = [("Ranks", c.fmt_int(len(ranks)), "with GPU kernels"),
             ("Streams", c.fmt_int(len(lanes)), "rank and stream pairs"),
             ("Kernels", c.fmt_int(int(lanes["kernels"].sum())), "kernels, copies and sets in the trace")]
    gpu = report.gpu
    return (None, c.shown(True), c.cards(items), c.ipu_options(ranks, naming), ranks[:RANKS_SHOWN],
            c.shown(len(ranks) > 1), figures.temporal_shares(gpu.temporal()),
            figures.kernel_type_shares(gpu.kernel_types_by_rank()), figures.overlap_bars(gpu.overlap()),
            *[t.build(report) for t in TABLES])
