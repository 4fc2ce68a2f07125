"""Exchange: traffic between IPUs, the host and streaming memory; bytes and cycles by kind; costliest steps."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, dcc, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import exchange as figures
from dashboards.figures.style import ipu_label

dash.register_page(__name__, path="/exchange", name="Exchange", title="popvision · exchange", order=5, icon="⇄")


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            c.page_header("Exchange", "How much of the time goes to moving data and synchronising, between tiles, "
                                      "between IPUs, to the host and to streaming memory."),
            html.Div(id=ids.EXCHANGE_FIGURES, className="cards-slot"),
            c.section("Where the IPU time goes", c.graph(ids.EXCHANGE_PHASES, modebar=False)),
            html.Div(
                [
                    c.section("Source → destination",
                              html.Div([dcc.RadioItems(id=ids.EXCHANGE_MATRIX_VALUE, value="bytes", inline=True,
                                                       options=[{"label": " bytes", "value": "bytes"},
                                                                {"label": " cycles", "value": "cycles"}],
                                                       className="radio")], className="controls"),
                              c.graph(ids.EXCHANGE_MATRIX)),
                    c.section("By kind", c.graph(ids.EXCHANGE_KINDS), html.Div(id=ids.EXCHANGE_BANDWIDTH)),
                ],
                className="grid-2",
            ),
            c.section("Costliest exchange steps", html.Div(id=ids.EXCHANGE_COSTLIEST),
                      note="Total cycles over the run: cycles of one execution × executions."),
        ]
    )


def exchange_cards(f: Any) -> list[tuple]:
    return [
        ("Exchange", c.fmt_pct(f.exchange_pct), f"{c.fmt_count(f.exchange_cycles)} cycles"),
        ("Sync", c.fmt_pct(f.sync_pct), f"{c.fmt_count(f.sync_cycles)} cycles"),
        ("Stream", c.fmt_pct(f.stream_pct), f"{c.fmt_count(f.stream_cycles)} cycles (host, streaming memory)"),
        ("Compute", c.fmt_pct(f.compute_pct), f"{c.fmt_count(f.compute_cycles)} cycles"),
        ("Idle", c.fmt_pct(f.idle_pct), f"{c.fmt_count(f.idle_cycles)} cycles waiting for other IPUs"),
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


@dash.callback(
    Output(ids.EXCHANGE_MATRIX, "figure"),
    Input(ids.PROFILE, "value"),
    Input(ids.EXCHANGE_MATRIX_VALUE, "value"),
)
def render_matrix(profile: str | None, value: str | None):
    value = value if value in ("bytes", "cycles") else "bytes"
    return figures.exchange_matrix(data.report(profile).exchange.matrix(), value)
