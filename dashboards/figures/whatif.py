"""The What-if page's figures: a tune result (``format.tunefile``'s rows) as throughput against
worst-tile memory and against IPUs, with the Pareto front."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboards.figures.style import CAPACITY_COLOUR, OOM_COLOUR, empty, styled

FITS_COLOUR = "#3B7DD8"
START_COLOUR = "#1f2933"
PARETO_COLOUR = "#3FA672"


def _candidate_hover(rows: pd.DataFrame) -> list[str]:
    """Each candidate's rank (or status), its figures and its changes from the start, for hover text."""
    rank = rows["rank"].astype("Float64")
    head = np.where(rank.notna().to_numpy(), "rank " + rank.fillna(0).astype(int).astype(str),
                    rows["status"].astype(str))
    changes = rows["changes"].astype(str).replace("", "(the starting configuration)")
    return (pd.Series(head, index=rows.index) + "<br>" + rows["samples_per_second"].map("{:,.0f} samples/s".format)
            + "<br>worst tile " + rows["worst_tile_pct"].map("{:.1f}%".format) + ", "
            + rows["ipus"].astype(int).astype(str) + " IPUs<br>" + changes).tolist()


def _start_marker(fig: go.Figure, rows: pd.DataFrame, x: str) -> None:
    start = rows[rows["is_start"].astype(bool) & rows["samples_per_second"].notna()]
    if len(start):
        fig.add_trace(go.Scatter(
            x=start[x].astype(float), y=start["samples_per_second"].astype(float), mode="markers",
            name="starting configuration", customdata=start.index.tolist(), hovertext=_candidate_hover(start),
            hoverinfo="text", marker=dict(symbol="star", size=18, color="rgba(0,0,0,0)",
                                          line=dict(color=START_COLOUR, width=2))))


# The What-if figures share half the page each: their legends go under the axis, clear of the mode bar.
WHATIF_LEGEND = dict(legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0),
                     margin=dict(l=60, r=20, t=30, b=40))


def whatif_scatter(rows: pd.DataFrame) -> go.Figure:
    """Throughput against worst-tile memory %, one point per emulated candidate (``customdata``: its row);
    those that fit as blue circles, those that do not as red crosses, the start ringed by a star, and the
    tile's capacity (100%) as a line."""
    emulated = rows[rows["samples_per_second"].notna() & rows["worst_tile_pct"].notna()]
    if not len(emulated):
        return empty("No candidate of this tune result was emulated.")
    fig = go.Figure()
    fits = emulated["fits"].astype(bool)
    for name, part, symbol, colour in (("fits", emulated[fits], "circle", FITS_COLOUR),
                                       ("does not fit", emulated[~fits], "x", OOM_COLOUR)):
        fig.add_trace(go.Scatter(
            x=part["worst_tile_pct"].astype(float), y=part["samples_per_second"].astype(float), mode="markers",
            name=name, customdata=part.index.tolist(), hovertext=_candidate_hover(part), hoverinfo="text",
            marker=dict(symbol=symbol, size=10, color=colour, opacity=0.85, line=dict(width=0.5, color="#ffffff"))))
    _start_marker(fig, emulated, "worst_tile_pct")
    fig.add_vline(x=100, line=dict(color=CAPACITY_COLOUR, dash="dash", width=1),
                  annotation_text="tile capacity", annotation_position="top left")
    return styled(fig, height=440, xaxis_title="worst tile (% of a tile's memory)",
                  yaxis_title="throughput (samples/s)", clickmode="event", **WHATIF_LEGEND)


def whatif_pareto(rows: pd.DataFrame) -> go.Figure:
    """Throughput against IPUs of the candidates that fit (``customdata``: their rows), the Pareto front
    (the ``pareto`` rows, by IPUs) as a line, the start ringed by a star."""
    fit = rows[rows["fits"].astype(bool) & rows["samples_per_second"].notna()]
    if not len(fit):
        return empty("No candidate of this tune result fits.")
    front = fit[fit["pareto"].astype(bool)].sort_values(["ipus", "samples_per_second"])
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=fit["ipus"].astype(int), y=fit["samples_per_second"].astype(float), mode="markers", name="fits",
        customdata=fit.index.tolist(), hovertext=_candidate_hover(fit), hoverinfo="text",
        marker=dict(size=9, color=FITS_COLOUR, opacity=0.6)))
    fig.add_trace(go.Scatter(
        x=front["ipus"].astype(int), y=front["samples_per_second"].astype(float), mode="lines+markers",
        name="Pareto front", customdata=front.index.tolist(), hovertext=_candidate_hover(front), hoverinfo="text",
        line=dict(color=PARETO_COLOUR, width=2, shape="hv"), marker=dict(size=11, color=PARETO_COLOUR)))
    _start_marker(fig, fit, "ipus")
    return styled(fig, height=440, xaxis_title="IPUs used", yaxis_title="throughput (samples/s)",
                  xaxis=dict(type="log", dtick=0.30102999566), clickmode="event", **WHATIF_LEGEND)


