"""What-if: a tune result (``popvision tune -o tune.parquet``) as figures; a clicked candidate's
command, its figures, and its profile compared with the dashboard's current profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dash
import pandas as pd
from dash import Input, Output, State, dcc, html

from dashboards import components as c
from dashboards import data, ids
from dashboards.figures import whatif as figures
from dashboards.figures.style import empty

dash.register_page(__name__, path="/whatif", name="What-if", title="popvision · what-if", order=8, icon="⟡",
                   needs_tune=True)

# The comparison's figures shown for a candidate: comparison.summary()'s names.
KEY_FIGURES = ("step_s", "throughput_samples_per_s", "num_ipus", "replication_factor", "worst_tile_bytes",
               "oom_tiles", "flop_utilisation_pct")
# Meta keys that may name the best candidate's profile (written by `popvision tune --profile-dir`).
BEST_PROFILE_KEYS = ("best_profile", "profile")


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            c.page_header("What-if", WORDS[False][0], description_id=ids.WHATIF_DESCRIPTION),
            html.Div(id=ids.WHATIF_HEADER, className="cards-slot"),
            html.Div(
                [
                    c.section(WORDS[False][1], c.graph(ids.WHATIF_SCATTER), note=WORDS[False][2],
                              title_id=ids.WHATIF_SCATTER_TITLE, note_id=ids.WHATIF_SCATTER_NOTE),
                    c.section(WORDS[False][3], c.graph(ids.WHATIF_PARETO), note=WORDS[False][4],
                              title_id=ids.WHATIF_PARETO_TITLE, note_id=ids.WHATIF_PARETO_NOTE),
                ],
                className="grid-2",
            ),
            dcc.Store(id=ids.WHATIF_CANDIDATE),
            c.section("Candidate", html.Div("Click a point to see its command and figures.", id=ids.WHATIF_DETAIL,
                                            className="empty"),
                      html.Button("Emulate and compare", id=ids.WHATIF_EMULATE, n_clicks=0, disabled=True,
                                  className="verify-button",
                                  title="Emulate the chosen candidate and compare it with the current profile"),
                      dcc.Loading(html.Div(id=ids.WHATIF_COMPARISON), type="dot", delay_show=200)),
        ]
    )


# The page's words for a tune result (False) and for an imported pipeline re-timed from its trace (True):
# description, first figure's title and note, second figure's title and note
WORDS = {
    False: ("Every configuration the tune search emulated: throughput against memory, the fastest for each number "
            "of IPUs, and the command of any point you click.",
            "Throughput against worst-tile memory", "One point per emulated candidate; click one for its command.",
            "Throughput against IPUs: the Pareto front",
            "The candidates that fit; the front is the fastest for as many IPUs or fewer."),
    True: ("The imported pipeline re-timed from its own measured costs under every schedule and micro-batch count "
           "its stages allow (popvision tune PROFILE); click a point for the change to make in PyTorch.",
           "Time per micro-batch against micro-batches per step",
           "A line per schedule, for the run without the profiler; each bar is the range from each recorded "
           "step's costs and the plain steps' spread either way.",
           "The bubble against micro-batches per step",
           "The share of the ranks' time idle; the stages' imbalance keeps it above the schedule's ideal."),
}


@dash.callback(
    Output(ids.WHATIF_DESCRIPTION, "children"),
    Output(ids.WHATIF_SCATTER_TITLE, "children"),
    Output(ids.WHATIF_SCATTER_NOTE, "children"),
    Output(ids.WHATIF_PARETO_TITLE, "children"),
    Output(ids.WHATIF_PARETO_NOTE, "children"),
    Input(ids.PROFILE, "value"),
)
def render_words(profile: str | None):
    """A tune result's words, or an imported pipeline's (shown when there is no tune result)."""
    replayed = data.current().tune_path is None and data.replayable(data.report(profile))
    return WORDS[replayed]


def key_figures(rows: pd.DataFrame, meta: dict[str, Any]) -> list[tuple]:
    """The cards: the search's size, what fits, the best candidate and the start."""
    counts = rows["status"].value_counts()
    emulated = int(counts.get("ok", 0) + counts.get("oom", 0))
    best = rows[rows["rank"].fillna(0) == 1]
    start = rows[rows["is_start"].astype(bool)]
    cards: list[tuple] = [
        ("Model", str(meta.get("model", "?")), str(meta.get("system", ""))),
        ("Candidates", f"{len(rows):,}", f"{emulated:,} emulated; {int(counts.get('rejected', 0)):,} rejected, "
                                          f"{int(counts.get('error', 0)):,} failed"),
        ("Fit", f"{int(counts.get('ok', 0)):,}", f"{int(counts.get('oom', 0)):,} emulated over memory"),
    ]
    if len(best):
        b = best.iloc[0]
        cards.append(("Best throughput", c.fmt_per_second(round(float(b["samples_per_second"]))),
                      f"{int(b['ipus'])} IPUs; worst tile {float(b['worst_tile_pct']):.1f}%", "good"))
    if len(start) and pd.notna(start.iloc[0]["samples_per_second"]):
        s = start.iloc[0]
        note = "fits" if bool(s["fits"]) else "does not fit"
        cards.append(("Starting configuration", c.fmt_per_second(round(float(s["samples_per_second"]))),
                      f"{int(s['ipus'])} IPUs; {note}"))
    return cards


