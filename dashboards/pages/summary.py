"""Summary and insights: the run's key figures, where the time goes, and findings with fixes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dash
import pandas as pd
from dash import MATCH, Input, Output, State, dcc, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import exchange as exchange_figures
from dashboards.figures import insights as insight_figures
from dashboards.figures import memory as memory_figures
from dashboards.figures.style import empty
from popvision_py.analysis.imported.ranks import NO_MEMORY, NO_TILES, NO_VARIABLES, NOT_RECORDED, WHY_NOT_RECORDED
from popvision_py.format.schema import Driver
from popvision_py.render.format import FIT_ANSWER, assumption_value
from popvision_py.render.names import files_named, ranks_named

dash.register_page(__name__, path="/", name="Summary", title="popvision · summary", order=0, icon="◎")


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            c.page_header("Summary and insights", "What ran, how fast, whether it fits, and what to change."),
            html.Div(id=ids.SUMMARY_FIGURES, className="cards-slot"),
            html.Div(id=ids.SUMMARY_RANGES),
            html.Div(
                [
                    c.section("Where the IPU time goes", c.graph(ids.SUMMARY_TIME, modebar=False),
                              title_id=ids.SUMMARY_TIME_TITLE),
                    c.section("Memory per IPU", c.graph(ids.SUMMARY_MEMORY), title_id=ids.SUMMARY_MEMORY_TITLE),
                ],
                className="grid-2",
            ),
            c.section("Findings and suggested fixes", html.Div(id=ids.SUMMARY_INSIGHTS)),
            *tile_insight_sections(),
        ]
    )


# -- the tile insights: memory over tiles, the fullest tiles, FP32 variables (analysis/findings/insights.py) ----------


def tile_insight_sections() -> list:
    """The panels of Graph Analyser's insights beside the findings (filled by ``render_tile_insights``; an
    imported trace's ranks have no tiles nor typed variables, so ``render_words`` hides them)."""
    return [html.Div([
        html.Div([
            c.section("Memory over tiles", c.graph(ids.SUMMARY_TILE_HISTOGRAM, modebar=False),
                      note="Tiles' peak bytes, every IPU's together, in the bins `popvision report` gives."),
            c.section("The five fullest tiles", html.Div(id=ids.SUMMARY_FULLEST),
                      note="What fills each at its peak step: bytes by category, the largest variables."),
        ], className="grid-2"),
        c.section("FP32 variables that could be FP16", html.Div(id=ids.SUMMARY_FP32),
                  note="By IPU and kind; the option that keeps them in FP16 and the bytes it saves (its "
                       "command and effect are among the findings)."),
    ], id=ids.SUMMARY_TILE_INSIGHTS)]


def fullest_view(head: pd.DataFrame, categories: pd.DataFrame, variables: pd.DataFrame) -> html.Div:
    """Each fullest tile: its bytes and share of the tile, then its categories and largest variables."""
    if head.empty:
        return html.Div("No tiles.", className="empty")
    items = []
    for row in head.itertuples(index=False):
        cats = categories[categories["rank"] == row.rank]
        held = variables[variables["rank"] == row.rank]
        items.append(html.Div([
            html.P([html.Strong(f"{row.rank}. IPU {row.ipu}, tile {row.tile}: "),
                    f"{c.fmt_bytes(row.total_bytes)} ({c.fmt_pct(row.used_pct)} of the tile), peak at step "
                    f"{row.peak_step}"], className="fullest-head"),
            html.P("; ".join(f"{k} {c.fmt_bytes(b)}" for k, b in zip(cats["category"], cats["bytes"])),
                   className="fullest-categories"),
            html.P("Largest: " + ("; ".join(f"{n} {c.fmt_bytes(b)}"
                                            for n, b in zip(held["name"], held["bytes_on_tile"]))
                                  or "no variable"), className="fullest-variables"),
        ], className="fullest-tile"))
    return html.Div(items, className="fullest")


