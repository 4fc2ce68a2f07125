"""Summary and insights: the run's key figures, where the time goes, and findings with fixes."""

from __future__ import annotations

from typing import Any

import dash
import pandas as pd
from dash import MATCH, Input, Output, State, dcc, html

from dashboards import components as c
from dashboards import data, figures, ids

dash.register_page(__name__, path="/", name="Summary", title="popvision · summary", order=0, icon="◎")


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            c.page_header("Summary and insights", "What ran, how fast, whether it fits, and what to change."),
            html.Div(id=ids.SUMMARY_FIGURES, className="cards-slot"),
            html.Div(
                [
                    c.section("Where the IPU time goes", c.graph(ids.SUMMARY_TIME, modebar=False)),
                    c.section("Memory per IPU", c.graph(ids.SUMMARY_MEMORY)),
                ],
                className="grid-2",
            ),
            c.section("Findings and suggested fixes", html.Div(id=ids.SUMMARY_INSIGHTS)),
        ]
    )


def key_figures(summary: Any) -> list[tuple]:
    """The cards of the summary page, from ``summary.figures()``."""
    fits = bool(summary.fits)
    return [
        ("Model", f"{summary.model}", f"{summary.strategy} {summary.mode} on {summary.arch}"),
        ("IPUs", f"{summary.num_ipus} × {summary.replication_factor}",
         "per replica × replicas"),
        ("Batch", f"{summary.micro_batch_size} × {summary.gradient_accumulation}",
         f"micro-batch × accumulation; {c.fmt_quantity(summary.device_iterations, 'device iteration')}"),
        ("Time per step", c.fmt_seconds(summary.step_s), f"{c.fmt_count(summary.step_cycles)} cycles"),
        ("Throughput", f"{summary.throughput_samples_per_s:,.0f} /s", f"{summary.samples_per_step:,} samples per step"),
        ("FLOP utilisation", c.fmt_pct(summary.flop_utilisation_pct), f"{c.fmt_count(summary.total_flops)} FLOPs"),
        ("Fits in memory", "yes" if fits else "no",
         "no tile over capacity" if fits else f"{summary.oom_tiles:,} tiles out of memory", "good" if fits else "bad"),
        ("Worst tile", c.fmt_bytes(summary.worst_tile_bytes),
         f"IPU {summary.worst_ipu}, tile {summary.worst_tile} of {c.fmt_bytes(summary.bytes_per_tile)}"),
    ]


def insight_list(insights: pd.DataFrame, verify: bool = False) -> html.Div:
    """The findings, most severe first as the analysis orders them, each with its fix, its effect and the
    command that applies the fix (when there is one); ``verify`` adds a "Verify" button to each fix."""
    if insights.empty:
        return html.Div("No findings: nothing stands out in this profile.", className="empty")
    items = []
    for k, row in enumerate(insights.itertuples(index=False)):
        severity = str(row.severity)
        items.append(
            html.Div(
                [
                    html.Div([html.Span(severity, className=f"badge badge-{severity}"),
                              html.Span(str(row.topic), className="insight-topic")], className="insight-head"),
                    html.P(str(row.finding), className="insight-finding"),
                    # A finding with no fix a run could apply says so in its own text: no empty "Fix:".
                    *([html.P([html.Strong("Fix: "), str(row.suggestion)], className="insight-fix")]
                      if row.suggestion else []),
                    *([html.P([html.Strong("Effect: "), str(row.effect)], className="insight-effect")]
                      if row.effect else []),
                    *c.command_block(str(row.command)),
                    *(verify_block(k) if verify and row.command else []),
                ],
                className=f"insight insight-{severity}",
            )
        )
    return html.Div(items, className="insights")


def verify_block(row: int) -> list:
    """The "Verify" button of finding ``row``'s fix and the place its measured effect appears."""
    return [html.Div([
        html.Button("Verify", id={"type": ids.SUMMARY_VERIFY, "index": row}, n_clicks=0, className="verify-button",
                    title="Emulate this fix and show its measured effect beside the predicted one"),
        dcc.Loading(html.Div(id={"type": ids.SUMMARY_VERIFIED, "index": row}, className="verify-result"),
                    type="dot", delay_show=200),
    ], className="insight-verify")]


def verified_view(row: dict[str, Any]) -> html.Div:
    """One fix measured (a row of ``analysis.verify.COLUMNS``): before, predicted and measured, and the verdict."""
    status = str(row["status"])
    figures = [
        ("time per step", c.fmt_seconds, "step_s"),
        ("throughput", c.fmt_per_second, "samples_per_second"),
        ("worst tile", c.fmt_bytes, "worst_tile_bytes"),
    ]
    body = [html.Tr([html.Td(label), *(html.Td(fmt(_known(row[f"{name}_{w}"])), className="num")
                                       for w in ("before", "predicted", "after"))])
            for label, fmt, name in figures]
    head = html.Thead(html.Tr([html.Th(""), html.Th("before", className="num"), html.Th("predicted", className="num"),
                               html.Th("measured", className="num")]))
    tone = {"held": "good", "did not hold": "warn", "failed": "bad"}[status]
    return html.Div([
        html.P(str(row["verdict"]), className=f"verify-verdict verify-{tone}"),
        *([html.Table([head, html.Tbody(body)], className="pv-table verify-table")] if status != "failed" else []),
        *([html.P(["Profile: ", html.Code(str(row["profile"]))], className="verify-profile")] if row["profile"] else []),
    ])


def _known(value: Any) -> Any:
    """None and NaN both read as not known (the formatters show a dash)."""
    return float("nan") if value is None else value


@dash.callback(
    Output({"type": ids.SUMMARY_VERIFIED, "index": MATCH}, "children"),
    Input({"type": ids.SUMMARY_VERIFY, "index": MATCH}, "n_clicks"),
    State(ids.PROFILE, "value"),
    prevent_initial_call=True,
)
def verify_fix(n_clicks: int | None, profile: str | None):
    """Emulate the fix of the clicked finding (once per fix: the profile is kept) and show it measured."""
    return verified(profile, dash.ctx.triggered_id["index"])


def verified(profile: str | None, row: Any) -> html.Div | html.P:
    """The fix of finding ``row`` of profile ``profile``, emulated through the app's runner and measured."""
    from popvision_py.analysis import verify

    if not isinstance(row, int) or isinstance(row, bool):
        raise ValueError("a finding is named by its row number")
    profiles = data.current()
    key = profiles.key(profile)
    report = profiles.report(key)
    fix = verify.fix_run(report, row)
    before = verify.Measured.of(report)
    clock = float(report.target["clock_hz"])
    try:
        measured = verify.measured_row(fix, before, clock,
                                       lambda: profiles.emulate(fix.request, f"verify-{key}-{fix.tag}"))
    except LookupError as exc:  # no emulator in this app
        return html.P(str(exc), className="verify-verdict verify-bad")
    return verified_view(measured)


@dash.callback(
    Output(ids.SUMMARY_FIGURES, "children"),
    Output(ids.SUMMARY_TIME, "figure"),
    Output(ids.SUMMARY_MEMORY, "figure"),
    Output(ids.SUMMARY_INSIGHTS, "children"),
    Input(ids.PROFILE, "value"),
)
def render(profile: str | None):
    report = data.report(profile)
    summary = report.summary.figures()
    shares = data.phase_shares(report)
    return (
        c.cards(key_figures(summary)),
        figures.phase_shares(shares),
        figures.ipu_memory(report.memory.by_ipu()),
        insight_list(report.summary.insights(), verify=data.current().runner is not None),
    )