def candidate_view(row: pd.Series) -> html.Div:
    """A candidate's status, figures and changes, and its command with a copy button."""
    rank = f"rank {int(row['rank'])}" if pd.notna(row["rank"]) else str(row["status"])
    title = f"{rank}: {row['changes'] or 'the starting configuration'}"
    facts = pd.DataFrame({
        "figure": ["status", "throughput", "time per step", "worst tile", "headroom", "IPUs", "Pareto front",
                   "starting configuration"],
        "value": [str(row["status"]) + (f" ({row['reason']})" if row["reason"] else ""),
                  c.fmt_per_second(_whole(row["samples_per_second"])), c.fmt_seconds(_number(row["seconds_per_step"])),
                  c.fmt_pct(_number(row["worst_tile_pct"])), c.fmt_bytes(_number(row["headroom_bytes"])),
                  str(int(row["ipus"])), "yes" if bool(row["pareto"]) else "no",
                  "yes" if bool(row["is_start"]) else "no"],
    })
    return html.Div([
        html.P(title, className="whatif-title", id="whatif-title"),
        *c.command_block(str(row["command"])),
        c.table(facts, columns={"figure": "", "value": ""}, formats={"figure": str, "value": str},
                table_id="whatif-facts"),
    ])


def _whole(value: Any) -> float:
    """Samples per second to the sample."""
    number = _number(value)
    return number if number != number else float(round(number))


def _number(value: Any) -> float:
    return float("nan") if value is None or pd.isna(value) else float(value)


def comparison_view(comparison: Any, candidate: str) -> html.Div:
    """The current profile (A) against the candidate's (B): the settings that differ and the key figures."""
    settings = comparison.configuration()
    summary = comparison.summary()
    key = summary[summary["figure"].astype(str).isin(KEY_FIGURES)].drop_duplicates("figure")
    return html.Div([
        html.P(["Candidate profile: ", html.Code(candidate)], className="verify-profile"),
        html.H4("Settings that differ (A: the current profile, B: the candidate)"),
        c.settings_table(settings, "whatif-configuration", "The candidate has the current profile's settings."),
        html.H4("Key figures"),
        c.table(key[["figure", "a", "b", "difference_pct"]].reset_index(drop=True),
                columns={"figure": "figure", "a": "A", "b": "B", "difference_pct": "change"},
                formats={"figure": lambda v: str(v).replace("_", " "), "a": c.fmt_number, "b": c.fmt_number,
                         "difference_pct": c.fmt_pct},
                table_id="whatif-key-figures"),
    ])


