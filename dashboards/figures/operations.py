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


def marked_trace(frame: pd.DataFrame, level: str, window: tuple[int, int], ipus: Sequence[int], marks: pd.DataFrame,
                 label: str, naming: Naming = IPUS) -> go.Figure:
    """The execution trace's BSP timeline (``figures.trace.trace_timeline`` of ``frame``, a
    ``trace.timeline`` frame of the window) with each of ``marks`` (``[ipu, start_cycle, end_cycle]``:
    the selection's executions) drawn over it as a dark stripe through its IPU's row."""
    fig = trace_timeline(frame, level, window, ipus, naming)
    shown = marks.head(MAX_MARKS)
    width = (shown["end_cycle"] - shown["start_cycle"]).to_numpy()
    fig.add_trace(go.Bar(
        y=shown["ipu"].map(naming.label), x=np.maximum(width, 1), base=shown["start_cycle"], orientation="h",
        width=0.3, name=label, marker=dict(color=MARK_COLOUR, line=dict(width=0)),
        customdata=np.stack([shown["start_cycle"], shown["end_cycle"]], axis=-1) if len(shown) else None,
        hovertemplate="%{y} " + label + "<br>" + naming.unit
        + " %{customdata[0]:,} – %{customdata[1]:,}<extra></extra>",
    ))
    fig.update_layout(legend=dict(orientation="h", y=-0.25))
    return fig