@dash.callback(
    Output(ids.SUMMARY_TILE_HISTOGRAM, "figure"),
    Output(ids.SUMMARY_FULLEST, "children"),
    Output(ids.SUMMARY_FP32, "children"),
    Input(ids.PROFILE, "value"),
)
def render_tile_insights(profile: str | None):
    report = data.report(profile)
    if data.naming(report).imported:
        return empty(NO_TILES), c.one_line(NO_TILES), c.one_line(NO_VARIABLES)
    insights = report.insights
    fp32 = insights.fp32_variables()
    inferred = insights.dtypes()[1]
    note = [c.one_line("A schema-1 profile does not record variables' types: these are inferred from the run "
                       "configuration.")] if inferred and not fp32.empty else []
    return (
        insight_figures.memory_histogram(insights.histogram(), int(report.target["bytes_per_tile"])),
        fullest_view(insights.fullest_tiles(), insights.fullest_tile_categories(), insights.fullest_tile_variables()),
        html.Div(note + [c.table(fp32, table_id=ids.SUMMARY_FP32_TABLE)]) if not fp32.empty
        else html.Div("No FP32 variables: every variable is FP16 or an integer.", className="empty"),
    )


def key_figures(summary: Any, ranges: data.Ranges | None = None) -> list[tuple]:
    """The cards of the summary page, from ``summary.figures()`` and the profile's ``data.ranges`` (None: the
    central figures alone, as a profile written without ranges has)."""
    fits = bool(summary.fits)
    rate_note = f"{summary.samples_per_step:,} samples per step"
    fit_card = ("Fits in memory", "yes" if fits else "no",
                "no tile over capacity" if fits else f"{summary.oom_tiles:,} tiles out of memory",
                "good" if fits else "bad")
    if ranges is not None:
        rate_note = f"{c.fmt_range(*ranges.throughput_range)} at the assumptions' ends; {rate_note}"
        fit_card = ("Fits in memory", FIT_ANSWER[ranges.fit_verdict], fit_note(ranges, summary.oom_tiles),
                    FIT_TONE[ranges.fit_verdict])
    return [
        ("Model", f"{summary.model}", f"{summary.strategy} {summary.mode} on {summary.arch}"),
        ("IPUs", f"{summary.num_ipus} × {summary.replication_factor}",
         "per replica × replicas"),
        ("Batch", f"{summary.micro_batch_size} × {summary.gradient_accumulation}",
         f"micro-batch × accumulation; {c.fmt_quantity(summary.device_iterations, 'device iteration')}"),
        ("Time per step", c.fmt_seconds(summary.step_s), f"{c.fmt_count(summary.step_cycles)} cycles"),
        ("Throughput", f"{summary.throughput_samples_per_s:,.0f} /s", rate_note),
        ("FLOP utilisation", c.fmt_pct(summary.flop_utilisation_pct), f"{c.fmt_count(summary.total_flops)} FLOPs"),
        fit_card,
        ("Worst tile", c.fmt_bytes(summary.worst_tile_bytes),
         f"IPU {summary.worst_ipu}, tile {summary.worst_tile} of {c.fmt_bytes(summary.bytes_per_tile)}"),
    ]


def imported_figures(summary: Any, report: Any) -> list[tuple]:
    """The cards of a profile imported from PyTorch profiler traces: the schedule and ranks, the step, the
    ranks' idle and exposed communication, and the largest rank's peak allocation (no FLOPs, no tiles)."""
    naming = data.naming(report)
    info = report.run.get("import") or {}
    time = report.exchange.figures()
    comm = report.exchange.communication()
    hidden = float(comm["hidden_comm_cycles"].sum()) if len(comm) else 0.0
    whole = hidden + float(comm["exposed_comm_cycles"].sum()) if len(comm) else 0.0
    pipelined = summary.strategy == "pipelined"
    rate = summary.throughput_samples_per_s
    batch_known = not any("batch size" in str(s) for s in info.get("not_inferred") or [])
    peak = ("Peak memory", c.fmt_bytes(summary.worst_tile_bytes), f"{naming.label(summary.worst_ipu)} at its peak")
    if not report.memory_recorded:
        peak = ("Peak memory", NOT_RECORDED, WHY_NOT_RECORDED)
    elif data.capacity_known(report):
        peak = (*peak[:2], f"{peak[2]}; {'fits in' if summary.fits else 'over'} the device's "
                           f"{c.fmt_bytes(summary.bytes_per_tile)}", "" if summary.fits else "bad")
    return [
        ("Model", f"{summary.model}", f"{info.get('schedule', summary.strategy)} {summary.mode} on {summary.arch}"),
        ("Ranks", f"{summary.num_ipus}", _world(info)),
        ("Steps", f"{summary.iterations:,}", (f"{summary.gradient_accumulation:,} micro-batches each" if pipelined
                                              else "profiled")),
        ("Time per step", c.fmt_seconds(summary.step_s), f"mean of the {c.fmt_quantity(summary.iterations, 'step')} "
                                                         "profiled"),
        ("Throughput", f"{rate:,.1f} /s" if rate >= 1 else f"{rate:,.3g} /s",  # a step of 41 s: 0.024 /s
         f"{summary.samples_per_step:,} samples per step" if batch_known else
         f"{'micro-batches' if pipelined else 'steps'} per second: the trace does not record the batch size"),
        ("Idle", c.fmt_pct(time.idle_pct), f"of the {naming.time}: {data.idle_reason(report)}"),
        ("Exposed communication", c.fmt_pct(time.exchange_pct),
         f"of the ranks' time; {c.fmt_pct(100 * hidden / whole if whole else 0)} of all communication is hidden "
         "behind compute"),
        peak,
    ]


