"""Pipeline stages: the forward/backward Gantt chart per IPU, imbalance, bubble, a better split."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, dcc, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import stages as figures
from dashboards.figures.style import empty
from popvision_py.analysis.imported import ranks as imported

dash.register_page(__name__, path="/stages", name="Stages", title="popvision · stages", order=4, icon="▤")


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            c.page_header("Pipeline stages", DESCRIPTION[False], description_id=ids.STAGES_DESCRIPTION),
            html.Div(id=ids.STAGES_FIGURES, className="cards-slot"),
            # An imported trace of data parallelism (DDP, FSDP) has no pipeline: one line instead of its views.
            c.section("No pipeline", c.one_line(NO_PIPELINE, ids.STAGES_NO_PIPELINE),
                      section_id=ids.STAGES_PIPELINE_NOTE, hidden=True),
            c.section("Forward and backward passes per IPU", c.graph(ids.STAGES_GANTT),
                      note="Micro-batches numbered from 1 through the run; drag to zoom.",
                      title_id=ids.STAGES_GANTT_TITLE,
                      section_id=ids.STAGES_GANTT_SECTION),
            html.Div(
                [
                    c.section("Cycles per micro-batch of each stage", c.graph(ids.STAGES_IMBALANCE),
                              note="The bottleneck stage is outlined in red. The weight update runs once per "
                                   "step, not per micro-batch: it is in the busy time beside.",
                              title_id=ids.STAGES_IMBALANCE_TITLE,
                              section_id=ids.STAGES_IMBALANCE_SECTION),
                    c.section("Busy and idle time per stage", c.graph(ids.STAGES_SUMMARY)),
                ],
                className="grid-2",
            ),
            # The table below the figure, not beside it: a stage's list of blocks needs the width.
            c.section("Suggested split", html.Div(id=ids.STAGES_SPLIT), c.graph(ids.STAGES_SPLIT_FIGURE),
                      html.Div(id=ids.STAGES_SPLIT_TABLE), section_id=ids.STAGES_SPLIT_SECTION),
            # An imported trace does not name each stage's layers: one line instead of a split.
            c.section("Suggested split", c.one_line(imported.NO_BLOCKS, ids.STAGES_NO_BLOCKS),
                      section_id=ids.STAGES_SPLIT_NOTE, hidden=True),
            # An imported pipeline re-timed from its measured costs (analysis/pipeline/replay.py)
            c.section("Critical path across ranks, and what if",
                      html.Div(id=ids.STAGES_CRITICAL_CARDS, className="cards-slot"),
                      html.H4("Culprits: each rank's stages made as fast as the mean stage"),
                      html.Div(id=ids.STAGES_CRITICAL_CULPRITS),
                      html.H4("What if: re-timed with the run's measured costs"),
                      html.Div(id=ids.STAGES_CRITICAL_WHATIF),
                      html.Div([
                          dcc.Dropdown(id=ids.STAGES_WHATIF_SCHEDULE, clearable=False, className="whatif-schedule"),
                          dcc.Input(id=ids.STAGES_WHATIF_MICRO_BATCHES, type="number", min=1, max=4096, step=1,
                                    className="whatif-micro-batches"),
                          html.Button("Re-time", id=ids.STAGES_WHATIF_RUN, n_clicks=0, className="verify-button"),
                      ], className="whatif-form"),
                      html.P(id=ids.STAGES_WHATIF_ANSWER, className="whatif-answer"),
                      note="The chain of passes and transfers that set one measured step; a what-if is for the run "
                           "without the profiler, its range from each recorded step's costs and the plain steps'"
                           " spread either way. Memory is not modelled.",
                      section_id=ids.STAGES_CRITICAL_SECTION, hidden=True),
        ]
    )


# The page's description for an IPU profile (False) and one imported from PyTorch traces (True)
DESCRIPTION = {False: "Each IPU's forward (F) and backward (B) passes per micro-batch, as in the PopTorch tutorial's "
                      "figure; the slowest stage sets the pace.",
               True: "Each rank's forward (F) and backward (B) passes per micro-batch, as the traces recorded them; "
                     "the slowest stage sets the pace."}
NO_PIPELINE = ("The traces ran no pipeline: each rank runs the whole model (data parallel), so there are no stages "
               "to balance and no bubble; each rank's busy and idle time is below.")


@dash.callback(
    Output(ids.STAGES_DESCRIPTION, "children"),
    Output(ids.STAGES_GANTT_TITLE, "children"),
    Output(ids.STAGES_IMBALANCE_TITLE, "children"),
    Output(ids.STAGES_SPLIT_SECTION, "style"),
    Output(ids.STAGES_SPLIT_NOTE, "style"),
    Output(ids.STAGES_PIPELINE_NOTE, "style"),
    Output(ids.STAGES_GANTT_SECTION, "style"),
    Output(ids.STAGES_IMBALANCE_SECTION, "style"),
    Input(ids.PROFILE, "value"),
)
def render_words(profile: str | None):
    """An imported trace: ranks and time; one line instead of the suggested split, and one instead of the
    pipeline's views when it ran none."""
    report = data.report(profile)
    imported_ = data.naming(report).imported
    pipeline = data.pipelined(report)
    return (DESCRIPTION[imported_], f"Forward and backward passes per {'rank' if imported_ else 'IPU'}",
            "Time per micro-batch of each stage" if imported_ else "Cycles per micro-batch of each stage",
            c.shown(not imported_), c.shown(imported_ and pipeline), c.shown(not pipeline), c.shown(pipeline),
            c.shown(pipeline))


