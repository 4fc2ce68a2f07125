"""Compare: the two profiles' key figures and figures side by side, from ``pv.compare``."""

from __future__ import annotations

from typing import Any

import dash
import pandas as pd
import plotly.graph_objects as go
from dash import Input, Output, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import compare as figures
from dashboards.figures.stages import stage_cycles
from dashboards.figures.style import IPUS, empty
from popvision_py.analysis.imported.ranks import NO_MEMORY, shared_ranks
from popvision_py.render.rank_words import name as rank_name, no_pipeline, rank_figures

dash.register_page(__name__, path="/compare", name="Compare", title="popvision · compare", order=7, icon="⇆",
                   needs_two_profiles=True)

SECTIONS = ("summary", "memory", "liveness", "stages", "exchange")
KEY_FIGURES = {  # figure of comparison.summary() -> card label
    "step_s": "time per step",
    "throughput_samples_per_s": "throughput",
    "flop_utilisation_pct": "FLOP utilisation",
    "oom_tiles": "out-of-memory tiles",
    "worst_tile_bytes": "worst tile",
    "total_cycles": "cycles traced",
}


NO_STAGES = ("ran no pipeline (data parallel: each rank runs the whole model), so there are no stages to compare; "
             "the time by phase below compares the ranks' time.")

# Two profiles imported from PyTorch traces: no FLOPs or tiles; the largest rank's peak
IMPORTED_KEY_FIGURES = {
    "step_s": "time per step",
    "throughput_samples_per_s": "throughput",
    "worst_tile_bytes": "peak memory (largest rank)",
}


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            c.page_header("Compare", "Profile A against profile B: the settings that differ, then every "
                                     "report's figures side by side, with the difference (B − A)."),
            html.Div(id=ids.COMPARE_HEADER, className="compare-header"),
            html.Div(id=ids.COMPARE_FIGURES, className="compare-cards"),
            html.Div(
                [
                    c.section("Memory per IPU", c.graph(ids.COMPARE_MEMORY), title_id=ids.COMPARE_MEMORY_TITLE),
                    c.section("Cycles per micro-batch per stage", c.graph(ids.COMPARE_STAGES),
                              title_id=ids.COMPARE_STAGES_TITLE),
                ],
                className="grid-2",
            ),
            c.section("Time by phase", c.graph(ids.COMPARE_PHASES, modebar=False)),
            c.section("Every figure", html.Div(id=ids.COMPARE_TABLES)),
        ]
    )


def stages_figure(stages: dict[str, pd.DataFrame], labels: dict[str, str], imported: bool,
                  unpipelined: list[str]) -> go.Figure:
    """Each profile's time per micro-batch per stage side by side (``figures.stages.stage_cycles`` frames), two
    imported traces' in ms; a profile that ran no pipeline (``unpipelined``: data parallel) has no stages to draw,
    and neither having any is said in one line."""
    if len(unpipelined) == len(stages):
        return empty(f"{' and '.join(labels[key] for key in unpipelined)}: {NO_STAGES}")
    shown = {key: f for key, f in stages.items() if key not in unpipelined}
    if not imported:
        return figures.side_by_side_bars(shown, "stage_label", "cycles_per_micro_batch", "", "cycles", labels)
    return figures.side_by_side_bars({key: f.assign(ms=f["cycles_per_micro_batch"] / 1e6) for key, f in shown.items()},
                                     "stage_label", "ms", "", "ms", labels)


def compare_table(frame: pd.DataFrame, table_id: str | None = None, imported: bool = False,
                  ranks: Any = None) -> html.Table | html.Div:
    """One comparison frame ``[section, figure, a, b, difference, difference_pct]`` as a table,
    each row's values formatted by the unit its figure's name ends with; identifiers (no difference)
    and figures new on one side (no percent) leave those cells blank. Two ``imported`` traces: their figures in a
    rank's words (``ranks``: each IPU's rank, or None, as ``rank_words.compared_in_rank_words`` takes it), none a
    trace has none of, and their cycles as the times they are."""
    if frame.empty:
        return html.Div("Nothing to compare.", className="empty")
    names = [str(f) for f in frame["figure"]]
    if imported:
        keep, names = rank_figures(names, ranks)
        figure = frame["figure"].to_numpy(object)[keep]
        frame = frame[keep].assign(**{side: no_pipeline(figure, frame[side].to_numpy()[keep]) for side in "ab"})
    rows = []
    for row, name in zip(frame.itertuples(index=False), names):
        fmt = c.fmt_for_column(str(row.figure))
        if imported and str(row.figure).endswith("cycles"):  # an imported trace's cycle is a ns
            fmt = _ns
        pct = row.difference_pct
        changed = _is_number(pct) and abs(pct) >= 5
        rows.append(html.Tr([
            html.Td(name.replace("_", " ")),
            html.Td(fmt(row.a), className="num"),
            html.Td(fmt(row.b), className="num"),
            html.Td(_difference(fmt, row.difference), className="num"),
            html.Td(c.fmt_pct(pct) if _is_number(pct) else "", className="num"),
        ], className="changed" if changed else None))
    head = html.Thead(html.Tr([html.Th("figure"), html.Th("A", className="num"), html.Th("B", className="num"),
                               html.Th("B − A", className="num"), html.Th("change", className="num")]))
    props = {"id": table_id} if table_id else {}
    return html.Table([head, html.Tbody(rows)], className="pv-table compare-table", **props)


