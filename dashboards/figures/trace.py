"""The Trace page's figures: the BSP timeline and one compute set's cycles per tile."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboards.figures.style import CAPACITY_COLOUR, IPUS, PHASE_COLOURS, Naming, empty, styled
from popvision_py.format.schema import PHASES


def timeline_bars(frame: pd.DataFrame) -> pd.DataFrame:
    """Where each row of a ``trace.timeline`` frame is drawn: ``base`` and ``width`` in cycles.

    Events are drawn where they ran. In a binned frame the phases of one (IPU, bin) are laid
    side by side inside the bin, in phase order, each as wide as its cycles in that bin: the same
    shares the bin holds, so nothing is drawn that the analysis did not say.
    """
    out = frame[["ipu", "start_cycle", "end_cycle", "phase", "cycles", "events"]].copy()
    out["phase"] = out["phase"].astype(str)
    if out.empty:
        out["base"] = out["width"] = []
        return out
    rank = {phase: index for index, phase in enumerate(PHASES)}
    out["_rank"] = out["phase"].map(rank).fillna(len(rank))
    out = out.sort_values(["ipu", "start_cycle", "_rank"], kind="stable")
    offset = out.groupby(["ipu", "start_cycle"], sort=False)["cycles"].cumsum() - out["cycles"]
    out["base"] = out["start_cycle"] + offset
    out["width"] = out["cycles"]
    return out.drop(columns="_rank").reset_index(drop=True)


def trace_timeline(frame: pd.DataFrame, level: str, window: tuple[int, int], ipus: Sequence[int],
                   naming: Naming = IPUS) -> go.Figure:
    """The BSP timeline: one row per IPU, one bar trace per phase (bars placed by base and width).

    ``frame``: ``trace.timeline(...).frame``; ``window``: the (start, end) cycles shown. At most
    ``max_bins × phases`` bars per IPU, drawn by five traces, whatever the trace's length. An imported
    trace: one row per rank, its compute, exposed communication and idle, in ns.
    """
    bars = timeline_bars(frame)
    labels = [naming.label(ipu) for ipu in sorted(ipus)]
    unit = naming.unit
    fig = go.Figure()
    for phase in naming.phases:
        part = bars[bars["phase"] == phase]
        name = naming.phase(phase)
        fig.add_trace(
            go.Bar(
                y=part["ipu"].map(naming.label),
                x=part["width"],
                base=part["base"],
                orientation="h",
                name=name,
                marker=dict(color=PHASE_COLOURS[phase], line=dict(width=0)),
                customdata=np.stack([part["start_cycle"], part["end_cycle"], part["cycles"], part["events"]], axis=-1)
                if len(part) else None,
                hovertemplate=(
                    "%{y} " + name + "<br>" + unit + " %{customdata[0]:,} – %{customdata[1]:,}"
                    "<br>" + name + " %{customdata[2]:,} " + unit + " in %{customdata[3]:,} event(s)<extra></extra>"
                ),
                showlegend=True,
            )
        )
    fig.update_yaxes(categoryorder="array", categoryarray=labels[::-1], fixedrange=True)
    fig.update_xaxes(range=list(window), title=unit, showgrid=True)
    return styled(
        fig,
        height=max(260, 110 + 55 * len(labels)),
        barmode="overlay",
        bargap=0.25,
        uirevision="trace",
        dragmode="zoom",
        meta={"level": level},
        margin=dict(l=80, r=20, t=40, b=45),
    )


def tile_cycles(frame: pd.DataFrame, title: str = "") -> go.Figure:
    """Cycles per tile of one compute set (``trace.tile_cycles``): the BSP step lasts as long as the slowest."""
    if frame.empty:
        return empty("This step has no per-tile cycles (it is not a compute set).", height=300)
    slowest = float(frame["cycles"].max())
    fig = go.Figure(go.Bar(x=frame["tile"], y=frame["cycles"], marker=dict(color=PHASE_COLOURS["compute"], line=dict(width=0)),
                           hovertemplate="tile %{x}: %{y:,} cycles<extra></extra>", name="tile cycles"))
    fig.add_hline(y=slowest, line=dict(color=CAPACITY_COLOUR, dash="dash"),
                  annotation_text=f"slowest tile: {slowest:,.0f} cycles (the step's length)", annotation_position="top left")
    fig.update_xaxes(title="tile")
    fig.update_yaxes(title="cycles", rangemode="tozero")
    return styled(fig, title=title or None, height=300, bargap=0, showlegend=False)
