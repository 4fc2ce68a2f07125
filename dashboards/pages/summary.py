"""Summary and insights: the run's key figures, where the time goes, and findings with fixes."""

from __future__ import annotations

import re
from typing import Any

import dash
import pandas as pd
from dash import Input, Output, dcc, html

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


def insight_list(insights: pd.DataFrame) -> html.Div:
    """The findings, most severe first as the analysis orders them, each with its fix, its effect and the
    command that applies the fix (when there is one)."""
    if insights.empty:
        return html.Div("No findings: nothing stands out in this profile.", className="empty")
    items = []
    for row in insights.itertuples(index=False):
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
                    *command_block(str(row.command)),
                ],
                className=f"insight insight-{severity}",
            )
        )
    return html.Div(items, className="insights")


def command_block(command: str) -> list:
    """The ``popvision run`` command that applies a fix, as code with a copy button; nothing without one."""
    if not command:
        return []
    # One box per argument: a long command wraps between arguments, never at a hyphen inside one.
    words = [html.Span(part, className="command-arg") if part.strip() else part for part in re.split(r"( +)", command)]
    return [html.Div([html.Code(words, className="insight-command-text"),
                      dcc.Clipboard(content=command, title="Copy the command", className="insight-copy")],
                     className="insight-command")]


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
        insight_list(report.summary.insights()),
    )
