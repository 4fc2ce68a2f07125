"""The Compare page's figures: one quantity of two profiles side by side, and each one's time by phase."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

import pandas as pd
import plotly.graph_objects as go

from dashboards.figures.style import IPUS, PHASE_COLOURS, PROFILE_COLOURS, Naming, styled

LEGEND_CHARS = 48  # a legend entry's line at most, in a half-page panel at 1,280 px


def side_by_side_bars(frames: Mapping[str, pd.DataFrame], x: str, y: str, title: str, y_title: str,
                      labels: Mapping[str, str] | None = None) -> go.Figure:
    """The same quantity from two profiles as grouped bars: ``frames`` maps 'a'/'b' to a frame."""
    fig = go.Figure()
    for key, frame in frames.items():
        # a profile's label wrapped: two long ones overran a half-page panel's right edge, an entry being one line
        name = "<br>".join(textwrap.wrap((labels or {}).get(key, key.upper()), LEGEND_CHARS))
        fig.add_trace(go.Bar(x=frame[x], y=frame[y], name=name,
                             marker_color=PROFILE_COLOURS.get(key, "#999")))
    fig.update_yaxes(title=y_title)
    return styled(fig, title=title or None, barmode="group", height=320)


def compare_phase_shares(shares: Mapping[str, Mapping[str, float]], labels: Mapping[str, str],
                         naming: Naming = IPUS) -> go.Figure:
    """Each profile's time by phase as one stacked bar per profile (``naming``: two imported traces' phases)."""
    fig = go.Figure()
    keys = list(shares)
    for phase in naming.phases:
        name = naming.phase(phase)
        fig.add_trace(go.Bar(y=[labels.get(k, k) for k in keys], x=[float(shares[k].get(phase, 0) or 0) for k in keys],
                             orientation="h", name=name, marker_color=PHASE_COLOURS[phase],
                             hovertemplate="%{y}<br>" + name + ": %{x:.1f} %<extra></extra>"))
    fig.update_xaxes(range=[0, 100], ticksuffix=" %", title=f"% of {naming.time}")
    fig.update_yaxes(autorange="reversed", automargin=True)
    return styled(fig, barmode="stack", height=220, margin=dict(l=20, r=20, t=40, b=40))
