"""The Liveness page's figure: memory over program steps per IPU, and the marker of the chosen step."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.figures.style import CAPACITY_COLOUR, byte_unit, empty, ipu_label, styled


def liveness_steps(by_step: pd.DataFrame, bytes_per_tile: int, selected: tuple[int, int] | None = None) -> go.Figure:
    """Memory over program steps per IPU (``liveness.by_step()``).

    Top: not-always-live bytes per IPU, on top of which the always-live bytes sit. Bottom: the
    worst tile's bytes against the tile capacity, where out-of-memory shows first.
    ``selected`` is an (ipu, step) to mark.
    """
    if by_step.empty:
        return empty("No liveness recorded.")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.55, 0.45],
                        subplot_titles=("not-always-live memory per IPU", "worst tile, against tile capacity"))
    top_scale, top_unit = byte_unit(float(by_step["not_always_live_bytes"].max()))
    palette = ["#3B7DD8", "#F2A33A", "#3FA672", "#8E6BBF", "#D64545", "#17becf", "#8c564b", "#e377c2"]
    for index, (ipu, part) in enumerate(by_step.groupby("ipu", sort=True)):
        colour = palette[index % len(palette)]
        names = part["name"].astype(str).to_numpy()
        fig.add_trace(go.Scatter(x=part["step"], y=part["not_always_live_bytes"] / top_scale, mode="lines",
                                   name=ipu_label(ipu), line=dict(color=colour, width=1.6), legendgroup=str(ipu),
                                   # lists, not arrays: clickData carries only plain custom data
                                   customdata=np.stack([np.full(len(part), ipu), names], axis=-1).tolist(),
                                   hovertemplate="step %{x} (%{customdata[1]})<br>%{y:,.2f} " + top_unit
                                                 + " not always-live<extra>%{fullData.name}</extra>"),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=part["step"], y=part["worst_tile_bytes"] / 1024, mode="lines",
                                   name=ipu_label(ipu), line=dict(color=colour, width=1.2), legendgroup=str(ipu),
                                   showlegend=False,
                                   customdata=np.stack([np.full(len(part), ipu), part["worst_tile"].to_numpy()], axis=-1).tolist(),
                                   hovertemplate="step %{x}: tile %{customdata[1]}<br>%{y:,.1f} KiB<extra>%{fullData.name}</extra>"),
                      row=2, col=1)
    # A trace rather than a shape: the chosen step's marker replaces the layout's shapes.
    steps = (int(by_step["step"].min()), int(by_step["step"].max()))
    fig.add_trace(go.Scatter(x=list(steps), y=[bytes_per_tile / 1024] * 2, mode="lines", name="tile capacity",
                             line=dict(color=CAPACITY_COLOUR, dash="dash", width=1.5),
                             hovertemplate="tile capacity %{y:,.0f} KiB<extra></extra>"), row=2, col=1)
    if selected is not None:
        fig.add_shape(step_marker(selected[1]))
    fig.update_yaxes(title=top_unit, row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title="KiB", row=2, col=1, rangemode="tozero")
    fig.update_xaxes(title="program step", row=2, col=1)
    return styled(fig, height=520, hovermode="closest", clickmode="event", uirevision="liveness")


def step_marker(step: int) -> dict:
    """The vertical line marking the chosen program step on the liveness plot (both panels)."""
    return dict(type="line", x0=step, x1=step, xref="x", y0=0, y1=1, yref="paper",
                line=dict(color="#ff2d95", width=2))