def stage_cards(stage_figures: Any) -> list[tuple]:
    f = stage_figures
    return [
        ("Stages", f"{f.num_stages}", f"{f.micro_batches} micro-batches per step"),
        ("Bottleneck",
         f"stage {f.bottleneck_stage}" if f.bottleneck_stage is not None and f.bottleneck_stage >= 0 else "–",
         "the slowest stage sets the pace"),
        ("Imbalance", f"{f.imbalance:.2f} ×", "slowest stage / mean", "bad" if f.imbalance > 1.2 else ""),
        ("Bubble", c.fmt_pct(f.bubble_pct), f"ideal {c.fmt_pct(f.ideal_bubble_pct)} (the run re-timed with its "
                                            f"stages balanced)"),
        ("Step", f"{c.fmt_count(f.step_cycles)} cycles", f"balanced: {c.fmt_count(f.balanced_step_cycles)}"),
        ("Balance gain", c.fmt_pct(f.balance_gain_pct), "of a perfectly balanced split",
         "good" if f.balance_gain_pct > 5 else ""),
    ]


def imported_stage_cards(f: Any, report: Any) -> list[tuple]:
    """An imported trace's cards: its schedule's ideal bubble (not a re-timed one), the step in time; no
    balance gain, which needs the stages' layers."""
    pipe = imported.pipeline(report.run)
    naming = data.naming(report)
    if not data.pipelined(report):
        return [("Ranks", f"{len(report.run.get('stages') or [])}", f"{pipe.schedule}: each runs the whole model"),
                ("Step", c.fmt_seconds(f.step_cycles / float(report.target["clock_hz"])), "mean of the profiled steps"),
                ("Idle", c.fmt_pct(report.exchange.figures().idle_pct),
                 f"of the {naming.time}: {data.idle_reason(report)}")]
    bottleneck = f.bottleneck_stage is not None and f.bottleneck_stage >= 0
    rank = next((int(s["ipu"]) for s in report.run.get("stages") or [] if int(s["stage"]) == f.bottleneck_stage), None)
    return [
        ("Stages", f"{f.num_stages}", f"{f.micro_batches} micro-batches per step; {pipe.schedule}"),
        ("Bottleneck", f"stage {f.bottleneck_stage}" if bottleneck else "–",
         f"on {naming.label(rank)}; the slowest stage sets the pace" if rank is not None
         else "the slowest stage sets the pace"),
        ("Imbalance", f"{f.imbalance:.2f} ×", "slowest stage / mean", "bad" if f.imbalance > 1.2 else ""),
        ("Bubble", c.fmt_pct(f.bubble_pct),
         f"ideal {c.fmt_pct(f.ideal_bubble_pct)} for {pipe.schedule} with {pipe.ranks} ranks × {pipe.stages_per_rank} "
         f"stage(s) and {pipe.micro_batches} micro-batches" if pipe.ideal_bubble_pct > 0 else "no pipeline: idle time"),
        ("Step", c.fmt_seconds(f.step_cycles / float(report.target["clock_hz"])), "mean of the profiled steps"),
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
    naming = data.naming(report)
    if naming.imported:  # no blocks to move: its section says so in one line
        return (c.cards(imported_stage_cards(stage_figures, report)),
                figures.stages_gantt(report.stages.gantt(), naming=naming),
                figures.stage_imbalance(summary, stage_figures.bottleneck_stage, naming),
                figures.stage_utilisation(summary, naming), None, empty(imported.NO_BLOCKS), None)
    split = report.stages.best_split()
    text = html.P([
        "Moving blocks between stages as below would take a step from ",
        html.Strong(f"{c.fmt_count(split.current_step_cycles)} cycles"), " to ",
        html.Strong(f"{c.fmt_count(split.predicted_step_cycles)} cycles"), ": ",
        html.Strong(c.fmt_pct(split.gain_pct), className="good-text" if split.gain_pct > 0 else ""), " faster.",
    ]) if split.gain_pct > 0 else html.P("The current split is already the best one the analysis finds.")
    table = c.table(split.stages,
                    {"stage": "stage", "ipu": "IPU", "blocks": "blocks",
                     "cycles_per_micro_batch": "cycles per micro-batch",
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


def critical_cards(figures_: dict[str, Any]) -> list[tuple]:
    """The critical path's shares, its culprit and how well the re-timing reproduces the run."""
    f = figures_
    return [
        ("Compute on the path", c.fmt_pct(f["compute_pct"]), f"of a {f['path_ms']:,.1f} ms step"),
        ("Communication", c.fmt_pct(f["communication_pct"]), "transfers, sends and receives on the path"),
        ("Waiting", c.fmt_pct(f["waiting_pct"]), "time the path records nothing for"),
        ("Culprit", f["culprit"], f"as fast as the mean stage: {f['culprit_saves_pct']:.0f}% shorter steps",
         "bad" if f["culprit_saves_pct"] > 10 else ""),
        ("Re-timed", c.fmt_pct(f["retimed_residual_pct"]), "the recorded steps re-timed, against the measured"),
    ]


WHATIF_COLUMNS = {"change": "change", "step_ms": "step (ms)", "low_ms": "from", "high_ms": "to",
                  "ms_per_micro_batch": "ms per micro-batch", "gain_pct": "throughput", "bubble_pct": "bubble",
                  "ideal_bubble_pct": "ideal bubble"}
CULPRIT_COLUMNS = {"rank": "rank", "stages": "stages", "step_ms": "step (ms)", "step_if_mean_ms": "if as fast (ms)",
                   "saves_ms": "saves (ms)", "saves_pct": "saves"}


@dash.callback(
    Output(ids.STAGES_CRITICAL_SECTION, "style"),
    Output(ids.STAGES_CRITICAL_CARDS, "children"),
    Output(ids.STAGES_CRITICAL_CULPRITS, "children"),
    Output(ids.STAGES_CRITICAL_WHATIF, "children"),
    Output(ids.STAGES_WHATIF_SCHEDULE, "options"),
    Output(ids.STAGES_WHATIF_SCHEDULE, "value"),
    Output(ids.STAGES_WHATIF_MICRO_BATCHES, "value"),
    Input(ids.PROFILE, "value"),
)
def render_critical_path(profile: str | None):
    """An imported pipeline's critical path, culprits and what-ifs; hidden for any other profile."""
    from popvision_py.analysis.pipeline.schedules import SCHEDULES, ReplayError, schedule_order

    report = data.report(profile)
    if not data.replayable(report):
        return c.shown(False), None, None, None, [], None, None
    view = report.critical_path
    try:
        figures_ = view.figures()
    except ReplayError as exc:
        return c.shown(True), c.one_line(str(exc)), None, None, [], None, None
    m = view.measured()
    allowed = []
    for schedule in SCHEDULES:
        try:
            schedule_order(schedule, m.world, m.stages_per_rank, m.micro_batches)
            allowed.append(schedule)
        except ReplayError:
            continue
    return (c.shown(True), c.cards(critical_cards(figures_)),
            c.table(view.culprits(), CULPRIT_COLUMNS, formats={"rank": c.fmt_int, "stages": str},
                    table_id="stages-culprits-table"),
            c.table(view.whatif(), WHATIF_COLUMNS, formats={"change": str}, table_id="stages-whatif-table"),
            [{"label": s, "value": s} for s in allowed], m.schedule, m.micro_batches)


@dash.callback(
    Output(ids.STAGES_WHATIF_ANSWER, "children"),
    Input(ids.STAGES_WHATIF_RUN, "n_clicks"),
    State(ids.STAGES_WHATIF_SCHEDULE, "value"),
    State(ids.STAGES_WHATIF_MICRO_BATCHES, "value"),
    State(ids.PROFILE, "value"),
    prevent_initial_call=True,
)
def re_time(_n_clicks: int, schedule: str | None, micro_batches: Any, profile: str | None):
    """One what-if of the form, as `popvision tune PROFILE --set schedule=... --set micro_batches=...`."""
    from popvision_py.analysis.pipeline.schedules import SCHEDULES, ReplayError
    from popvision_py.analysis.pipeline.whatif import pytorch_words

    if schedule not in SCHEDULES or not isinstance(micro_batches, int) or isinstance(micro_batches, bool) \
            or not 1 <= micro_batches <= 4096:
        return "Choose a schedule and a number of micro-batches from 1 to 4,096."
    try:
        replay = data.report(profile).critical_path.replay()
        p = replay.predict(schedule=schedule, micro_batches=micro_batches)
    except ReplayError as exc:
        return str(exc)
    return [f"{p.change}: ", html.Strong(f"{p.step_ns / 1e6:,.1f} ms"), " a step (range "
            f"{p.low_ns / 1e6:,.1f} to {p.high_ns / 1e6:,.1f} ms), {p.per_micro_batch_ns / 1e6:,.2f} ms a micro-batch "
            f"({p.gain_pct:+.1f}% throughput), bubble {p.bubble_pct:.1f}% (ideal {p.ideal_bubble_pct:.1f}%). In "
            "PyTorch: ", html.Code(pytorch_words(p)), f". Range: {replay.m.profiler.range_words()}."]
