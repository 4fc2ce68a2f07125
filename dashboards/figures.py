"""Pure figure builders: the analysis library's DataFrames in, plotly figures out.

Nothing here reads a profile or computes a figure the analysis does not: the builders only lay out
what they are given (positions of tiles on a grid, the order of stacked segments, labels).
Tests call them directly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from popvision_py.format.schema import MEMORY_CATEGORIES, PHASES

# Colours: one meaning per colour across every page.
PHASE_COLOURS: dict[str, str] = {
    "compute": "#3B7DD8",
    "sync": "#D64545",
    "exchange": "#F2A33A",
    "stream": "#3FA672",
    "idle": "#D5D9E0",
}
PASS_COLOURS: dict[str, str] = {
    "forward": "#3B7DD8",
    "backward": "#F2A33A",
    "update": "#8E6BBF",
    "none": "#A0A7B4",
}
_CATEGORY_PALETTE = [
    "#1f77b4", "#aec7e8", "#9467bd", "#c5b0d5", "#7f7f7f", "#2ca02c",
    "#98df8a", "#bcbd22", "#ff7f0e", "#ffbb78", "#17becf", "#8c564b",
]
CATEGORY_COLOURS: dict[str, str] = dict(zip(MEMORY_CATEGORIES, _CATEGORY_PALETTE))
PROFILE_COLOURS = {"a": "#3B7DD8", "b": "#F2A33A"}
OOM_COLOUR = "#D64545"
CAPACITY_COLOUR = "#D64545"
TILE_MAP_COLUMNS = 64  # at most; an IPU of 1,472 tiles is 23 rows of 64
FONT = "Inter, 'Segoe UI', system-ui, -apple-system, sans-serif"

_BASE_LAYOUT = dict(
    template="plotly_white",
    font=dict(family=FONT, size=12, color="#1f2933"),
    margin=dict(l=60, r=20, t=40, b=45),
    legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
    hoverlabel=dict(font=dict(family=FONT)),
)


def _style(fig: go.Figure, title: str | None = None, height: int | None = None, **layout: object) -> go.Figure:
    fig.update_layout(**_BASE_LAYOUT)
    if title:
        fig.update_layout(title=dict(text=title, x=0, xanchor="left", font=dict(size=14)))
    if height:
        fig.update_layout(height=height)
    fig.update_layout(**layout)
    return fig


def empty(message: str, height: int = 260) -> go.Figure:
    """A blank figure that says why there is nothing to draw."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=14, color="#6b7280"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _style(fig, height=height)


def ipu_label(ipu: int) -> str:
    """IPU -1 is the host and -2 streaming memory (the exchange tables' convention)."""
    return {-1: "host", -2: "streaming memory"}.get(int(ipu), f"IPU {int(ipu)}")


# Units of the shown numbers as (starts at, scale, suffix, decimals), smallest first; decimals None shows
# whole numbers whole and others with 2 decimals. Counts stay whole below 10,000 ("9,999", not "10.0 k").
COUNT_UNITS = ((0.0, 1.0, "", None), (1e4, 1e3, " k", 1), (1e6, 1e6, " M", 1), (1e9, 1e9, " G", 1),
               (1e12, 1e12, " T", 1))
BYTE_UNITS = ((0.0, 1.0, " B", 0),) + tuple((1024.0**p, 1024.0**p, f" {u}", 2) for p, u in enumerate(("KiB", "MiB", "GiB", "TiB"), 1))
SHORT_BYTE_UNITS = tuple((start, scale, suffix, min(decimals, 1)) for start, scale, suffix, decimals in BYTE_UNITS)
# In nanoseconds, so that every scale is exact in binary floating point (1e-3 is not).
NANOSECOND_UNITS = ((0.0, 1.0, " ns", 0), (1e3, 1e3, " µs", 2), (1e6, 1e6, " ms", 2), (1e9, 1e9, " s", 2))