def compare_cards(frame: pd.DataFrame, key_figures: dict[str, str] | None = None) -> html.Div:
    """The key figures of both profiles as cards: A, B and the change (``key_figures``: figure -> label,
    ``KEY_FIGURES`` unless given)."""
    key_figures = KEY_FIGURES if key_figures is None else key_figures
    items = []
    rows = frame[frame["figure"].astype(str).isin(key_figures)].drop_duplicates("figure")
    for row in rows.itertuples(index=False):
        fmt = c.fmt_for_column(str(row.figure))
        pct = row.difference_pct
        change = c.fmt_pct(pct) if _is_number(pct) else ""
        items.append(html.Div([
            html.Div(key_figures[str(row.figure)], className="card-label"),
            html.Div([html.Span(fmt(row.a), className="compare-a"), html.Span(" → ", className="arrow"),
                      html.Span(fmt(row.b), className="compare-b")], className="card-value"),
            html.Div(f"change {'+' if pct > 0 else ''}{change}" if change else "",
                     className="card-note"),
        ], className="card compare-card"))
    return html.Div(items, className="cards")


def _ns(value: Any) -> str:
    return c.fmt_seconds(value / 1e9) if _is_number(value) else c.fmt_text(value)


def _is_number(value: Any) -> bool:
    """A number that is not NaN (the comparison's cells also hold text, None and NaN)."""
    return isinstance(value, (int, float)) and not pd.isna(value)


def _difference(fmt: Any, value: Any) -> str:
    if isinstance(value, bool) or not _is_number(value):
        return "" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)
    text = fmt(value)
    return f"+{text}" if value > 0 else text


def profile_header(labels: dict[str, str]) -> html.Div:
    return html.Div([html.Div(label, className=f"compare-profile compare-{key}") for key, label in labels.items()])


def configuration_table(settings: pd.DataFrame, imported: bool = False) -> html.Section:
    """The run settings that differ between A and B (``Comparison.configuration()``), or a line saying none does;
    two imported traces' in a rank's words (``bytes_per_tile`` is ``device_bytes``)."""
    if imported and len(settings):
        settings = settings.assign(setting=settings["setting"].astype(str).map(rank_name))
    return c.section("Settings that differ",
                     c.settings_table(settings, "compare-configuration", "A and B have the same settings."))


@dash.callback(
    Output(ids.COMPARE_MEMORY_TITLE, "children"),
    Output(ids.COMPARE_STAGES_TITLE, "children"),
    Input(ids.PROFILE, "value"),
)
def render_words(_profile: str | None):
    """Two profiles imported from PyTorch traces: ranks and time."""
    profiles = data.current()
    if all(data.naming(profiles.report(key)).imported for key in profiles.keys):
        return "Memory per rank", "Time per micro-batch per stage"
    return "Memory per IPU", "Cycles per micro-batch per stage"


@dash.callback(
    Output(ids.COMPARE_HEADER, "children"),
    Output(ids.COMPARE_FIGURES, "children"),
    Output(ids.COMPARE_MEMORY, "figure"),
    Output(ids.COMPARE_STAGES, "figure"),
    Output(ids.COMPARE_PHASES, "figure"),
    Output(ids.COMPARE_TABLES, "children"),
    Input(ids.PROFILE, "value"),
)
def render(_profile: str | None):
    profiles = data.current()
    if not profiles.comparing:
        message = html.Div("Start the dashboard with two profiles to compare them: "
                           "popvision dashboard A.pop B.pop", className="empty")
        blank = empty("Only one profile is served.")
        return message, [], blank, blank, blank, []
    comparison = profiles.comparison()
    labels = {key: profiles.label(key) for key in profiles.keys}
    reports = {key: profiles.report(key) for key in profiles.keys}
    namings = {key: data.naming(r) for key, r in reports.items()}
    imported = all(n.imported for n in namings.values())  # both imported: ranks and ns throughout
    unrecorded = [labels[key] for key, r in reports.items() if not r.memory_recorded]
    memory = {key: r.memory.by_ipu().assign(ipu_label=lambda f, n=namings[key]: f["ipu"].map(n.label),
                                            total_mib=lambda f: f["total_bytes"] / 2**20)
              for key, r in reports.items()}
    stages = {key: stage_cycles(r.stages.summary()).assign(stage_label=lambda f: "stage " + f["stage"].astype(str))
              for key, r in reports.items()}
    tables = [
        html.Details([html.Summary(section.capitalize()), compare_table(
            getattr(comparison, section)(), table_id=f"compare-{section}-table",
            imported=imported, ranks=shared_ranks(list(reports.values())) if imported else None)],
                     open=section == "summary", className="compare-section")
        for section in SECTIONS
    ]
    return (
        [profile_header(labels), configuration_table(comparison.configuration(), imported)],
        compare_cards(comparison.summary(), IMPORTED_KEY_FIGURES if imported else None),
        figures.side_by_side_bars(memory, "ipu_label", "total_mib", "", "MiB at peak", labels) if not unrecorded
        else empty(f"{' and '.join(unrecorded)}: {NO_MEMORY}"),
        stages_figure(stages, labels, imported, [key for key, r in reports.items() if not data.pipelined(r)]),
        figures.compare_phase_shares({key: data.phase_shares(r) for key, r in reports.items()}, labels,
                                     namings["a"] if imported else IPUS),
        tables,
    )
