"""The Liveness page's figure: memory over program steps per IPU, and the marker of the chosen step."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.figures.style import CAPACITY_COLOUR, IPUS, Naming, byte_unit, empty, peaks_of_runs, styled
from popvision_py.analysis.common.spread import outlier_ranks


def liveness_steps(by_step: pd.DataFrame, bytes_per_tile: int, selected: tuple[int, int] | None = None,
                   naming: Naming = IPUS, capacity: bool = True) -> go.Figure:
    """Memory over program steps per IPU (``liveness.by_step()``).

    Top: not-always-live bytes per IPU, on top of which the always-live bytes sit. Bottom: the
    worst tile's bytes against the tile capacity, where out-of-memory shows first.
    ``selected`` is an (ipu, step) to mark. An imported trace's rank is its one "tile": the top is
    what it allocated beyond its weights, the bottom all it allocated, against the device's memory
    when the trace gives it (``capacity``); a step is a row of the rank's time line.
    """
    if by_step.empty:
        return empty("No liveness recorded.")
    by_step, width = by_runs(by_step, selected)
    titles = (("activations per rank (allocated beyond the weights)", "allocated per rank"
               + (", against the device's memory" if capacity else "")) if naming.imported
              else ("not-always-live memory per IPU", "worst tile, against tile capacity"))
    if width > 1:  # said on the figure: a point is a run's peak, not a step
        titles = tuple(f"{t} · each point the most of {width:,} steps" for t in titles)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.55, 0.45],
                        subplot_titles=titles)
    top_scale, top_unit = byte_unit(float(by_step["not_always_live_bytes"].max()))
    # the bottom panel: a tile's KiB, or what a whole rank allocated in its own unit
    low_scale, low_unit = byte_unit(float(by_step["worst_tile_bytes"].max())) if naming.imported else (1024.0, "KiB")
    what = "activations" if naming.imported else "not always-live"
    where = "allocated" if naming.imported else "tile %{customdata[1]}"
    palette = ["#3B7DD8", "#F2A33A", "#3FA672", "#8E6BBF", "#D64545", "#17becf", "#8c564b", "#e377c2"]
    for index, (ipu, part) in enumerate(by_step.groupby("ipu", sort=True)):
        colour = palette[index % len(palette)]
        names = part["name"].astype(str).to_numpy()
        fig.add_trace(go.Scatter(x=part["step"], y=part["not_always_live_bytes"] / top_scale, mode="lines",
                                   name=naming.label(ipu), line=dict(color=colour, width=1.6), legendgroup=str(ipu),
                                   # lists, not arrays: clickData carries only plain custom data
                                   customdata=np.stack([np.full(len(part), ipu), names], axis=-1).tolist(),
                                   hovertemplate="step %{x} (%{customdata[1]})<br>%{y:,.2f} " + top_unit
                                                 + f" {what}<extra>%{{fullData.name}}</extra>"),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=part["step"], y=part["worst_tile_bytes"] / low_scale, mode="lines",
                                   name=naming.label(ipu), line=dict(color=colour, width=1.2), legendgroup=str(ipu),
                                   showlegend=False,
                                   customdata=np.stack([np.full(len(part), ipu), part["worst_tile"].to_numpy()],
                                                       axis=-1).tolist(),
                                   hovertemplate="step %{x}: " + where + "<br>%{y:,.1f} " + low_unit
                                                 + "<extra>%{fullData.name}</extra>"),
                      row=2, col=1)
    # A trace rather than a shape: the chosen step's marker replaces the layout's shapes.
    _finish_panels(fig, by_step, capacity, bytes_per_tile, (low_scale, low_unit), top_unit, selected, naming)
    return styled(fig, height=520, hovermode="closest", clickmode="event", uirevision="liveness")


NO_IPU = -1  # the custom data of the band's points: a click there chooses a step, not an IPU


def by_runs(by_step: pd.DataFrame, selected: tuple[int, int] | None = None) -> tuple[pd.DataFrame, int]:
    """``by_step`` as ``liveness_steps`` draws it, and the steps a point stands for: where an IPU has more than
    ``style.MAX_STEPS`` steps, each run of its steps by its row of most not-always-live bytes and its row of most
    worst-tile bytes, the peaks a figure must not lose, and the ``selected`` step's row. A 10 GB import's 835k
    steps were 74 MB of figure and 20 s of the browser's drawing."""
    keep = ((by_step["ipu"] == selected[0]) & (by_step["step"] == selected[1])).to_numpy() if selected else None
    return peaks_of_runs(by_step, "ipu", ("not_always_live_bytes", "worst_tile_bytes"), keep)