def with_unit(value: float, units: Sequence[tuple[float, float, str, int | None]]) -> str:
    """``value`` in the largest of ``units`` it reaches, *as rounded for display*: 999,950 counts show as
    '1.0 M', never '1,000.0 k', and 1,048,575 bytes as '1.00 MiB', never '1,024.00 KiB'."""
    magnitude = abs(float(value))
    index = max(sum(magnitude >= start for start, *_ in units) - 1, 0)
    while True:
        _, scale, suffix, decimals = units[index]
        shown = magnitude / scale
        places = decimals if decimals is not None else (0 if float(value).is_integer() else 2)
        # Rounding can carry the figure up to the next unit's start (999.95 k -> 1,000.0 k): move up.
        if index + 1 < len(units) and round(shown, places) >= units[index + 1][0] / scale:
            index += 1
            continue
        if round(shown, places) == 0:
            value = 0.0  # no "-0.00"
        return f"{math.copysign(shown, value):,.{places}f}{suffix}"


def byte_unit(largest: float) -> tuple[float, str]:
    """(divisor, unit) that shows values up to ``largest`` bytes in a readable binary unit."""
    for power, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if largest >= 1024**power:
            return float(1024**power), unit
    return 1.0, "bytes"


def byte_ticks(largest: float, count: int = 5) -> dict:
    """Axis ticks in binary units ('512 MiB', '1.5 GiB') for values from 0 to ``largest`` bytes.

    Plotly's own labels are decimal SI with "B" for billion: 1.5e9 bytes would read "1.5B", which
    looks like 1.5 bytes. The values stay in bytes (hover and data are exact); only the labels change.
    """
    if not largest > 0:
        return {}
    divisor, unit = byte_unit(largest)
    raw_step = float(largest) / divisor / count
    magnitude = 10.0 ** math.floor(math.log10(raw_step))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw_step * (1 - 1e-12))
    step = max(step, 1.0) if divisor == 1 else step  # no fractions of a byte
    decimals = next(d for d in range(0, 12) if abs(round(step, d) - step) < step * 1e-9)
    ticks = np.arange(0, float(largest) / divisor + step, step)
    return dict(tickvals=(ticks * divisor).tolist(), ticktext=[f"{t:,.{decimals}f} {unit}" for t in ticks])


def _category_order(categories: Sequence[str]) -> list[str]:
    known = [c for c in MEMORY_CATEGORIES if c in set(categories)]
    return known + sorted(set(categories) - set(known))


# ----------------------------------------------------------------------------------------- memory

def tile_columns(num_tiles: int) -> int:
    """Tiles per row of the tile map: 64 for a real IPU, fewer (about twice the rows) for small ones."""
    return max(1, min(TILE_MAP_COLUMNS, math.ceil(math.sqrt(3 * num_tiles))))


def tile_grid(num_tiles: int, columns: int | None = None) -> tuple[int, int]:
    """(rows, columns) of the grid the tile map lays ``num_tiles`` tiles on, row by row."""
    columns = max(1, min(columns or tile_columns(num_tiles), num_tiles))
    return math.ceil(num_tiles / columns), columns


def tile_position(tile: int, columns: int) -> tuple[int, int]:
    """(row, column) of a tile on a map of ``columns`` tiles per row."""
    return divmod(int(tile), columns)


