"""The Memory page's figures (and the Summary page's memory per IPU): the tile map, memory by category
and per IPU, the distribution of tiles' memory, and one tile's breakdown."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboards.figures.ranks import MANY_RANKS
from dashboards.figures.style import (CAPACITY_COLOUR, CATEGORY_COLOURS, IPUS, OOM_COLOUR, Naming, byte_ticks, empty,
                                      ipu_label, peaks_of_runs, styled)
from popvision_py.analysis.common.spread import outlier_ranks
from popvision_py.format.schema import MEMORY_CATEGORIES

TILE_MAP_COLUMNS = 64  # at most; an IPU of 1,472 tiles is 23 rows of 64


def _category_order(categories: Sequence[str]) -> list[str]:
    known = [c for c in MEMORY_CATEGORIES if c in set(categories)]
    return known + sorted(set(categories) - set(known))


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
                hovertemplate="tile %{customdata[0]}: out of memory<br>"
                              "over by %{customdata[1]:,.1f} KiB<extra></extra>",
                name=f"out of memory ({len(oom)})",
            )
        )
    return _map_layout(fig, rows, columns, selected_tile, tiles_per_ipu)


def ipu_memory(by_ipu: pd.DataFrame, naming: Naming = IPUS, capacity: bool = True) -> go.Figure:
    """Always-live and not-always-live memory of each IPU against its capacity (``memory.by_ipu()``); an
    imported trace's rank holds its weights (allocated all along) and activations (the rest of its peak),
    against the device's memory when the trace gives it (``capacity``)."""
    if by_ipu.empty:
        return empty("No memory recorded.")
    labels = by_ipu["ipu"].map(naming.label)
    always, rest = ("weights", "activations") if naming.imported else ("always-live", "not always-live")
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=by_ipu["always_live_bytes"] / 2**20, name=always, marker_color="#3B7DD8",
                         hovertemplate="%{x}: %{y:,.1f} MiB " + always + "<extra></extra>"))
    fig.add_trace(go.Bar(x=labels, y=by_ipu["not_always_live_bytes"] / 2**20, name=rest,
                         marker_color="#9CC3F5",
                         hovertemplate="%{x}: %{y:,.1f} MiB " + rest + "<extra></extra>"))
    if naming.imported:
        if capacity:
            fig.add_trace(go.Scatter(x=labels, y=by_ipu["capacity_bytes"] / 2**20, mode="markers",
                                     name="device memory", customdata=by_ipu["used_pct"],
                                     marker=dict(symbol="line-ew-open", size=46, color=CAPACITY_COLOUR,
                                                 line=dict(width=2)),
                                     hovertemplate="%{x}: device memory %{y:,.0f} MiB<br>%{customdata:.1f} % "
                                                   "allocated at its peak<extra></extra>"))
        fig.update_yaxes(title="MiB allocated at its peak", rangemode="tozero")
        return styled(fig, barmode="stack", height=300)
    fig.add_trace(go.Scatter(x=labels, y=by_ipu["capacity_bytes"] / 2**20, mode="markers", name="capacity",
                             marker=dict(symbol="line-ew-open", size=46, color=CAPACITY_COLOUR, line=dict(width=2)),
                             customdata=np.stack([by_ipu["used_pct"], by_ipu["oom_tiles"]], axis=-1),
                             hovertemplate="%{x}: capacity %{y:,.0f} MiB<br>%{customdata[0]:.1f} % used, "
                                           "%{customdata[1]} tiles out of memory<extra></extra>"))
    fig.update_yaxes(title="MiB", rangemode="tozero")
    return styled(fig, barmode="stack", height=300)


def tile_highlight(row: int, col: int) -> dict:
    """The outline marking the selected tile on the tile map."""
    return dict(type="rect", x0=col - 0.5, x1=col + 0.5, y0=row - 0.5, y1=row + 0.5,
                line=dict(color="#ff2d95", width=3))