def _no_tune() -> tuple:
    blank = empty("No tune result: start the dashboard with --tune tune.parquet.")
    return html.Div("Start the dashboard with a tune result to see this page: "
                    "popvision dashboard PROFILE --tune tune.parquet", className="empty"), blank, blank


@dash.callback(
    Output(ids.WHATIF_HEADER, "children"),
    Output(ids.WHATIF_SCATTER, "figure"),
    Output(ids.WHATIF_PARETO, "figure"),
    Input(ids.PROFILE, "value"),
)
def render(profile: str | None):
    profiles = data.current()
    if profiles.tune_path is None:
        report = data.report(profile)
        if data.replayable(report):
            return replay_render(report)
        return _no_tune()
    rows, meta = profiles.tune()
    return c.cards(key_figures(rows, meta)), figures.whatif_scatter(rows), figures.whatif_pareto(rows)


def replay_search(report: Any) -> pd.DataFrame:
    from popvision_py.analysis.pipeline import whatif

    return report.memo(("whatif-page", "search"), lambda: whatif.search(report.critical_path.replay()))


def replay_render(report: Any) -> tuple:
    """An imported pipeline's What-if page: every schedule x micro-batch count re-timed from its costs."""
    from popvision_py.analysis.pipeline.replay import ReplayError

    try:
        rows = replay_search(report)
        m = report.critical_path.measured()
        retimed_ms = report.critical_path.replay().baseline_ns() / 1e6
    except ReplayError as exc:
        blank = empty(str(exc))
        return html.Div(str(exc), className="empty"), blank, blank
    best = rows.iloc[0]
    cards = [("Pipeline", f"{m.schedule}", f"{m.world} ranks, {m.n_stages} stages, {m.micro_batches} micro-batches"),
             ("Recorded step", f"{m.measured_step_ns() / 1e6:,.1f} ms",
              f"the median measured step; re-timed with median costs: {retimed_ms:,.1f} ms (the star)"),
             ("Candidates", f"{len(rows)}", "schedules x micro-batch counts, re-timed from the trace"),
             ("Fastest", f"{best['schedule']} x {int(best['micro_batches'])}",
              f"{best['ms_per_micro_batch']:,.2f} ms a micro-batch ({best['gain_pct']:+.1f}% throughput)",
              "good" if best["gain_pct"] > 0 else ""),
             ("Not modelled", "memory", "more micro-batches in flight hold more activations")]
    return (c.cards(cards), figures.replay_per_micro_batch(rows, (m.schedule, m.micro_batches)),
            figures.replay_bubble(rows))


def replay_candidate_view(row: pd.Series) -> html.Div:
    """A re-timed candidate: its figures and the change to make in PyTorch."""
    facts = pd.DataFrame({
        "figure": ["step", "range of the step", "per micro-batch", "throughput", "bubble"],
        "value": [f"{row['step_ms']:,.1f} ms", f"{row['low_ms']:,.1f} to {row['high_ms']:,.1f} ms",
                  f"{row['ms_per_micro_batch']:,.2f} ms", f"{row['gain_pct']:+.1f}%", f"{row['bubble_pct']:.1f}%"]})
    return html.Div([
        html.P(f"rank {int(row['rank'])}: {row['schedule']} with {int(row['micro_batches'])} micro-batches",
               className="whatif-title", id="whatif-title"),
        *c.command_block(str(row["pytorch"])),
        c.table(facts, columns={"figure": "", "value": ""}, formats={"figure": str, "value": str},
                table_id="whatif-facts"),
    ])


def _clicked_row(point: Any, rows: pd.DataFrame) -> int:
    """The row a clicked point names (its ``customdata``), checked against the tune result."""
    row = c.custom_value(point, 0) if isinstance(point.get("customdata"), (dict, list)) else point.get("customdata")
    return _candidate_row(row, rows)