def tile_map(
    by_tile: pd.DataFrame,
    tiles_per_ipu: int,
    bytes_per_tile: int,
    selected_tile: int | None = None,
    columns: int | None = None,
) -> go.Figure:
    """Every tile of one IPU as a cell of a heat map of its peak memory; out-of-memory tiles crossed.

    ``by_tile``: ``memory.by_tile(ipu)`` (columns tile, total_bytes, excess_bytes, oom).
    When tiles overflow, the colour scale ends at the tile's capacity (every out-of-memory tile at
    its top); otherwise at the fullest tile, so that the spread shows.
    """
    rows, columns = tile_grid(tiles_per_ipu, columns)
    cells = rows * columns
    total = np.full(cells, np.nan)
    tiles = by_tile["tile"].to_numpy(dtype=np.int64)
    total[tiles] = by_tile["total_bytes"].to_numpy(dtype=float)
    excess = np.zeros(cells)
    excess[tiles] = by_tile["excess_bytes"].to_numpy(dtype=float)
    tile_ids = np.arange(cells, dtype=float)
    tile_ids[tiles_per_ipu:] = np.nan
    z = (total / 1024).reshape(rows, columns)
    custom = np.stack([tile_ids.reshape(rows, columns), (excess / 1024).reshape(rows, columns)], axis=-1)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            customdata=custom,
            zmin=0,
            zmax=(bytes_per_tile if by_tile["oom"].any() or by_tile.empty
                  else max(float(by_tile["total_bytes"].max()), 1.0)) / 1024,
            colorscale="Viridis",
            colorbar=dict(title=dict(text="KiB", side="right"), thickness=12),
            xgap=1,
            ygap=1,
            hovertemplate="tile %{customdata[0]}<br>%{z:,.1f} KiB<br>over by %{customdata[1]:,.1f} KiB<extra></extra>",
            name="tiles",
        )
    )
    oom = by_tile[by_tile["oom"].astype(bool)]
    if len(oom):
        row, col = np.divmod(oom["tile"].to_numpy(dtype=np.int64), columns)
        fig.add_trace(
            go.Scatter(
                x=col,
                y=row,
                mode="markers",
                marker=dict(symbol="x-thin", size=7, line=dict(width=2, color=OOM_COLOUR)),
                customdata=np.stack([oom["tile"].to_numpy(), oom["excess_bytes"].to_numpy() / 1024], axis=-1),
                hovertemplate="tile %{customdata[0]}: out of memory<br>over by %{customdata[1]:,.1f} KiB<extra></extra>",
                name=f"out of memory ({len(oom)})",
            )
        )
    if selected_tile is not None and 0 <= selected_tile < tiles_per_ipu:
        fig.add_shape(tile_highlight(*tile_position(selected_tile, columns)))
    fig.update_xaxes(showgrid=False, zeroline=False, showticklabels=False, title=f"{columns} tiles per row")
    fig.update_yaxes(showgrid=False, zeroline=False, autorange="reversed", showticklabels=False,
                     scaleanchor="x", scaleratio=1, title=None)
    return _style(fig, height=int(min(720, max(260, 90 + rows * 560 / columns))), margin=dict(l=10, r=10, t=30, b=30),
                  legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0), clickmode="event")


def ipu_memory(by_ipu: pd.DataFrame) -> go.Figure:
    """Always-live and not-always-live memory of each IPU against its capacity (``memory.by_ipu()``)."""
    if by_ipu.empty:
        return empty("No memory recorded.")
    labels = by_ipu["ipu"].map(ipu_label)
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=by_ipu["always_live_bytes"] / 2**20, name="always-live", marker_color="#3B7DD8",
                         hovertemplate="%{x}: %{y:,.1f} MiB always-live<extra></extra>"))
    fig.add_trace(go.Bar(x=labels, y=by_ipu["not_always_live_bytes"] / 2**20, name="not always-live",
                         marker_color="#9CC3F5",
                         hovertemplate="%{x}: %{y:,.1f} MiB not always-live<extra></extra>"))
    fig.add_trace(go.Scatter(x=labels, y=by_ipu["capacity_bytes"] / 2**20, mode="markers", name="capacity",
                             marker=dict(symbol="line-ew-open", size=46, color=CAPACITY_COLOUR, line=dict(width=2)),
                             customdata=np.stack([by_ipu["used_pct"], by_ipu["oom_tiles"]], axis=-1),
                             hovertemplate="%{x}: capacity %{y:,.0f} MiB<br>%{customdata[0]:.1f} % used, "
                                           "%{customdata[1]} tiles out of memory<extra></extra>"))
    fig.update_yaxes(title="MiB", rangemode="tozero")
    return _style(fig, barmode="stack", height=300)