def category_stacks(by_category: pd.DataFrame, capacity_by_ipu: Mapping[int, int] | None = None,
                    naming: Naming = IPUS) -> go.Figure:
    """Memory per IPU stacked by category (``memory.by_category()``); always-live hatched apart."""
    if by_category.empty:
        return empty("No memory recorded.")
    frame = by_category.copy()
    frame["ipu_label"] = frame["ipu"].map(naming.label)
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
                    # an imported trace's categories say it: weights are allocated all along, activations not
                    name=f"{category}{'' if always_live or naming.imported else ' (not always-live)'}",
                    marker=dict(color=CATEGORY_COLOURS.get(category, "#999"),
                                pattern=dict(shape="" if always_live else "/", fillmode="overlay", size=6)),
                    hovertemplate=f"{category}<br>%{{x}}: %{{y:,.0f}} B"
                                  f"<extra>{'always-live' if always_live else 'not always-live'}</extra>",
                    legendgroup=category,
                )
            )
    if capacity_by_ipu:
        labels = [naming.label(ipu) for ipu in capacity_by_ipu]
        fig.add_trace(go.Scatter(x=labels, y=list(capacity_by_ipu.values()), mode="markers",
                                 marker=dict(symbol="line-ew-open", size=40, color=CAPACITY_COLOUR, line=dict(width=2)),
                                 name="capacity", hovertemplate="capacity %{y:,.0f} B<extra></extra>"))
    largest = max(float(frame.groupby("ipu")["bytes"].sum().max()), max(capacity_by_ipu.values(), default=0)
                  if capacity_by_ipu else 0)
    fig.update_yaxes(title="bytes", **byte_ticks(largest))
    return styled(fig, barmode="stack", height=420,
                  legend=dict(font=dict(size=10), orientation="h", y=-0.12, yanchor="top", x=0),
                  margin=dict(l=60, r=20, t=20, b=40))


def category_spread(by_category: pd.DataFrame, naming: Naming = IPUS) -> go.Figure:
    """Past ``MANY_RANKS`` IPUs (or ranks), ``category_stacks`` told as distributions: for each category (and
    always-live apart) and for the whole, a box of its bytes over the IPUs (least, quartiles, most; an IPU
    without the category holds 0 of it), and the IPUs furthest past the median of each marked and named."""
    if by_category.empty:
        return empty("No memory recorded.")
    frame = by_category.assign(category=by_category["category"].astype(str))
    frame["part"] = [c if a or naming.imported else f"{c} (not always-live)"
                     for c, a in zip(frame["category"].tolist(), frame["always_live"].tolist())]
    grid = frame.pivot_table(index="ipu", columns="part", values="bytes", aggfunc="sum", fill_value=0)
    order = [p for c in _category_order(frame["category"].unique()) for p in (c, f"{c} (not always-live)")
             if p in grid.columns and grid[p].sum() > 0]
    grid = grid[order].assign(**{"all": grid[order].sum(axis=1)})
    ipus = grid.index.to_numpy()
    fig = go.Figure()
    named_x, named_y, named_text = [], [], []
    for part in grid.columns:
        values = grid[part].to_numpy(np.float64)
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        colour = "#6b7280" if part == "all" else CATEGORY_COLOURS.get(part.split(" (")[0], "#999")
        fig.add_trace(go.Box(x=[part], q1=[q1], median=[median], q3=[q3], lowerfence=[values.min()],
                             upperfence=[values.max()], name=part, marker_color=colour, boxpoints=False,
                             hoverinfo="y", showlegend=False))
        for ipu in outlier_ranks(ipus, {part: values}):
            named_x.append(part)
            named_y.append(float(grid.at[ipu, part]))
            named_text.append(naming.label(int(ipu)))
    if named_x:
        fig.add_trace(go.Scatter(x=named_x, y=named_y, text=named_text, mode="markers+text",
                                 textposition="middle right",
                                 marker=dict(color=OOM_COLOUR, size=7), name="furthest past the median",
                                 hovertemplate="%{text}: %{y:,.0f} B<extra>%{x}</extra>"))
    fig.update_yaxes(title=f"bytes over {len(ipus):,} {naming.device}s", rangemode="tozero",
                     **byte_ticks(float(grid.to_numpy().max())))
    fig.update_xaxes(type="category")
    # no legend: the section's note says what the red marks are, and a narrow panel's rotated names need the room
    return styled(fig, height=420, showlegend=False, margin=dict(l=60, r=20, t=20, b=40),
                  meta={"level": "spread", "rows": len(ipus)})


