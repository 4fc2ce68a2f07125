"""The Exchange page's figures (and the Summary page's time by phase): the source to destination
matrix, bytes and cycles by kind, and the run's time by phase."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.figures.style import (PHASE_COLOURS, SHORT_BYTE_UNITS, byte_ticks, empty, ipu_label, styled,
                                      with_unit)
from popvision_py.format.schema import PHASES


def exchange_matrix(matrix: pd.DataFrame, value: str = "bytes") -> go.Figure:
    """Bytes (or cycles) moved from each source to each destination (``exchange.matrix()``)."""
    if matrix.empty:
        return empty("No exchanges between IPUs.")
    endpoints = sorted(set(matrix["src_ipu"]) | set(matrix["dst_ipu"]), key=lambda i: (i < 0, abs(i)))
    grid = matrix.pivot_table(index="dst_ipu", columns="src_ipu", values=value, aggfunc="sum")
    grid = grid.reindex(index=endpoints, columns=endpoints)
    labels = [ipu_label(i) for i in endpoints]
    text = grid.map(lambda v: "" if pd.isna(v) or v == 0 else (short_bytes(v) if value == "bytes" else f"{v:,.0f}"))
    fig = go.Figure(go.Heatmap(z=grid.to_numpy(dtype=float), x=labels, y=labels, colorscale="Blues", zmin=0,
                               text=text.to_numpy(), texttemplate="%{text}", hoverongaps=False,
                               colorbar=dict(title=dict(text=value, side="right"), thickness=12,
                                             **(byte_ticks(float(np.nanmax(grid.to_numpy(dtype=float))))
                                                if value == "bytes" else {})),
                               hovertemplate="%{x} → %{y}<br>%{z:,.0f} " + value + "<extra></extra>"))
    fig.update_xaxes(title="source", side="bottom")
    fig.update_yaxes(title="destination", autorange="reversed")
    return styled(fig, height=max(300, 120 + 45 * len(labels)))


def short_bytes(value: float) -> str:
    """A matrix cell's bytes, one decimal: '1.5 KiB'."""
    return with_unit(value, SHORT_BYTE_UNITS)


def exchange_by_kind(by_kind: pd.DataFrame) -> go.Figure:
    """Bytes and cycles by kind of exchange (``exchange.by_kind()``), side by side."""
    if by_kind.empty:
        return empty("No exchanges.")
    frame = by_kind.copy()
    frame["kind"] = frame["kind"].astype(str).str.replace("_", " ")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("bytes", "cycles"), horizontal_spacing=0.12)
    fig.add_trace(go.Bar(x=frame["kind"], y=frame["bytes"], marker_color="#3B7DD8", name="bytes",
                         hovertemplate="%{x}: %{y:,} bytes<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Bar(x=frame["kind"], y=frame["cycles"], marker_color=PHASE_COLOURS["exchange"], name="cycles",
                         customdata=frame["time_pct"],
                         hovertemplate="%{x}: %{y:,} cycles (%{customdata:.1f} % of the time)<extra></extra>"),
                  row=1, col=2)
    fig.update_yaxes(row=1, col=1, **byte_ticks(float(frame["bytes"].max())))
    return styled(fig, height=320, showlegend=False)


def phase_shares(shares: Mapping[str, float], title: str | None = None) -> go.Figure:
    """One stacked bar of the run's time by phase (percentages from ``exchange.figures()``)."""
    fig = go.Figure()
    for phase in PHASES:
        pct = float(shares.get(phase, 0.0) or 0.0)
        fig.add_trace(go.Bar(y=[""], x=[pct], orientation="h", name=f"{phase} {pct:.1f} %",
                             marker_color=PHASE_COLOURS[phase],
                             hovertemplate=f"{phase}: {pct:.1f} % of IPU time<extra></extra>"))
    fig.update_xaxes(range=[0, 100], title="% of IPU time", ticksuffix=" %")
    fig.update_yaxes(visible=False)
    return styled(fig, title=title, barmode="stack", height=170 if not title else 190,
                  margin=dict(l=20, r=20, t=60 if title else 30, b=40),
                  legend=dict(orientation="h", yanchor="bottom", y=1.05, x=0))