def tile_highlight(row: int, col: int) -> dict:
    """The outline marking the selected tile on the tile map."""
    return dict(type="rect", x0=col - 0.5, x1=col + 0.5, y0=row - 0.5, y1=row + 0.5, line=dict(color="#ff2d95", width=3))


def category_stacks(by_category: pd.DataFrame, capacity_by_ipu: Mapping[int, int] | None = None) -> go.Figure:
    """Memory per IPU stacked by category (``memory.by_category()``); always-live hatched apart."""
    if by_category.empty:
        return empty("No memory recorded.")
    frame = by_category.copy()
    frame["ipu_label"] = frame["ipu"].map(ipu_label)
    fig = go.Figure()
    for category in _category_order(frame["category"].astype(str).unique()):
        for always_live in (True, False):
            part = frame[(frame["category"].astype(str) == category) & (frame["always_live"] == always_live)]
            if part.empty or part["bytes"].sum() == 0:
                continue
            fig.add_trace(
                go.Bar(
                    x=part["ipu_label"],
                    y=part["bytes"],
                    name=f"{category}{'' if always_live else ' (not always-live)'}",
                    marker=dict(color=CATEGORY_COLOURS.get(category, "#999"),
                                pattern=dict(shape="" if always_live else "/", fillmode="overlay", size=6)),
                    hovertemplate=f"{category}<br>%{{x}}: %{{y:,.0f}} B<extra>{'always-live' if always_live else 'not always-live'}</extra>",
                    legendgroup=category,
                )
            )
    if capacity_by_ipu:
        labels = [ipu_label(ipu) for ipu in capacity_by_ipu]
        fig.add_trace(go.Scatter(x=labels, y=list(capacity_by_ipu.values()), mode="markers",
                                 marker=dict(symbol="line-ew-open", size=40, color=CAPACITY_COLOUR, line=dict(width=2)),
                                 name="capacity", hovertemplate="capacity %{y:,.0f} B<extra></extra>"))
    largest = max(float(frame.groupby("ipu")["bytes"].sum().max()), max(capacity_by_ipu.values(), default=0)
                  if capacity_by_ipu else 0)
    fig.update_yaxes(title="bytes", **byte_ticks(largest))
    return _style(fig, barmode="stack", height=420, legend=dict(font=dict(size=10), orientation="h", y=-0.12, yanchor="top", x=0),
                  margin=dict(l=60, r=20, t=20, b=40))


def tile_histogram(by_tile: pd.DataFrame, bytes_per_tile: int, bins: int = 60) -> go.Figure:
    """Distribution of tiles' peak memory per IPU; the tile capacity marked when it is on the scale."""
    if by_tile.empty:
        return empty("No tiles.")
    fig = go.Figure()
    fullest = float(by_tile["total_bytes"].max())
    # Up to the capacity only if tiles come near it: else the bars would crowd one corner.
    top = max(fullest, float(bytes_per_tile)) if fullest > bytes_per_tile / 2 else fullest * 1.05
    size = max(top / bins, 1.0)
    for ipu, part in by_tile.groupby("ipu", sort=True):
        fig.add_trace(go.Histogram(x=part["total_bytes"] / 1024, name=ipu_label(ipu), opacity=0.65,
                                   xbins=dict(start=0, end=(top + size) / 1024, size=size / 1024),
                                   hovertemplate="%{x} KiB: %{y} tiles<extra>" + ipu_label(ipu) + "</extra>"))
    if top >= bytes_per_tile:
        fig.add_vline(x=bytes_per_tile / 1024, line=dict(color=CAPACITY_COLOUR, dash="dash"),
                      annotation_text="tile capacity", annotation_position="top left")
        title = "peak memory per tile (KiB)"
    else:
        title = f"peak memory per tile (KiB); tile capacity {bytes_per_tile / 1024:,.0f} KiB is off the scale"
    fig.update_xaxes(title=title, rangemode="tozero")
    fig.update_yaxes(title="tiles")
    return _style(fig, barmode="overlay", height=320)


