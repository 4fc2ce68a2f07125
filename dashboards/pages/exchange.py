"""Exchange: traffic between IPUs, the host and streaming memory; bytes and cycles by kind; costliest steps."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import exchange as figures
from dashboards.figures.ranks import MATRIX_BINS, binned_matrix, endpoints_in_view
from dashboards.figures.style import empty, ipu_label
from dashboards.zoom import follow_moves, moves_store
from popvision_py.analysis.imported.ranks import NO_SIZES, no_sizes
from popvision_py.render.rank_words import KIND_WORDS, unnamed_peers  # an imported trace's kinds in PyTorch's words

dash.register_page(__name__, path="/exchange", name="Exchange", title="popvision · exchange", order=5, icon="⇄")


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            c.page_header("Exchange", DESCRIPTION[False], description_id=ids.EXCHANGE_DESCRIPTION),
            html.Div(id=ids.EXCHANGE_FIGURES, className="cards-slot"),
            c.section("Where the IPU time goes", c.graph(ids.EXCHANGE_PHASES, modebar=False),
                      title_id=ids.EXCHANGE_PHASES_TITLE),
            # An imported trace: each rank's communication, exposed or hidden behind its compute.
            c.section("Communication per rank", c.graph(ids.EXCHANGE_COMMUNICATION),
                      html.Div(id=ids.EXCHANGE_COMMUNICATION_TABLE), section_id=ids.EXCHANGE_COMMUNICATION_SECTION,
                      note="Exposed: the rank waits in a call or for a transfer. Hidden: the rest of its transfers' "
                           "time, overlapped by its compute; transfers in flight at once each count, so it can "
                           "exceed the rank's time.", hidden=True),
            html.Div(
                [
                    c.section("Source → destination",
                              html.Div([dcc.RadioItems(id=ids.EXCHANGE_MATRIX_VALUE, value="bytes", inline=True,
                                                       options=MATRIX_OPTIONS[False], className="radio")],
                                       className="controls"),
                              c.graph(ids.EXCHANGE_MATRIX), moves_store(ids.EXCHANGE_MATRIX)),
                    c.section("By kind", c.graph(ids.EXCHANGE_KINDS), html.Div(id=ids.EXCHANGE_BANDWIDTH)),
                ],
                className="grid-2",
            ),
            c.section("Collectives per process group", html.Div(id=ids.EXCHANGE_COLLECTIVES),
                      section_id=ids.EXCHANGE_COLLECTIVES_SECTION, hidden=True,
                      note="Each rank's communication kernels by collective and process group (its peers: the "
                           "group's other ranks). algbw: bytes over GPU time; busbw: what each rank's link carries "
                           "(nccl-tests' definitions: all-reduce x 2(n-1)/n, all-gather x (n-1)/n)."),
            c.section("Costliest exchange steps", html.Div(id=ids.EXCHANGE_COSTLIEST),
                      note=COSTLIEST_NOTE[False], title_id=ids.EXCHANGE_COSTLIEST_TITLE,
                      note_id=ids.EXCHANGE_COSTLIEST_NOTE),
        ]
    )


# What the page says for an IPU profile (False) and one imported from PyTorch traces (True)
DESCRIPTION = {False: "How much of the time goes to moving data and synchronising, between tiles, between IPUs, to "
                      "the host and to streaming memory.",
               True: "How much of each rank's time goes to communication: exposed (the rank waits for it) or hidden "
                     "behind its compute, and between which ranks."}
MATRIX_OPTIONS = {imported_: [{"label": " bytes", "value": "bytes"},
                              {"label": " time (ms)" if imported_ else " cycles", "value": "cycles"}]
                  for imported_ in (False, True)}
COSTLIEST_NOTE = {False: "Total cycles over the run: cycles of one execution × executions.",
                  True: "Each transfer's whole time, exposed or hidden behind compute."}
NO_POINT_TO_POINT = ("No transfer between two ranks: a collective moves data among its process group's ranks, "
                     "listed below by group.")
COLLECTIVE_COLUMNS = {"rank": "rank", "collective": "collective", "group": "process group", "calls": "calls",
                      "bytes": "bytes", "time_s": "GPU time", "algbw_gb_s": "algbw GB/s",
                      "busbw_gb_s": "busbw GB/s"}


@dash.callback(
    Output(ids.EXCHANGE_DESCRIPTION, "children"),
    Output(ids.EXCHANGE_PHASES_TITLE, "children"),
    Output(ids.EXCHANGE_COMMUNICATION_SECTION, "style"),
    Output(ids.EXCHANGE_MATRIX_VALUE, "options"),
    Output(ids.EXCHANGE_COSTLIEST_TITLE, "children"),
    Output(ids.EXCHANGE_COSTLIEST_NOTE, "children"),
    Input(ids.PROFILE, "value"),
)
def render_words(profile: str | None):
    """An imported trace: ranks, time, and the communication per rank."""
    imported_ = data.naming(data.report(profile)).imported
    return (DESCRIPTION[imported_], "Where the ranks' time goes" if imported_ else "Where the IPU time goes",
            c.shown(imported_), MATRIX_OPTIONS[imported_],
            "Longest transfers" if imported_ else "Costliest exchange steps", COSTLIEST_NOTE[imported_])


@dash.callback(
    Output(ids.EXCHANGE_COMMUNICATION, "figure"),
    Output(ids.EXCHANGE_COMMUNICATION_TABLE, "children"),
    Input(ids.PROFILE, "value"),
)
def render_communication(profile: str | None):
    """Each rank's compute, exposed and hidden communication and idle (``exchange.communication()``); an
    IPU profile has no such section (hidden)."""
    report = data.report(profile)
    naming = data.naming(report)
    if not naming.imported:
        return empty("Communication per rank is for profiles imported from PyTorch traces."), None
    comm = report.exchange.communication()
    return figures.communication(comm, float(report.target["clock_hz"]), naming), communication_table(comm, report)


def communication_table(comm: Any, report: Any) -> html.Div:
    """``exchange.communication()`` in time: a rank, its stages, compute, exposed and hidden communication, a GPU's
    copies and sets (where a rank has any), idle."""
    clock = float(report.target["clock_hz"])
    naming = data.naming(report)
    frame = comm.assign(rank=[naming.label(i) for i in range(len(comm))],
                        **{name.replace("_cycles", "_s"): comm[name] / clock for name in
                           ("compute_cycles", "exposed_comm_cycles", "hidden_comm_cycles", "copies_cycles",
                            "idle_cycles")})
    copies = {"copies_s": "copies and sets"} if (comm["copies_cycles"] > 0).any() else {}
    return c.rank_table(frame, {"rank": "rank", "stages": "stages", "compute_s": "compute",
                                "exposed_comm_s": "exposed", "hidden_comm_s": "hidden", **copies, "idle_s": "idle",
                                "exposed_comm_pct": "exposed, of its time",
                                "hidden_comm_pct": "hidden, of its communication"},
                        formats={"rank": str, "stages": str}, table_id="exchange-communication-table")


def exchange_cards(f: Any) -> list[tuple]:
    return [
        ("Exchange", c.fmt_pct(f.exchange_pct), f"{c.fmt_count(f.exchange_cycles)} cycles"),
        ("Sync", c.fmt_pct(f.sync_pct), f"{c.fmt_count(f.sync_cycles)} cycles"),
        ("Stream", c.fmt_pct(f.stream_pct), f"{c.fmt_count(f.stream_cycles)} cycles (host, streaming memory)"),
        ("Compute", c.fmt_pct(f.compute_pct), f"{c.fmt_count(f.compute_cycles)} cycles"),
        ("Idle", c.fmt_pct(f.idle_pct), f"{c.fmt_count(f.idle_cycles)} cycles waiting for other IPUs"),
    ]


def imported_exchange_cards(f: Any, comm: Any, clock_hz: float, idle: str) -> list[tuple]:
    """An imported trace's cards: compute, exposed and hidden communication and idle (``idle``: what it is,
    ``data.idle_reason``), summed over the ranks."""
    def seconds(cycles: float) -> str:
        return c.fmt_seconds(cycles / clock_hz)

    hidden = float(comm["hidden_comm_cycles"].sum()) if len(comm) else 0.0
    exposed = float(f.exchange_cycles)
    return [
        ("Exposed communication", c.fmt_pct(f.exchange_pct), f"{seconds(exposed)} over the ranks: they wait for it"),
        ("Hidden communication", c.fmt_pct(100 * hidden / (hidden + exposed) if hidden + exposed else 0),
         f"of the communication: {seconds(hidden)} behind compute"),
        ("Compute", c.fmt_pct(f.compute_pct), f"{seconds(f.compute_cycles)} over the ranks"),
        ("Idle", c.fmt_pct(f.idle_pct), f"{seconds(f.idle_cycles)} over the ranks: {idle}"),
    ]


@dash.callback(
    Output(ids.EXCHANGE_FIGURES, "children"),
    Output(ids.EXCHANGE_PHASES, "figure"),
    Output(ids.EXCHANGE_KINDS, "figure"),
    Output(ids.EXCHANGE_BANDWIDTH, "children"),
    Output(ids.EXCHANGE_COSTLIEST, "children"),
    Input(ids.PROFILE, "value"),
)
def render(profile: str | None):
    report = data.report(profile)
    bandwidth = report.exchange.bandwidth()
    costliest = report.exchange.costliest(15)
    naming = data.naming(report)
    if naming.imported:
        return imported_render(report, naming, bandwidth, costliest)
    costliest = costliest.assign(src_ipu=costliest["src_ipu"].map(ipu_label),
                                 dst_ipu=costliest["dst_ipu"].map(ipu_label))
    return (
        c.cards(exchange_cards(report.exchange.figures())),
        figures.phase_shares(data.phase_shares(report)),
        figures.exchange_by_kind(report.exchange.by_kind()),
        c.table(bandwidth, {"kind": "kind", "bytes": "bytes", "achieved_bytes_per_s": "achieved /s",
                            "peak_bytes_per_s": "peak /s", "efficiency_pct": "of peak"}),
        c.table(costliest, {"ipu": "IPU", "step": "step", "name": "name", "kind": "kind", "src_ipu": "from",
                            "dst_ipu": "to", "bytes": "bytes", "cycles": "cycles", "executions": "executions",
                            "total_cycles": "total cycles"},
                formats={"ipu": c.fmt_int, "step": c.fmt_int}, table_id="exchange-costliest-table"),
    )


def imported_render(report: Any, naming: Any, bandwidth: Any, costliest: Any) -> tuple:
    """``render`` for an imported trace: its kinds are point-to-point and collective (none of the IPU's
    internal, host or streaming-memory exchange), times in ns, no peak bandwidth to compare with."""
    clock = float(report.target["clock_hz"])
    by_kind = report.exchange.by_kind()
    by_kind = by_kind[by_kind["executions"] > 0].assign(kind=lambda f: f["kind"].astype(str).map(
        lambda k: KIND_WORDS.get(k, k)))
    sizeless = no_sizes(bandwidth) and len(by_kind) > 0  # (some transfer ran: a sentence, not an empty axis)
    bandwidth = bandwidth[bandwidth["bytes"] > 0].assign(kind=lambda f: f["kind"].astype(str).map(
        lambda k: KIND_WORDS.get(k, k)))
    gpu = not report.gpu.missing()
    collective = costliest["kind"].astype(str) == "all_reduce"
    src, dst = unnamed_peers(costliest["src_ipu"], costliest["dst_ipu"], costliest["name"], collective)
    to = costliest["dst_ipu"].map(naming.label).where(~collective | (not gpu), "its group")
    costliest = costliest.assign(ipu=costliest["ipu"].map(naming.label),
                                 src_ipu=costliest["src_ipu"].map(naming.label).where(~src, UNNAMED_PEER),
                                 dst_ipu=to.where(~dst, UNNAMED_PEER),
                                 kind=costliest["kind"].astype(str).map(lambda k: KIND_WORDS.get(k, k)),
                                 # a kernel's name without its arguments (the table's rows stay one line)
                                 name=costliest["name"].astype(str).map(lambda n: n.partition("(")[0] or n),
                                 time_s=costliest["cycles"] / clock)
    return (
        c.cards(imported_exchange_cards(report.exchange.figures(), report.exchange.communication(), clock,
                                        data.idle_reason(report))),
        figures.phase_shares(data.phase_shares(report), naming=naming),
        figures.exchange_by_kind(by_kind, naming),
        # no size, no bandwidth: a sentence, not the table's "Nothing to show." (HTA's sampled NCCL kernels)
        html.Div(NO_SIZES, className="empty") if sizeless else
        c.table(bandwidth, {"kind": "kind", "bytes": "bytes", "achieved_bytes_per_s": "achieved /s"}),
        c.table(costliest, {"ipu": "rank", "step": "step", "name": "name", "kind": "kind", "src_ipu": "from",
                            "dst_ipu": "to", "bytes": "bytes", "time_s": "time"},
                formats={"ipu": str, "step": c.fmt_int}, table_id="exchange-costliest-table"),
    )


UNNAMED_PEER = "a peer the traces do not name"


def group_words(group: Any) -> str:
    """A process group as a cell holds it: its ranks, or past a few its count, first and last rank (a group of
    1,024 ranks lists them all)."""
    ranks = str(group).strip("[]").split(", ")
    return str(group) if len(ranks) <= 8 else f"{len(ranks):,} ranks: {ranks[0]} … {ranks[-1]}"


def bandwidth(value: Any) -> str:
    """A bandwidth in GB/s to three significant figures (a slow link's 0.008 is not 0.01), "-" if unknown."""
    return "-" if value is None or value != value else f"{value:,.3g}"


@dash.callback(
    Output(ids.EXCHANGE_COLLECTIVES_SECTION, "style"),
    Output(ids.EXCHANGE_COLLECTIVES, "children"),
    Input(ids.PROFILE, "value"),
)
def render_collectives(profile: str | None):
    """A GPU trace's collectives per rank and process group (``report.gpu.collectives()``): calls, bytes, GPU
    time and nccl-tests' bandwidths; the section hidden for any other profile."""
    report = data.report(profile)
    if not data.naming(report).imported or report.gpu.missing():
        return c.shown(False), None
    frame = report.gpu.collectives()
    frame = frame.assign(rank=frame["rank"].map(lambda r: f"Rank {r}"), time_s=frame["time_ns"] / 1e9)
    return c.shown(True), c.rank_table(frame, COLLECTIVE_COLUMNS, formats={
        "rank": str, "group": group_words, "calls": c.fmt_int, "algbw_gb_s": bandwidth, "busbw_gb_s": bandwidth},
        table_id="exchange-collectives-table")


@dash.callback(
    Output(ids.EXCHANGE_MATRIX, "figure"),
    Input(ids.PROFILE, "value"),
    Input(ids.EXCHANGE_MATRIX_VALUE, "value"),
)
def render_matrix(profile: str | None, value: str | None):
    value = value if value in ("bytes", "cycles") else "bytes"
    report = data.report(profile)
    naming = data.naming(report)
    matrix = drawn_matrix(report)
    if matrix is None:
        return empty(NO_POINT_TO_POINT)
    return figures.exchange_matrix(matrix, value, naming)


def drawn_matrix(report: Any) -> Any:
    """The matrix the page draws (``exchange.matrix()``); None for a GPU trace without a transfer between two
    ranks."""
    matrix = report.exchange.matrix()
    if data.naming(report).imported and not report.gpu.missing():
        # a GPU trace's collective has no one peer (its group's ranks need not be among the traces): only
        # transfers between two ranks are drawn; the collectives are listed by group (``render_collectives``)
        matrix = matrix[matrix["src_ipu"] != matrix["dst_ipu"]]
        if matrix.empty:
            return None
    return matrix


@dash.callback(
    Output(ids.EXCHANGE_MATRIX, "figure", allow_duplicate=True),
    Input(follow_moves(ids.EXCHANGE_MATRIX), "data"),
    State(ids.PROFILE, "value"),
    State(ids.EXCHANGE_MATRIX_VALUE, "value"),
    State(ids.EXCHANGE_MATRIX, "figure"),
    prevent_initial_call=True,
)
def zoom_matrix(relayout: dict | None, profile: str | None, value: str | None, shown: dict | None = None):
    """A box zoomed onto a matrix of more than ``MATRIX_BINS`` endpoints, summed in bins: the endpoints it holds,
    each pair its own cell, once there are ``MATRIX_BINS`` or fewer a side; a double-click: the bins again."""
    value = value if value in ("bytes", "cycles") else "bytes"
    report = data.report(profile)
    matrix = drawn_matrix(report)
    if matrix is None:
        raise dash.exceptions.PreventUpdate
    endpoints = sorted(set(matrix["src_ipu"]) | set(matrix["dst_ipu"]), key=lambda i: (i < 0, abs(i)))
    if len(endpoints) <= MATRIX_BINS:
        raise dash.exceptions.PreventUpdate  # every endpoint its own cell already: plotly's zoom is enough
    if relayout and relayout.get("xaxis.autorange"):
        return figures.exchange_matrix(matrix, value, data.naming(report))
    if not ((shown or {}).get("layout") or {}).get("meta", {}).get("binned"):
        raise dash.exceptions.PreventUpdate  # a zoom within the endpoints drawn one by one: plotly's is enough
    _, spans = binned_matrix(matrix["src_ipu"].to_numpy(), matrix["dst_ipu"].to_numpy(), matrix[value].to_numpy(),
                             endpoints)
    held = endpoints_in_view(relayout, spans, endpoints)
    if held is None or not all(0 < len(side) <= MATRIX_BINS for side in held):
        raise dash.exceptions.PreventUpdate
    return figures.exchange_submatrix(matrix, value, data.naming(report), *held)