def _world(info: dict) -> str:
    """The world size the traces state (``run.import.world_size``), or that they state none (a trace without
    ``distributedInfo``)."""
    world = info.get("world_size")
    return f"world size {int(world):,}" if isinstance(world, int) else "a world size the traces do not state"


def source_panel(report: Any) -> html.Section:
    """Where an imported profile came from: PyTorch profiler traces, the schedule and ranks the import
    recognised, and what the traces do not hold (``run.import``)."""
    info = report.run.get("import") or {}
    ranks = ranks_named(list(info.get("ranks") or []))
    files = [Path(str(f)).name for f in info.get("files") or []]
    named = files_named(files)
    torch = info.get("torch_version") or "not recorded"
    lines = [
        html.P([html.Strong("Source "), html.Code(str(report.run.get("source"))),
                f": {c.fmt_quantity(len(files), 'trace')} ({named}), "
                f"{c.fmt_int(info.get('events', 0))} events; torch {torch}."], className="source-files"),
        html.P([html.Strong("Schedule "), f"{info.get('schedule', 'unknown')}; {ranks} of {_world(info)}."],
               className="source-schedule"),
    ]
    missing = [str(sentence) for sentence in info.get("not_inferred") or []]
    if missing:
        lines += [html.P(html.Strong("Not in the traces (assumed as said):"), className="source-missing-head"),
                  html.Ul([html.Li(sentence) for sentence in missing], className="source-missing")]
    return c.section("Imported from PyTorch profiler traces", html.Div(lines, id=ids.SUMMARY_SOURCE),
                     note="The pages show each rank and its time in ns.")


# The fit verdict's tone on the "Fits in memory" card (its answer: render.format.FIT_ANSWER)
FIT_TONE = {"fits": "good", "does not fit": "bad", "borderline": "warn"}
DRIVERS_SHOWN = 5  # assumptions listed under each range, largest effect first


def fit_note(ranges: data.Ranges, oom_tiles: int) -> str:
    """'worst tile 93.0 % to 104.0 % of a tile', and the tiles out of memory at the central estimate when any."""
    note = f"worst tile {c.fmt_range(*ranges.worst_tile_pct_range, fmt=c.fmt_pct)} of a tile"
    return note + (f"; {oom_tiles:,} tiles out of memory at the central estimate" if oom_tiles else "")


def ranges_panel(ranges: data.Ranges | None, throughput: float) -> html.Section | None:
    """What the ranges say: the throughput (``throughput``, the central estimate) with its range, the fit
    verdict, the assumptions that drive each range (largest effect first) and which one to pin down; None
    for a profile written without ranges."""
    if ranges is None:
        return None
    verdict = ranges.fit_verdict
    lines = [
        html.P([html.Strong("Throughput "), f"{throughput:,.0f} samples/s ({c.fmt_range(*ranges.throughput_range)})"],
               className="ranges-throughput"),
        html.P([html.Strong("Fit "), html.Span(verdict, className=f"verdict verdict-{FIT_TONE[verdict]}"),
                f" ({fit_note(ranges, 0)})"], className="ranges-verdict"),
    ]
    if verdict == "borderline":
        lines.append(html.P("Within the assumptions' intervals the worst tile may be over or under a tile's memory: "
                            "pin down the assumptions that drive its range (below) before relying on this run "
                            "fitting.", className="ranges-borderline"))
    if ranges.pin_down:
        lines.append(html.P(["The throughput range is wider than ±25%: measure ", html.Code(ranges.pin_down),
                             " and give it with ", html.Code(f"--assume {ranges.pin_down}=VALUE"), "."],
                            className="ranges-pin-down"))
    if ranges.pinned:
        lines.append(html.P(f"Given with --assume (known, so out of the ranges): {', '.join(ranges.pinned)}.",
                            className="ranges-pinned"))
    tables = html.Div([
        html.Div([html.H4("What drives the throughput range"),
                  drivers_table(ranges.throughput_drivers, c.fmt_range_end, "samples/s",
                                ids.SUMMARY_THROUGHPUT_DRIVERS)]),
        html.Div([html.H4("What drives the worst tile's range"),
                  drivers_table(ranges.worst_tile_drivers, c.fmt_pct, "worst tile",
                                ids.SUMMARY_WORST_TILE_DRIVERS)]),
    ])  # one above the other: the assumptions' names are long, and a cell never breaks one
    return c.section("Ranges: how sure these figures are", *lines, tables,
                     note="Each assumption of the emulator emulated again at both ends of its plausible interval "
                          "(docs/emulator.md); the ranges combine their effects.")


