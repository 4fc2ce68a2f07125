"""The Operations page's figure: one iteration of the execution trace with the selection's executions marked."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboards.figures.style import IPUS, Naming
from dashboards.figures.trace import trace_timeline

MARK_COLOUR = "#111111"
MAX_MARKS = 5000  # executions marked at most (an op of a 50M-row run: a few hundred an iteration)


def window_trace(frame: pd.DataFrame, level: str, window: tuple[int, int], ipus: Sequence[int],
                 naming: Naming = IPUS) -> go.Figure:
    """The execution trace's BSP timeline of the window (``figures.trace.trace_timeline`` of ``frame``, a
    ``trace.timeline`` frame), its legend below: the figure the marks are drawn over."""
    return below(trace_timeline(frame, level, window, ipus, naming))


def below(fig: go.Figure) -> go.Figure:
    """``fig`` with its legend below it, where the marks' entry shows."""
    fig.update_layout(legend=dict(orientation="h", y=-0.35), margin=dict(l=80, r=20, t=40, b=80))
    return fig


def marks_trace(marks: pd.DataFrame, label: str, naming: Naming = IPUS, rows: int | None = None) -> go.Bar:
    """Each of ``marks`` (``[ipu, start_cycle, end_cycle]``: the selection's executions) as a dark stripe
    through its IPU's row of ``window_trace``, or with ``rows`` (how many) of the heat map of many IPUs, whose
    rows are named by the IPUs' labels too (``ranks.share_heatmap``)."""
    shown = marks.head(MAX_MARKS)
    width = (shown["end_cycle"] - shown["start_cycle"]).to_numpy()
    return go.Bar(
        y=shown["ipu"].map(naming.label), x=naming.x_of(np.maximum(width, 1)), base=naming.x_of(shown["start_cycle"]),
        orientation="h",
        # a heat map's row is a pixel or less: a mark as tall as a 150th of the rows, to be seen
        width=0.3 if rows is None else max(0.8, rows / 150), name=label,
        marker=dict(color=MARK_COLOUR, line=dict(width=0)),
        customdata=np.stack([shown["start_cycle"], shown["end_cycle"]], axis=-1) if len(shown) else None,
        hovertemplate="%{y} " + label + "<br>" + naming.unit + " %{customdata[0]:,} – %{customdata[1]:,}"
                      "<extra></extra>",
    )


def marked(base: dict, marks: go.Bar) -> dict:
    """``base`` (``window_trace(...).to_dict()``, built once per profile) with ``marks`` drawn over it, as a
    figure dict: the window's thousands of bars are not validated again on every click."""
    return {"data": [*base["data"], marks.to_plotly_json()], "layout": base["layout"]}