def tile_breakdown(breakdown: pd.DataFrame, bytes_per_tile: int, title: str = "") -> go.Figure:
    """One tile's memory by category (``memory.tile_breakdown``), always-live and not."""
    if breakdown.empty:
        return empty("Nothing on this tile.", height=300)
    frame = breakdown.copy()
    frame["category"] = frame["category"].astype(str)
    order = _category_order(frame["category"].unique())
    fig = go.Figure()
    for always_live in (True, False):
        part = frame[frame["always_live"] == always_live].set_index("category").reindex(order)
        fig.add_trace(
            go.Bar(
                y=order,
                x=part["bytes"].fillna(0) / 1024,
                orientation="h",
                name="always-live" if always_live else "not always-live",
                marker=dict(color=[CATEGORY_COLOURS.get(c, "#999") for c in order],
                            pattern=dict(shape="" if always_live else "/", fillmode="overlay", size=6)),
                hovertemplate="%{y}: %{x:,.2f} KiB<extra>" + ("always-live" if always_live else "not always-live") + "</extra>",
            )
        )
    total = float(frame["bytes"].sum())
    fig.update_xaxes(title=f"KiB (total {total / 1024:,.1f} of {bytes_per_tile / 1024:,.0f} KiB)")
    fig.update_yaxes(autorange="reversed")
    return _style(fig, title=title or None, barmode="stack", height=max(260, 90 + 24 * len(order)),
                  margin=dict(l=120, r=20, t=50 if title else 30, b=45))


# --------------------------------------------------------------------------------------- liveness

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
    return _style(fig, height=520, hovermode="closest", clickmode="event", uirevision="liveness")


def step_marker(step: int) -> dict:
    """The vertical line marking the chosen program step on the liveness plot (both panels)."""
    return dict(type="line", x0=step, x1=step, xref="x", y0=0, y1=1, yref="paper",
                line=dict(color="#ff2d95", width=2))


# ------------------------------------------------------------------------------------------ trace

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