def drivers_table(drivers: tuple[Driver, ...], fmt: c.Formatter, figure: str, table_id: str) -> html.Div:
    """The assumptions behind one range, largest effect first: each one's value and interval, and the
    ``figure`` at its low and at its high end."""
    if not drivers:
        return html.Div("No assumption moves it.", className="empty", id=table_id)
    head = html.Thead(html.Tr([html.Th("assumption"), html.Th("value (interval)", className="num"),
                               html.Th(f"{figure} at its low end", className="num"),
                               html.Th(f"{figure} at its high end", className="num")]))
    body = [html.Tr([html.Td(d.name), html.Td(f"{assumption_value(d.value)} ({assumption_value(d.low)} to "
                                               f"{assumption_value(d.high)})", className="num"),
                     html.Td(fmt(d.at_low), className="num"), html.Td(fmt(d.at_high), className="num")])
            for d in drivers[:DRIVERS_SHOWN]]
    return html.Div(html.Table([head, html.Tbody(body)], className="pv-table", id=table_id), className="table-wrap")


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
        *([html.P(["Profile: ", html.Code(str(row["profile"]))], className="verify-profile")]
          if row["profile"] else []),
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
    before = verify.MeasuredFigures.of(report)
    clock = float(report.target["clock_hz"])
    try:
        measured = verify.measured_row(fix, before, clock,
                                       lambda: profiles.emulate(fix.request, f"verify-{key}-{fix.tag}"))
    except LookupError as exc:  # no emulator in this app
        return html.P(str(exc), className="verify-verdict verify-bad")
    return verified_view(measured)


@dash.callback(
    Output(ids.SUMMARY_FIGURES, "children"),
    Output(ids.SUMMARY_RANGES, "children"),
    Output(ids.SUMMARY_TIME, "figure"),
    Output(ids.SUMMARY_MEMORY, "figure"),
    Output(ids.SUMMARY_INSIGHTS, "children"),
    Input(ids.PROFILE, "value"),
)
def render(profile: str | None):
    report = data.report(profile)
    summary = report.summary.figures()
    ranges = data.ranges(report)
    shares = data.phase_shares(report)
    naming = data.naming(report)
    return (
        c.cards(imported_figures(summary, report) if naming.imported else key_figures(summary, ranges)),
        source_panel(report) if naming.imported else ranges_panel(ranges, summary.throughput_samples_per_s),
        exchange_figures.phase_shares(shares, naming=naming),
        memory_figures.ipu_memory(report.memory.by_ipu(), naming, capacity=data.capacity_known(report))
        if report.memory_recorded else empty(NO_MEMORY),
        # an imported profile's findings have no command, so no "Verify" either
        insight_list(report.summary.insights(), verify=data.current().runner is not None),
    )


@dash.callback(
    Output(ids.SUMMARY_TIME_TITLE, "children"),
    Output(ids.SUMMARY_MEMORY_TITLE, "children"),
    Output(ids.SUMMARY_TILE_INSIGHTS, "style"),
    Input(ids.PROFILE, "value"),
)
def render_words(profile: str | None):
    """The panels' titles: an imported trace's IPUs are ranks, which have no tiles (no tile insights)."""
    if data.naming(data.report(profile)).imported:
        return "Where the ranks' time goes", "Memory per rank", c.shown(False)
    return "Where the IPU time goes", "Memory per IPU", c.shown(True)
