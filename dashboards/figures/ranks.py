"""Figures of many ranks: past ``MANY_RANKS`` a figure of a row (or bar) per rank would be thousands of pixels of
pale bars, so each rank becomes a row of a heat map over time bins (``busy_heatmap``), or a point of a distribution,
the ranks sorted by a figure (``sorted_areas``), and a matrix of ranks is summed into bins of ranks (``binned_matrix``).
Zooming a heat map's box onto a few ranks shows them row by row; the pages that can draw each rank's own bars
do so once the box holds ``MANY_RANKS`` ranks or fewer."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from dashboards.figures.style import empty, styled
from popvision_py.analysis.common.tables import bin_edges, busy_by_row

MANY_RANKS = 32  # past this many ranks a figure of a row per rank is drawn as a heat map or columns
HEATMAP_BINS = 200  # time bins of a heat map
MATRIX_BINS = 64  # a matrix of more ranks than this is summed into this many bins of ranks a side
HEATMAP_HEIGHT = 520
NAMED_PAST_PCT = 5.0  # a distribution names a rank this far past the median or further: nearer is not a straggler


def busy_heatmap(row: np.ndarray, start: np.ndarray, end: np.ndarray, labels: Sequence[str], window: tuple[int, int],
                 x_of, what: str, x_title: str, bins: int = HEATMAP_BINS) -> go.Figure:
    """A row per label (``row``: each span's row code), a column per time bin of ``window`` (ns): the share of the
    bin each row had a span open (its spans merged, ``busy_by_row``). ``x_of``: ns -> the axis's values; ``what``:
    what a cell measures, for its hover."""
    if not len(labels) or window[1] <= window[0]:
        return empty("Nothing to draw in this window.")
    edges = bin_edges(window[0], window[1], bins)
    busy = busy_by_row(row, start, end, len(labels), edges)
    return share_heatmap(100.0 * busy / np.diff(edges)[None, :], x_of((edges[:-1] + edges[1:]) // 2), labels,
                         what, x_title)


def share_heatmap(share: np.ndarray, middle: np.ndarray, labels: Sequence[str], what: str, x_title: str,
                  scale: str = "% busy") -> go.Figure:
    """``share`` (``[labels, bins]``, % of each bin) as a heat map of a row per label, columns at ``middle``.

    Each cell is sent as a whole percent (a byte: 4,096 ranks of 200 bins are 0.8 MB, not 6.5 MB of doubles),
    and the rows are named by their labels where those are distinct (else each cell carries its row's label,
    eight times the bytes)."""
    ticks = _ticks(len(labels))
    distinct = len(set(labels)) == len(labels)
    fig = go.Figure(go.Heatmap(
        z=np.rint(np.clip(share, 0, 100)).astype(np.uint8), x=middle,
        y=list(labels) if distinct else list(range(len(labels))), zmin=0, zmax=100, colorscale="Blues",
        colorbar=dict(title=dict(text=scale, side="right"), thickness=12),
        customdata=None if distinct else np.broadcast_to(np.asarray(labels, dtype=object)[:, None], share.shape),
        hovertemplate=("%{y}" if distinct else "%{customdata}") + "<br>%{z}% of the bin " + what
                      + "<br>at %{x}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title=f"{len(labels):,} ranks (zoom a box onto a few to see each)",
                     tickmode="array", tickvals=[labels[i] for i in ticks] if distinct else ticks,
                     ticktext=[labels[i] for i in ticks])
    fig.update_xaxes(title=x_title)
    return styled(fig, height=HEATMAP_HEIGHT, dragmode="zoom", meta={"level": "heat map", "rows": len(labels)})


def _ticks(n: int, most: int = 16) -> list[int]:
    """Up to ``most`` evenly spread row numbers to label."""
    return sorted(set(np.linspace(0, n - 1, min(n, most)).round().astype(int).tolist()))


def rows_in_view(relayout: dict | None, rows: int) -> tuple[int, int] | None:
    """The rows a zoom's box holds on a heat map's y axis (``yaxis.range``), ``(first, last + 1)``; None where
    the zoom says nothing of the y axis or goes back to every row."""
    if not relayout or "yaxis.range[0]" not in relayout:
        return None
    low, high = sorted((float(relayout["yaxis.range[0]"]), float(relayout["yaxis.range[1]"])))
    first, last = max(int(np.ceil(low)), 0), min(int(np.floor(high)), rows - 1)
    return (first, last + 1) if last >= first and (first, last + 1) != (0, rows) else None


def binned_matrix(src: np.ndarray, dst: np.ndarray, value: np.ndarray, endpoints: Sequence[int],
                  bins: int = MATRIX_BINS) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """A matrix of ``endpoints`` (in order) summed into ``bins`` groups of consecutive endpoints a side: the
    ``[bins, bins]`` sums (destination rows, source columns; NaN where nothing moved) and each group's first and
    last endpoint."""
    position = {e: i for i, e in enumerate(endpoints)}
    n = len(endpoints)
    groups = min(bins, n)
    of = (np.arange(n) * groups) // n  # each endpoint's group
    s = of[np.array([position[e] for e in np.asarray(src).tolist()], np.int64)]
    d = of[np.array([position[e] for e in np.asarray(dst).tolist()], np.int64)]
    grid = np.zeros((groups, groups))
    np.add.at(grid, (d, s), np.asarray(value, np.float64))
    moved = np.zeros((groups, groups), bool)
    moved[d, s] = True
    first = np.searchsorted(of, np.arange(groups), side="left")
    last = np.searchsorted(of, np.arange(groups), side="right") - 1
    return np.where(moved, grid, np.nan), [(endpoints[a], endpoints[b]) for a, b in zip(first, last)]


def sorted_areas(labels: Sequence[str], parts: Sequence[tuple[str, np.ndarray, str]], order_by: np.ndarray,
                 what: str, y_title: str, hover: str, lines: Sequence[tuple[str, np.ndarray, str]] = (),
                 most_first: bool = True, named: int = 3, height: int = 340) -> go.Figure:
    """Past ``MANY_RANKS`` ranks, a figure of a bar per rank told as a distribution: the ranks sorted by
    ``order_by`` (the most first, or the least where not ``most_first``; a rank's own number breaks ties, a NaN
    goes last), and each of ``parts`` (name, a value a rank in ``labels``' order, colour) drawn as a stacked area
    along that order, so the spread over the ranks reads at a glance; ``lines`` (the same triples) are drawn over
    the areas as dotted lines, not stacked. Each rank is on hover (``hover``: the value's format, e.g.
    ``"%{y:.1f} %"``). Up to ``named`` of the first ranks are named on the plot with how far their ``order_by``
    is past its median (as ``spread`` words it), where that is ``NAMED_PAST_PCT`` or more. ``what``: what the
    order is by, for the x axis's title."""
    key = np.asarray(order_by, np.float64)
    order = np.lexsort((np.arange(len(labels)), np.nan_to_num(-key if most_first else key, nan=np.inf)))
    shown = np.asarray(labels, dtype=object)[order]
    at = np.arange(len(order))
    fig = go.Figure()
    for stacked, drawn in ((True, parts), (False, lines)):
        for name, values, colour in drawn:
            fig.add_trace(go.Scatter(x=at, y=np.asarray(values, np.float64)[order], name=name, mode="lines",
                                     stackgroup="ranks" if stacked else None, customdata=shown,
                                     line=dict(width=0.5, color=colour) if stacked else dict(color=colour,
                                                                                            dash="dot"),
                                     hovertemplate="%{customdata}: " + hover + " " + name + "<extra></extra>"))
    top = np.sum([np.nan_to_num(np.asarray(values, np.float64)[order]) for _, values, _ in parts], axis=0)
    median = float(np.nanmedian(key)) if np.isfinite(key).any() else np.nan
    with np.errstate(divide="ignore", invalid="ignore"):  # a median of 0: a rank past it is infinitely past
        past = 100 * (key[order[:named]] / median - 1)
    for k in range(len(past)):
        if not (past[k] if most_first else -past[k]) >= NAMED_PAST_PCT:  # near the median, short of it, or NaN
            break
        # below its point, inside the plot: above it the legend may be
        words = f" ({past[k]:+.1f}%)" if np.isfinite(past[k]) else ""
        fig.add_annotation(x=k, y=float(top[k]), text=f"{shown[k]}{words}",
                           showarrow=True, arrowhead=1, ax=50 + 30 * k, ay=30 + 20 * k, xanchor="left",
                           bgcolor="rgba(255, 255, 255, 0.85)")
    fig.update_xaxes(title=f"{len(order):,} ranks, {what} first (hover for each)")
    fig.update_yaxes(title=y_title, rangemode="tozero")
    return styled(fig, height=height)


def endpoints_in_view(relayout: dict | None, spans: Sequence[tuple[int, int]],
                      endpoints: Sequence[int]) -> tuple[list[int], list[int]] | None:
    """The endpoints a zoom's box holds on a binned matrix (``binned_matrix``'s ``spans``, bins by position along
    both axes): ``(sources, destinations)``; None where the zoom gives no box on both axes."""
    if not relayout or "xaxis.range[0]" not in relayout or "yaxis.range[0]" not in relayout:
        return None
    position = {e: i for i, e in enumerate(endpoints)}

    def held(low: float, high: float) -> list[int]:
        low, high = sorted((low, high))
        first, last = max(int(np.ceil(low)), 0), min(int(np.floor(high)), len(spans) - 1)
        if last < first:
            return []
        return list(endpoints[position[spans[first][0]]:position[spans[last][1]] + 1])

    return (held(float(relayout["xaxis.range[0]"]), float(relayout["xaxis.range[1]"])),
            held(float(relayout["yaxis.range[0]"]), float(relayout["yaxis.range[1]"])))
