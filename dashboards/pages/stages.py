"""Pipeline stages: the forward/backward Gantt chart per IPU, imbalance, bubble, a better split."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import stages as figures

dash.register_page(__name__, path="/stages", name="Stages", title="popvision · stages", order=4, icon="▤")


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            c.page_header("Pipeline stages", "Each IPU's forward (F) and backward (B) passes per micro-batch, as in "
                                             "the PopTorch tutorial's figure; the slowest stage sets the pace."),
            html.Div(id=ids.STAGES_FIGURES, className="cards-slot"),
            c.section("Forward and backward passes per IPU", c.graph(ids.STAGES_GANTT),
                      note="Micro-batches numbered from 1 through the run; drag to zoom."),
            html.Div(
                [
                    c.section("Cycles per micro-batch of each stage", c.graph(ids.STAGES_IMBALANCE),
                              note="The bottleneck stage is outlined in red. The weight update runs once per step, not per "
                                   "micro-batch: it is in the busy time beside."),
                    c.section("Busy and idle time per stage", c.graph(ids.STAGES_SUMMARY)),
                ],
                className="grid-2",
            ),
            # The table below the figure, not beside it: a stage's list of blocks needs the width.
            c.section("Suggested split", html.Div(id=ids.STAGES_SPLIT), c.graph(ids.STAGES_SPLIT_FIGURE),
                      html.Div(id=ids.STAGES_SPLIT_TABLE)),
        ]
    )


def stage_cards(stage_figures: Any) -> list[tuple]:
    f = stage_figures
    return [
        ("Stages", f"{f.num_stages}", f"{f.micro_batches} micro-batches per step"),
        ("Bottleneck", f"stage {f.bottleneck_stage}" if f.bottleneck_stage is not None and f.bottleneck_stage >= 0 else "–",
         "the slowest stage sets the pace"),
        ("Imbalance", f"{f.imbalance:.2f} ×", "slowest stage / mean", "bad" if f.imbalance > 1.2 else ""),
        ("Bubble", c.fmt_pct(f.bubble_pct), f"ideal {c.fmt_pct(f.ideal_bubble_pct)} (the run re-timed with its stages balanced)"),
        ("Step", f"{c.fmt_count(f.step_cycles)} cycles", f"balanced: {c.fmt_count(f.balanced_step_cycles)}"),
        ("Balance gain", c.fmt_pct(f.balance_gain_pct), "of a perfectly balanced split", "good" if f.balance_gain_pct > 5 else ""),
    ]


@dash.callback(
    Output(ids.STAGES_FIGURES, "children"),
    Output(ids.STAGES_GANTT, "figure"),
    Output(ids.STAGES_IMBALANCE, "figure"),
    Output(ids.STAGES_SUMMARY, "figure"),
    Output(ids.STAGES_SPLIT, "children"),
    Output(ids.STAGES_SPLIT_FIGURE, "figure"),
    Output(ids.STAGES_SPLIT_TABLE, "children"),
    Input(ids.PROFILE, "value"),
)
def render(profile: str | None):
    report = data.report(profile)
    summary = report.stages.summary()
    stage_figures = report.stages.figures()
    split = report.stages.best_split()
    text = html.P([
        "Moving blocks between stages as below would take a step from ",
        html.Strong(f"{c.fmt_count(split.current_step_cycles)} cycles"), " to ",
        html.Strong(f"{c.fmt_count(split.predicted_step_cycles)} cycles"), ": ",
        html.Strong(c.fmt_pct(split.gain_pct), className="good-text" if split.gain_pct > 0 else ""), " faster.",
    ]) if split.gain_pct > 0 else html.P("The current split is already the best one the analysis finds.")
    table = c.table(split.stages, {"stage": "stage", "ipu": "IPU", "blocks": "blocks", "cycles_per_micro_batch": "cycles per micro-batch",
                                   "memory_bytes": "memory", "fits": "fits"},
                    formats={"stage": c.fmt_int, "ipu": c.fmt_int})
    comparison = figures.split_comparison(figures.stage_cycles(summary), split.stages)
    return (
        c.cards(stage_cards(stage_figures)),
        figures.stages_gantt(report.stages.gantt()),
        figures.stage_imbalance(summary, stage_figures.bottleneck_stage),
        figures.stage_utilisation(summary),
        text,
        comparison,
        table,
    )