def trace_timeline(frame: pd.DataFrame, level: str, window: tuple[int, int], ipus: Sequence[int]) -> go.Figure:
    """The BSP timeline: one row per IPU, one bar trace per phase (bars placed by base and width).

    ``frame``: ``trace.timeline(...).frame``; ``window``: the (start, end) cycles shown. At most
    ``max_bins × phases`` bars per IPU, drawn by five traces, whatever the trace's length.
    """
    bars = timeline_bars(frame)
    labels = [ipu_label(ipu) for ipu in sorted(ipus)]
    fig = go.Figure()
    for phase in PHASES:
        part = bars[bars["phase"] == phase]
        fig.add_trace(
            go.Bar(
                y=part["ipu"].map(ipu_label),
                x=part["width"],
                base=part["base"],
                orientation="h",
                name=phase,
                marker=dict(color=PHASE_COLOURS[phase], line=dict(width=0)),
                customdata=np.stack([part["start_cycle"], part["end_cycle"], part["cycles"], part["events"]], axis=-1)
                if len(part) else None,
                hovertemplate=(
                    "%{y} " + phase + "<br>cycles %{customdata[0]:,} – %{customdata[1]:,}"
                    "<br>" + phase + " %{customdata[2]:,} cycles in %{customdata[3]:,} event(s)<extra></extra>"
                ),
                showlegend=True,
            )
        )
    fig.update_yaxes(categoryorder="array", categoryarray=labels[::-1], fixedrange=True)
    fig.update_xaxes(range=list(window), title="cycles", showgrid=True)
    return _style(
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
    return _style(fig, title=title or None, height=300, bargap=0, showlegend=False)


# ----------------------------------------------------------------------------------------- stages

def micro_batch_labels(gantt: pd.DataFrame) -> pd.Series:
    """'F3' / 'B3' / 'U': the tutorial's labels, micro-batches numbered from 1 through the run."""
    micro_batches = int(gantt["micro_batch"].max()) + 1 if len(gantt) else 1
    number = gantt["iteration"].astype(int) * micro_batches + gantt["micro_batch"].astype(int) + 1
    initial = gantt["pass"].astype(str).str[0].str.upper()
    return initial.where(gantt["micro_batch"] < 0, initial + number.astype(str))


def stages_gantt(gantt: pd.DataFrame, max_bars: int = 3000) -> go.Figure:
    """Forward/backward Gantt chart per IPU (``stages.gantt()``), as the PopTorch tutorial draws it.

    The first iteration is in view (double-click shows all drawn). Only the first iterations that
    fit in ``max_bars`` bars are drawn: a long run repeats the same pattern, and a browser slows
    down past a few thousand bars; the x-axis title says how many are shown.
    """
    if gantt.empty:
        return empty("No pipeline stages in this profile.")
    iterations = np.sort(gantt["iteration"].unique())
    per_iteration = max(1, math.ceil(len(gantt) / len(iterations)))
    shown = iterations[: max(1, max_bars // per_iteration)]
    frame = gantt[gantt["iteration"].isin(shown)].copy()
    frame["label"] = micro_batch_labels(frame)
    frame["ipu_label"] = frame["ipu"].map(ipu_label)
    frame["pass"] = frame["pass"].astype(str)
    show_text = len(frame) <= max_bars
    fig = go.Figure()
    for pass_name in [p for p in PASS_COLOURS if p in set(frame["pass"])]:
        part = frame[frame["pass"] == pass_name]
        fig.add_trace(
            go.Bar(
                y=part["ipu_label"],
                x=part["end_cycle"] - part["start_cycle"],
                base=part["start_cycle"],
                orientation="h",
                name=pass_name,
                marker=dict(color=PASS_COLOURS[pass_name], line=dict(color="white", width=1)),
                text=part["label"] if show_text else None,
                textposition="inside",
                insidetextanchor="middle",
                textangle=0,
                textfont=dict(color="white", size=11),
                customdata=np.stack([part["stage"], part["iteration"], part["micro_batch"], part["label"]], axis=-1),
                hovertemplate=("%{customdata[3]}: stage %{customdata[0]}, " + pass_name
                               + "<br>iteration %{customdata[1]}, micro-batch %{customdata[2]}"
                               + "<br>cycles %{base:,} – %{x:,} long<extra>%{y}</extra>"),
            )
        )
    labels = sorted(frame["ipu"].unique())
    fig.update_yaxes(categoryorder="array", categoryarray=[ipu_label(i) for i in labels][::-1])
    first = frame[frame["iteration"] == frame["iteration"].min()]
    note = "" if len(shown) == len(iterations) else f" (the first {len(shown):,} of {len(iterations):,} iterations)"
    fig.update_xaxes(title="cycles" + note, range=[float(frame["start_cycle"].min()), float(first["end_cycle"].max())])
    return _style(fig, barmode="overlay", bargap=0.2, height=max(240, 100 + 60 * len(labels)), uniformtext=dict(minsize=8, mode="hide"))


def _stage_labels(frame: pd.DataFrame) -> pd.Series:
    """'stage 1 · IPU 1' for each row of a ``stages.summary()`` frame."""
    return "stage " + frame["stage"].astype(str) + " · " + frame["ipu"].map(ipu_label)


def stage_imbalance(summary: pd.DataFrame, bottleneck_stage: int | None = None) -> go.Figure:
    """Cycles per micro-batch of each stage and pass (``stages.summary()``), the bottleneck outlined. Passes
    that run once per step (its ``per`` column: the weight update) are not per micro-batch, so not drawn."""
    if "per" in summary:
        summary = summary[summary["per"].astype(str) != "step"]
    if summary.empty:
        return empty("No stages.")
    frame = summary.copy()
    frame["pass"] = frame["pass"].astype(str)
    frame["stage_label"] = _stage_labels(frame)
    order = list(dict.fromkeys(frame.sort_values("stage")["stage_label"]))
    fig = go.Figure()
    for pass_name in [p for p in PASS_COLOURS if p in set(frame["pass"])]:
        part = frame[frame["pass"] == pass_name]
        outline = np.where(part["stage"] == bottleneck_stage, 3, 0)
        fig.add_trace(go.Bar(x=part["stage_label"], y=part["cycles_per_micro_batch"], name=pass_name,
                             marker=dict(color=PASS_COLOURS[pass_name], line=dict(color=CAPACITY_COLOUR, width=outline)),
                             hovertemplate="%{x} " + pass_name + "<br>%{y:,} cycles per micro-batch<extra></extra>"))
    fig.update_xaxes(categoryorder="array", categoryarray=order)
    fig.update_yaxes(title="cycles per micro-batch")
    return _style(fig, barmode="stack", height=340, legend=dict(traceorder="normal", orientation="h", y=1.02, yanchor="bottom", x=0))


def stage_utilisation(summary: pd.DataFrame) -> go.Figure:
    """Busy and idle cycles of each stage's IPU over the run: the pipeline's bubble, per stage."""
    if summary.empty:
        return empty("No stages.")
    passes = summary["pass"].astype(str)
    # The analysis gives each stage an "all" row (its IPU's whole run) beside the per-pass rows.
    frame = (summary[passes == "all"] if (passes == "all").any() else summary.drop_duplicates(["stage"])).sort_values("stage")
    labels = _stage_labels(frame)
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=frame["busy_cycles"], name="busy", marker_color=PHASE_COLOURS["compute"]))
    fig.add_trace(go.Bar(x=labels, y=frame["idle_cycles"], name="idle", marker_color=PHASE_COLOURS["idle"]))
    # What is neither the stage's passes nor waiting (host calls, streams of no stage), so that
    # every bar reaches the run's length, as busy + idle + other does on the IPU.
    other = frame["total_cycles"] - frame["busy_cycles"] - frame["idle_cycles"]
    fig.add_trace(go.Bar(x=labels, y=other, name="other (host I/O, no stage)", marker_color=PHASE_COLOURS["stream"]))
    fig.update_yaxes(title="cycles")
    return _style(fig, barmode="stack", height=300)


def stage_cycles(summary: pd.DataFrame) -> pd.DataFrame:
    """[stage, cycles_per_micro_batch] with a stage's forward and backward laid end to end, to draw
    a stage as one bar (``stages.summary()`` has a row per stage and pass)."""
    work = summary[summary["pass"].astype(str).isin(["forward", "backward"])]
    return work.groupby("stage", as_index=False)["cycles_per_micro_batch"].sum()


def split_comparison(current: pd.DataFrame, suggested: pd.DataFrame) -> go.Figure:
    """Cycles per micro-batch per stage now and with the suggested split (``stages.best_split()``).

    ``current``: [stage, cycles_per_micro_batch] (forward and backward summed per stage);
    ``suggested``: ``best_split().stages``.
    """
    fig = go.Figure()
    fig.add_trace(go.Bar(x="stage " + current["stage"].astype(str), y=current["cycles_per_micro_batch"],
                         name="current split", marker_color="#A0A7B4"))
    fig.add_trace(go.Bar(x="stage " + suggested["stage"].astype(str), y=suggested["cycles_per_micro_batch"],
                         name="suggested split", marker_color="#3FA672",
                         customdata=suggested["blocks"].map(_blocks_text),
                         hovertemplate="%{x}: %{y:,} cycles<br>blocks %{customdata}<extra>suggested</extra>"))
    fig.update_yaxes(title="cycles per micro-batch")
    return _style(fig, barmode="group", height=300)


def _blocks_text(blocks: object) -> str:
    if isinstance(blocks, (list, tuple, np.ndarray)):
        return ", ".join(str(b) for b in blocks)
    return str(blocks)


# --------------------------------------------------------------------------------------- exchange

def exchange_matrix(matrix: pd.DataFrame, value: str = "bytes") -> go.Figure:
    """Bytes (or cycles) moved from each source to each destination (``exchange.matrix()``)."""
    if matrix.empty:
        return empty("No exchanges between IPUs.")
    endpoints = sorted(set(matrix["src_ipu"]) | set(matrix["dst_ipu"]), key=lambda i: (i < 0, abs(i)))
    grid = matrix.pivot_table(index="dst_ipu", columns="src_ipu", values=value, aggfunc="sum")
    grid = grid.reindex(index=endpoints, columns=endpoints)
    labels = [ipu_label(i) for i in endpoints]
    text = grid.map(lambda v: "" if pd.isna(v) or v == 0 else (_short_bytes(v) if value == "bytes" else f"{v:,.0f}"))
    fig = go.Figure(go.Heatmap(z=grid.to_numpy(dtype=float), x=labels, y=labels, colorscale="Blues", zmin=0,
                               text=text.to_numpy(), texttemplate="%{text}", hoverongaps=False,
                               colorbar=dict(title=dict(text=value, side="right"), thickness=12,
                                             **(byte_ticks(float(np.nanmax(grid.to_numpy(dtype=float))))
                                                if value == "bytes" else {})),
                               hovertemplate="%{x} → %{y}<br>%{z:,.0f} " + value + "<extra></extra>"))
    fig.update_xaxes(title="source", side="bottom")
    fig.update_yaxes(title="destination", autorange="reversed")
    return _style(fig, height=max(300, 120 + 45 * len(labels)))


def _short_bytes(value: float) -> str:
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
    return _style(fig, height=320, showlegend=False)


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
    return _style(fig, title=title, barmode="stack", height=170 if not title else 190,
                  margin=dict(l=20, r=20, t=60 if title else 30, b=40),
                  legend=dict(orientation="h", yanchor="bottom", y=1.05, x=0))


# ---------------------------------------------------------------------------------------- compare

def side_by_side_bars(frames: Mapping[str, pd.DataFrame], x: str, y: str, title: str, y_title: str,
                      labels: Mapping[str, str] | None = None) -> go.Figure:
    """The same quantity from two profiles as grouped bars: ``frames`` maps 'a'/'b' to a frame."""
    fig = go.Figure()
    for key, frame in frames.items():
        fig.add_trace(go.Bar(x=frame[x], y=frame[y], name=(labels or {}).get(key, key.upper()),
                             marker_color=PROFILE_COLOURS.get(key, "#999")))
    fig.update_yaxes(title=y_title)
    return _style(fig, title=title or None, barmode="group", height=320)


def compare_phase_shares(shares: Mapping[str, Mapping[str, float]], labels: Mapping[str, str]) -> go.Figure:
    """Each profile's time by phase as one stacked bar per profile."""
    fig = go.Figure()
    keys = list(shares)
    for phase in PHASES:
        fig.add_trace(go.Bar(y=[labels.get(k, k) for k in keys], x=[float(shares[k].get(phase, 0) or 0) for k in keys],
                             orientation="h", name=phase, marker_color=PHASE_COLOURS[phase],
                             hovertemplate="%{y}<br>" + phase + ": %{x:.1f} %<extra></extra>"))
    fig.update_xaxes(range=[0, 100], ticksuffix=" %", title="% of IPU time")
    fig.update_yaxes(autorange="reversed", automargin=True)
    return _style(fig, barmode="stack", height=220, margin=dict(l=20, r=20, t=40, b=40))


# -- What-if: a tune result (format.tunefile's rows) -------------------------------------------------
FITS_COLOUR = "#3B7DD8"
START_COLOUR = "#1f2933"
PARETO_COLOUR = "#3FA672"


def _candidate_hover(rows: pd.DataFrame) -> list[str]:
    """Each candidate's rank (or status), its figures and its changes from the start, for hover text."""
    rank = rows["rank"].astype("Float64")
    head = np.where(rank.notna().to_numpy(), "rank " + rank.fillna(0).astype(int).astype(str), rows["status"].astype(str))
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
    return _style(fig, height=440, xaxis_title="worst tile (% of a tile's memory)",
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
    return _style(fig, height=440, xaxis_title="IPUs used", yaxis_title="throughput (samples/s)",
                  xaxis=dict(type="log", dtick=0.30102999566), clickmode="event", **WHATIF_LEGEND)