SCHEDULE_COLOURS = {"GPipe": "#3B7DD8", "1F1B": "#3FA672", "Interleaved1F1B": "#D9822B", "LoopedBFS": "#8E5CC4"}


def _replay_hover(rows: pd.DataFrame) -> list[str]:
    return (rows["schedule"] + ", " + rows["micro_batches"].astype(int).astype(str) + " micro-batches<br>"
            + rows["step_ms"].map("{:,.1f} ms a step".format) + " (" + rows["low_ms"].map("{:,.1f}".format) + " to "
            + rows["high_ms"].map("{:,.1f}".format) + ")<br>"
            + rows["ms_per_micro_batch"].map("{:,.2f} ms a micro-batch".format)
            + ", " + rows["gain_pct"].map("{:+.1f}% throughput".format)).tolist()


def replay_per_micro_batch(rows: pd.DataFrame, recorded: tuple[str, int]) -> go.Figure:
    """An imported pipeline's search (``analysis.whatif.search``): time per micro-batch against the
    micro-batches of a step, a line per schedule with each point's range (``customdata``: its row); the run
    as recorded ringed by a star."""
    if not len(rows):
        return empty("No schedule these stages allow could be re-timed.")
    fig = go.Figure()
    for schedule, part in rows.sort_values("micro_batches").groupby("schedule", sort=False):
        per = part["micro_batches"].astype(float)
        fig.add_trace(go.Scatter(
            x=part["micro_batches"], y=part["ms_per_micro_batch"], mode="lines+markers", name=schedule,
            customdata=part.index.tolist(), hovertext=_replay_hover(part), hoverinfo="text",
            error_y=dict(type="data", symmetric=False, array=part["high_ms"] / per - part["ms_per_micro_batch"],
                         arrayminus=part["ms_per_micro_batch"] - part["low_ms"] / per, thickness=1),
            marker=dict(size=9, color=SCHEDULE_COLOURS.get(str(schedule), FITS_COLOUR)),
            line=dict(color=SCHEDULE_COLOURS.get(str(schedule), FITS_COLOUR))))
    start = rows[(rows["schedule"] == recorded[0]) & (rows["micro_batches"] == recorded[1])]
    if len(start):
        fig.add_trace(go.Scatter(
            x=start["micro_batches"], y=start["ms_per_micro_batch"], mode="markers", name="as recorded, re-timed",
            customdata=start.index.tolist(), hovertext=_replay_hover(start), hoverinfo="text",
            marker=dict(symbol="star", size=18, color="rgba(0,0,0,0)", line=dict(color=START_COLOUR, width=2))))
    return styled(fig, height=440, xaxis_title="micro-batches per step", yaxis_title="ms per micro-batch",
                  clickmode="event", **WHATIF_LEGEND)


def replay_bubble(rows: pd.DataFrame) -> go.Figure:
    """The bubble each candidate leaves against micro-batches, a line per schedule."""
    if not len(rows):
        return empty("No schedule these stages allow could be re-timed.")
    fig = go.Figure()
    for schedule, part in rows.sort_values("micro_batches").groupby("schedule", sort=False):
        fig.add_trace(go.Scatter(
            x=part["micro_batches"], y=part["bubble_pct"], mode="lines+markers", name=schedule,
            customdata=part.index.tolist(), hovertext=_replay_hover(part), hoverinfo="text",
            marker=dict(size=8, color=SCHEDULE_COLOURS.get(str(schedule), FITS_COLOUR)),
            line=dict(color=SCHEDULE_COLOURS.get(str(schedule), FITS_COLOUR))))
    return styled(fig, height=440, xaxis_title="micro-batches per step", yaxis_title="bubble (% of the ranks' time)",
                  clickmode="event", **WHATIF_LEGEND)