def tile_histogram(by_tile: pd.DataFrame, bytes_per_tile: int, bins: int = 60) -> go.Figure:
    """Distribution of tiles' peak memory per IPU; the tile capacity marked when it is on the scale. Past
    ``MANY_RANKS`` IPUs, one distribution of every IPU's tiles (a histogram an IPU would be a wall of them)."""
    if by_tile.empty:
        return empty("No tiles.")
    fig = go.Figure()
    fullest = float(by_tile["total_bytes"].max())
    # Up to the capacity only if tiles come near it: else the bars would crowd one corner.
    top = max(fullest, float(bytes_per_tile)) if fullest > bytes_per_tile / 2 else fullest * 1.05
    size = max(top / bins, 1.0)
    ipus = by_tile["ipu"].nunique()
    groups = ([(f"{ipus:,} IPUs", by_tile)] if ipus > MANY_RANKS
              else [(ipu_label(ipu), part) for ipu, part in by_tile.groupby("ipu", sort=True)])
    for name, part in groups:
        fig.add_trace(go.Histogram(x=part["total_bytes"] / 1024, name=name, opacity=0.65,
                                   xbins=dict(start=0, end=(top + size) / 1024, size=size / 1024),
                                   hovertemplate="%{x} KiB: %{y} tiles<extra>" + name + "</extra>"))
    tile_memory_axis(fig, top >= bytes_per_tile, bytes_per_tile)
    return styled(fig, barmode="overlay", height=320)


def tile_memory_axis(fig: go.Figure, on_scale: bool, bytes_per_tile: int, label: str = "tile capacity") -> None:
    """A histogram of tiles' peak memory (KiB on x): the tile memory as a dashed line where it is on the
    scale, else named under the axis, on a line of its own (so a narrow figure does not cut it)."""
    if on_scale:
        fig.add_vline(x=bytes_per_tile / 1024, line=dict(color=CAPACITY_COLOUR, dash="dash"),
                      annotation_text=label, annotation_position="top left")
        title = "peak memory per tile (KiB)"
    else:
        title = f"peak memory per tile (KiB)<br>{label} {bytes_per_tile / 1024:,.0f} KiB is off the scale"
    fig.update_xaxes(title=title, rangemode="tozero")
    fig.update_yaxes(title="tiles")


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
                hovertemplate="%{y}: %{x:,.2f} KiB<extra>" + ("always-live" if always_live else "not always-live")
                              + "</extra>",
            )
        )
    total = float(frame["bytes"].sum())
    fig.update_xaxes(title=f"KiB (total {total / 1024:,.1f} of {bytes_per_tile / 1024:,.0f} KiB)")
    fig.update_yaxes(autorange="reversed")
    return styled(fig, title=title or None, barmode="stack", height=max(260, 90 + 24 * len(order)),
                  margin=dict(l=120, r=20, t=50 if title else 30, b=45))


def _map_layout(fig: go.Figure, rows: int, columns: int, selected_tile: int | None, tiles_per_ipu: int) -> go.Figure:
    """The tile map's axes and size, shared by its three colourings (so a click means the same tile)."""
    if selected_tile is not None and 0 <= selected_tile < tiles_per_ipu:
        fig.add_shape(tile_highlight(*tile_position(selected_tile, columns)))
    fig.update_xaxes(showgrid=False, zeroline=False, showticklabels=False, title=f"{columns} tiles per row")
    fig.update_yaxes(showgrid=False, zeroline=False, autorange="reversed", showticklabels=False,
                     scaleanchor="x", scaleratio=1, title=None)
    return styled(fig, height=int(min(720, max(260, 90 + rows * 560 / columns))), margin=dict(l=10, r=10, t=30, b=30),
                  legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0), clickmode="event")


def _cells(values: np.ndarray, tiles: np.ndarray, cells: int, fill: float = np.nan) -> np.ndarray:
    out = np.full(cells, fill)
    out[tiles] = values
    return out


def category_map(dominant: pd.DataFrame, categories: Sequence[str], grid: np.ndarray, tiles_per_ipu: int,
                 selected_tile: int | None = None, columns: int | None = None) -> go.Figure:
    """Every tile coloured by its dominant category (``memory.depth.dominant``); hover gives the tile's
    bytes in each category (``grid``: tiles x ``categories``, ``memory.depth.categories``)."""
    rows, columns = tile_grid(tiles_per_ipu, columns)
    cells = rows * columns
    present = [c for c in categories if c in set(dominant["category"].astype(str))]
    if not present:
        return empty("No memory recorded.")
    index = {c: i for i, c in enumerate(present)}
    code = dominant["category"].astype(str).map(index).to_numpy(dtype=float)
    tiles = dominant["tile"].to_numpy(dtype=np.int64)
    z = _cells(code, tiles, cells).reshape(rows, columns)
    n = len(present)
    # one flat band of colour per category: a discrete scale over codes 0..n-1
    scale = []
    for i, category in enumerate(present):
        colour = CATEGORY_COLOURS.get(category, "#999")
        scale += [[i / n, colour], [(i + 1) / n, colour]]
    kib = np.full((cells, len(categories)), np.nan)
    kib[tiles] = grid[tiles] / 1024
    custom = np.concatenate([
        _cells(tiles.astype(float), tiles, cells)[:, None],
        _cells(dominant["category_pct"].to_numpy(dtype=float), tiles, cells)[:, None],
        _cells(dominant["total_bytes"].to_numpy(dtype=float) / 1024, tiles, cells)[:, None], kib], axis=1)
    lines = "".join(f"<br>{c}: %{{customdata[{3 + i}]:,.1f}} KiB" for i, c in enumerate(categories))
    fig = go.Figure(go.Heatmap(
        z=z, customdata=custom.reshape(rows, columns, -1), zmin=-0.5, zmax=n - 0.5, colorscale=scale,
        colorbar=dict(tickvals=list(range(n)), ticktext=present, thickness=12, title=dict(text="dominant")),
        xgap=1, ygap=1, name="tiles",
        hovertemplate="tile %{customdata[0]}: %{customdata[2]:,.1f} KiB, %{customdata[1]:.0f} % its dominant "
                      "category" + lines + "<extra></extra>"))
    return _map_layout(fig, rows, columns, selected_tile, tiles_per_ipu)