def _candidate_row(row: Any, rows: pd.DataFrame) -> int:
    """``row`` (from the browser) if it is a row number of the tune result; ValueError otherwise."""
    if not isinstance(row, int) or isinstance(row, bool) or not 0 <= row < len(rows):
        raise ValueError("a candidate is named by its row of the tune result")
    return row


@dash.callback(
    Output(ids.WHATIF_DETAIL, "children"),
    Output(ids.WHATIF_DETAIL, "className"),
    Output(ids.WHATIF_CANDIDATE, "data"),
    Output(ids.WHATIF_EMULATE, "disabled"),
    Output(ids.WHATIF_COMPARISON, "children"),
    Input(ids.WHATIF_SCATTER, "clickData"),
    Input(ids.WHATIF_PARETO, "clickData"),
    State(ids.PROFILE, "value"),
    prevent_initial_call=True,
)
def choose(scatter: dict | None, pareto: dict | None, profile: str | None = None):
    """The clicked candidate (from either figure): its view, its row kept for "Emulate and compare"."""
    clicked = pareto if dash.ctx.triggered_id == ids.WHATIF_PARETO else scatter
    profiles = data.current()
    if profiles.tune_path is None:  # an imported pipeline's re-timed candidate: nothing to emulate
        if not clicked or not clicked.get("points"):
            return dash.no_update, dash.no_update, dash.no_update, dash.no_update, dash.no_update
        rows = replay_search(data.report(profile))
        row = _clicked_row(clicked["points"][0], rows)
        return replay_candidate_view(rows.iloc[row]), "", None, True, []
    return chosen(clicked)


def chosen(clicked: dict | None) -> tuple:
    """``choose``'s outputs for a figure's ``clickData``."""
    if not clicked or not clicked.get("points"):
        return dash.no_update, dash.no_update, dash.no_update, dash.no_update, dash.no_update
    rows, _meta = data.current().tune()
    row = _clicked_row(clicked["points"][0], rows)
    return candidate_view(rows.iloc[row]), "", row, False, []


def candidate_profile(profiles: Any, rows: pd.DataFrame, meta: dict[str, Any], row: int) -> Path:
    """The candidate's profile: the tune result's best profile for the best candidate when it exists,
    else the candidate's request emulated into the dashboard's folder (kept for the next click)."""
    rank = rows.iloc[row]["rank"]
    if pd.notna(rank) and int(rank) == 1:
        for name in BEST_PROFILE_KEYS:
            given = meta.get(name)
            if isinstance(given, str) and given:
                path = Path(given)
                path = path if path.is_absolute() else profiles.tune_path.parent / path
                path = path / "profile.pop" if path.is_dir() else path
                if path.is_file():
                    return path
    return profiles.emulate(json.loads(rows.iloc[row]["request"]), f"candidate-{row}")


@dash.callback(
    Output(ids.WHATIF_COMPARISON, "children", allow_duplicate=True),
    Input(ids.WHATIF_EMULATE, "n_clicks"),
    State(ids.WHATIF_CANDIDATE, "data"),
    State(ids.PROFILE, "value"),
    prevent_initial_call=True,
)
def emulate_and_compare(_n_clicks: int, row: Any, profile: str | None):
    """Emulate the chosen candidate (or take the best's profile) and compare it with the current profile."""
    from popvision_py.analysis.compare import Comparison
    from popvision_py.errors import PopvisionError

    profiles = data.current()
    rows, meta = profiles.tune()
    row = _candidate_row(row, rows)
    try:
        path = candidate_profile(profiles, rows, meta, row)
        with data.open_profile(path) as candidate:
            comparison = Comparison(profiles.report(profile), candidate)
            return comparison_view(comparison, str(path))
    except PopvisionError as exc:
        return html.P(f"This candidate could not be emulated: {exc}", className="verify-verdict verify-bad")
    except LookupError as exc:  # no emulator in this app
        return html.P(str(exc), className="verify-verdict verify-bad")