def liveness_band(by_step: pd.DataFrame, bytes_per_tile: int, selected: tuple[int, int] | None = None,
                  naming: Naming = IPUS, capacity: bool = True, drawn: int = 3) -> go.Figure:
    """``liveness_steps`` past ``MANY_RANKS`` IPUs (or ranks): at each step the least, median and most over the
    IPUs as a band, and as lines the ``drawn`` IPUs furthest past the median at their peak (in each panel's
    figure: not-always-live bytes, then the worst tile's) and the ``selected`` one; a line an IPU with a legend
    entry each would be thousands of them."""
    if by_step.empty:
        return empty("No liveness recorded.")
    ipus = by_step["ipu"].nunique()
    titles = ((f"activations over {ipus:,} ranks (allocated beyond the weights)",
               f"allocated over {ipus:,} ranks" + (", against the device's memory" if capacity else ""))
              if naming.imported else (f"not-always-live memory over {ipus:,} IPUs",
                                       f"worst tile over {ipus:,} IPUs, against tile capacity"))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.55, 0.45],
                        subplot_titles=titles)
    panels = ((1, "not_always_live_bytes", byte_unit(float(by_step["not_always_live_bytes"].max()))),
              (2, "worst_tile_bytes", byte_unit(float(by_step["worst_tile_bytes"].max())) if naming.imported
               else (1024.0, "KiB")))
    peaks = by_step.groupby("ipu")[["not_always_live_bytes", "worst_tile_bytes"]].max()
    named = list(dict.fromkeys(
        [int(i) for column in ("not_always_live_bytes", "worst_tile_bytes")
         for i in outlier_ranks(peaks.index.to_numpy(), {column: peaks[column].to_numpy(np.float64)}, drawn)]))
    chosen = [selected[0]] if selected is not None and selected[0] not in named else []
    palette = ["#D64545", "#F2A33A", "#8E6BBF", "#3FA672", "#17becf", "#8c564b", "#e377c2"]
    what = "activations" if naming.imported else "not always-live"
    for row, column, (scale, unit) in panels:
        band = by_step.groupby("step")[column].agg(["min", "median", "max"]) / scale
        steps = band.index.to_numpy()
        nobody = np.full((len(steps), 1), NO_IPU).tolist()
        fig.add_trace(go.Scatter(x=steps, y=band["max"], mode="lines", line=dict(width=0, color="#9CC3F5"),
                                 name="most", legendgroup="band", showlegend=False, customdata=nobody,
                                 hovertemplate="step %{x}: most %{y:,.2f} " + unit + "<extra></extra>"),
                      row=row, col=1)
        fig.add_trace(go.Scatter(x=steps, y=band["min"], mode="lines", line=dict(width=0, color="#9CC3F5"),
                                 fill="tonexty", fillcolor="rgba(59,125,216,0.25)", legendgroup="band",
                                 customdata=nobody,
                                 name=f"least to most of the {ipus:,} {naming.device}s", showlegend=row == 1,
                                 hovertemplate="step %{x}: least %{y:,.2f} " + unit + "<extra></extra>"),
                      row=row, col=1)
        fig.add_trace(go.Scatter(x=steps, y=band["median"], mode="lines", line=dict(color="#3B7DD8", width=1.6),
                                 name="median", legendgroup="median", showlegend=row == 1, customdata=nobody,
                                 hovertemplate="step %{x}: median %{y:,.2f} " + unit + "<extra></extra>"),
                      row=row, col=1)
        for index, ipu in enumerate(named + chosen):
            part = by_step[by_step["ipu"] == ipu]
            label = naming.label(ipu) + ("" if ipu in named else " (chosen)")
            fig.add_trace(go.Scatter(
                x=part["step"], y=part[column] / scale, mode="lines", name=label, legendgroup=str(ipu),
                showlegend=row == 1, line=dict(color=palette[index % len(palette)] if ipu in named else "#ff2d95",
                                               width=1.4, dash=None if ipu in named else "dot"),
                customdata=np.stack([np.full(len(part), ipu), part["name"].astype(str).to_numpy()], axis=-1).tolist(),
                hovertemplate="step %{x} (%{customdata[1]})<br>%{y:,.2f} " + unit
                              + (f" {what}" if row == 1 else "") + "<extra>%{fullData.name}</extra>"),
                row=row, col=1)
    low_scale, low_unit = panels[1][2]
    _finish_panels(fig, by_step, capacity, bytes_per_tile, (low_scale, low_unit), panels[0][2][1], selected, naming)
    # the legend above the top panel's title, not over it
    return styled(fig, height=540, hovermode="closest", clickmode="event", uirevision="liveness",
                  legend=dict(y=1.13), margin=dict(t=90), meta={"level": "band", "rows": ipus, "named": named})


def step_marker(step: int) -> dict:
    """The vertical line marking the chosen program step on the liveness plot (both panels)."""
    return dict(type="line", x0=step, x1=step, xref="x", y0=0, y1=1, yref="paper",
                line=dict(color="#ff2d95", width=2))


def _finish_panels(fig: go.Figure, by_step: pd.DataFrame, capacity: bool, bytes_per_tile: int,
                   low: tuple[float, str], top_unit: str, selected: tuple | None, naming: Naming) -> None:
    """The two panels' capacity line (the lower one's), the chosen step's marker and the axes' titles."""
    low_scale, low_unit = low
    steps = (int(by_step["step"].min()), int(by_step["step"].max()))
    if capacity:
        limit = "device memory" if naming.imported else "tile capacity"
        fig.add_trace(go.Scatter(x=list(steps), y=[bytes_per_tile / low_scale] * 2, mode="lines", name=limit,
                                 line=dict(color=CAPACITY_COLOUR, dash="dash", width=1.5),
                                 hovertemplate=limit + " %{y:,.0f} " + low_unit + "<extra></extra>"), row=2, col=1)
    if selected is not None:
        fig.add_shape(step_marker(selected[1]))
    fig.update_yaxes(title=top_unit, row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title=low_unit, row=2, col=1, rangemode="tozero")
    fig.update_xaxes(title="step (a row of the rank's time line)" if naming.imported else "program step", row=2, col=1)