def footprint_map(footprint: pd.DataFrame, name: str, tiles_per_ipu: int, selected_tile: int | None = None,
                  columns: int | None = None) -> go.Figure:
    """One variable's bytes on each tile (``memory.depth.footprint``); tiles without it stay blank."""
    rows, columns = tile_grid(tiles_per_ipu, columns)
    cells = rows * columns
    inside = footprint[(footprint["tile"] >= 0) & (footprint["tile"] < tiles_per_ipu)]
    tiles = inside["tile"].to_numpy(dtype=np.int64)
    z = _cells(inside["bytes"].to_numpy(dtype=float), tiles, cells, fill=0.0)
    z[tiles_per_ipu:] = np.nan
    ids = np.arange(cells, dtype=float)
    ids[tiles_per_ipu:] = np.nan
    total = float(inside["bytes"].sum())
    fig = go.Figure(go.Heatmap(
        z=z.reshape(rows, columns), customdata=ids.reshape(rows, columns), zmin=0,
        zmax=max(float(z[:tiles_per_ipu].max()) if tiles_per_ipu else 0.0, 1.0),
        colorscale=[[0, "#f3f4f6"], [1e-9, "#c6dbef"], [1, "#08306b"]],
        colorbar=dict(title=dict(text="bytes", side="right"), thickness=12), xgap=1, ygap=1, name="tiles",
        hovertemplate="tile %{customdata}: %{z:,.0f} B of " + name.replace("%", "%%") + "<extra></extra>"))
    fig = _map_layout(fig, rows, columns, selected_tile, tiles_per_ipu)
    fig.update_layout(title=dict(text=f"{name}: {total:,.0f} B on {len(tiles):,} tiles", font=dict(size=12)))
    return fig


def worst_over_steps(over: pd.DataFrame, bytes_per_tile: int, step_names: Sequence[str] = ()) -> go.Figure:
    """Memory of the fullest tiles at every program step (``memory.depth.over_steps``), against the
    tile's capacity."""
    if over.empty:
        return empty("No program steps.")
    over, width = peaks_of_runs(over, "tile", ("total_bytes",))  # a 10 GB import: 208,800 steps a tile
    fig = go.Figure()
    for tile, part in over.groupby("tile", sort=False):
        steps = part["step"].to_numpy()
        names = np.asarray(step_names, dtype=object)[steps] if len(step_names) else steps.astype(str)
        fig.add_trace(go.Scatter(
            x=steps, y=part["total_bytes"] / 1024, mode="lines", name=f"tile {tile}", line=dict(width=1.5),
            customdata=np.stack([names, part["always_live_bytes"] / 1024], axis=-1),
            hovertemplate=f"tile {tile}, step %{{x}} (%{{customdata[0]}})<br>%{{y:,.1f}} KiB, "
                          "always-live %{customdata[1]:,.1f} KiB<extra></extra>"))
    top = float(over["total_bytes"].max())
    if top > bytes_per_tile / 2:
        fig.add_hline(y=bytes_per_tile / 1024, line=dict(color=CAPACITY_COLOUR, dash="dash"),
                      annotation_text="tile capacity", annotation_position="top left")
    fig.update_xaxes(title="program step" + (f" (each point the most of {width:,} steps)" if width > 1 else ""))
    fig.update_yaxes(title="KiB live on the tile", rangemode="tozero")
    return styled(fig, height=320)
