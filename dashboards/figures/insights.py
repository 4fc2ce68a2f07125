"""The Summary page's tile insights (``report.insights``): memory over tiles as the report bins it,
with the tile memory line. The bins are the analysis's (``analysis.insights.histogram``), so the
figure and ``popvision report`` show the same counts."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dashboards.figures.memory import tile_memory_axis
from dashboards.figures.style import OOM_COLOUR, PHASE_COLOURS, empty, styled


def memory_histogram(bins: pd.DataFrame, bytes_per_tile: int) -> go.Figure:
    """Tiles per bin of peak bytes (``HISTOGRAM_COLUMNS``), bins above the tile memory in the
    out-of-memory colour, and the tile memory as a dashed line where it is on the scale."""
    if bins.empty or int(bins["tiles"].sum()) == 0:
        return empty("No tiles.")
    low, high = bins["low_bytes"] / 1024, bins["high_bytes"] / 1024
    over = bins["low_bytes"] >= bytes_per_tile
    fig = go.Figure(go.Bar(
        x=(low + high) / 2, y=bins["tiles"], width=high - low, name="tiles",
        marker=dict(color=[OOM_COLOUR if o else PHASE_COLOURS["compute"] for o in over], line=dict(width=0)),
        customdata=list(zip(low, high, bins["tiles_pct"])),
        hovertemplate="%{customdata[0]:,.0f} to %{customdata[1]:,.0f} KiB: %{y:,} tiles "
                      "(%{customdata[2]:.1f}%)<extra></extra>"))
    # the line only where it shares the scale with the bars
    tile_memory_axis(fig, float(bins["high_bytes"].max()) >= bytes_per_tile / 2, bytes_per_tile, "tile memory")
    return styled(fig, height=300, showlegend=False, bargap=0)
