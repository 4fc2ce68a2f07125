"""The GPU page's figures: each rank's streams over time (its kernels coloured by kind, or each kind's occupancy
in bins), and the per-rank breakdowns of the report's gpu view (the temporal breakdown, the kernel types and
their overlaps, the communication hidden behind computation).

Time is drawn in ms (the profile's ns over 1e6); hover gives a kernel's name, duration, stream and rank, or
a bin's share busy with each kind.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboards.figures.ranks import MANY_RANKS, sorted_areas
from dashboards.figures.style import KERNEL_COLOURS, PHASE_COLOURS, bar_marker, empty, styled
from dashboards.figures.trace import side_by_side
from popvision_py.format.schema import KERNEL_KINDS

KIND_NAMES = {"compute": "compute", "communication": "communication", "memcpy": "memory copy", "memset": "memory set"}
NAME_CHARS = 120  # a kernel's name in a hover label: C++ templates run to thousands of characters
NS_PER_MS = 1e6
# HTA's kernel types and the sets of them that run at once (gpu.kernel_types_by_rank), by the kinds' colours
TYPE_COLOURS = {"COMPUTATION": KERNEL_COLOURS["compute"], "COMMUNICATION": KERNEL_COLOURS["communication"],
                "MEMORY": KERNEL_COLOURS["memcpy"], "COMPUTATION overlapping COMMUNICATION": "#8E6BBF",
                "COMPUTATION overlapping MEMORY": "#5FB7C9", "COMMUNICATION overlapping MEMORY": "#C9A227",
                "COMPUTATION overlapping COMMUNICATION overlapping MEMORY": "#1f2933"}
# The temporal breakdown's parts (gpu.TEMPORAL_COLUMNS), in the order they are stacked
TEMPORAL_PARTS = (("compute_pct", "compute", KERNEL_COLOURS["compute"]),
                  ("non_compute_pct", "non-compute (communication, memory)", "#E8B96A"),
                  ("idle_pct", "idle", PHASE_COLOURS["idle"]))


def lane_labels(lanes: pd.DataFrame) -> np.ndarray:
    """Each lane's row label, 'Rank 0 · stream 7', in lane order (``streams.LANE_COLUMNS``)."""
    return ("Rank " + lanes["rank"].astype(str) + " · stream " + lanes["stream"].astype(str)).to_numpy(object)


def stream_bars(frame: pd.DataFrame, level: str) -> dict[str, np.ndarray]:
    """Where each row of a ``streams.window`` frame is drawn, in ns: a kernel where it ran; in a bin, the kinds
    of one lane side by side from the bin's start, each as wide as its busy time there (the bin's shares)."""
    lane, start = frame["lane"].to_numpy(np.int64), frame["start_ns"].to_numpy(np.int64)
    busy = frame["busy_ns"].to_numpy(np.int64)
    base = side_by_side(lane, start, busy) if level == "bins" else start
    return {"lane": lane, "base": base, "width": busy, "kind": frame["kind"].to_numpy(object)}


def streams_timeline(frame: pd.DataFrame, level: str, window: tuple[int, int], lanes: pd.DataFrame) -> go.Figure:
    """One row per lane (rank, stream), a bar trace per kind: each kernel (``level`` ``events``) or each kind's
    busy time in each bin (``bins``), over ``window`` (ns). ``frame``: ``streams.window(...).frame``."""
    if lanes.empty:
        return empty("No GPU kernel on the ranks chosen.")
    labels = lane_labels(lanes)
    row = pd.Series(np.arange(len(lanes)), index=lanes["lane"].to_numpy())
    bars = stream_bars(frame, level)
    fig = go.Figure()
    for kind in KERNEL_KINDS:
        keep = bars["kind"] == kind
        part = frame[keep]
        name = KIND_NAMES[kind]
        y = labels[row.reindex(bars["lane"][keep]).to_numpy(np.int64)] if keep.any() else []
        if level == "bins":
            share = part["busy_ns"].to_numpy() / np.maximum((part["end_ns"] - part["start_ns"]).to_numpy(), 1)
            custom = np.stack([share * 100, part["kernels"].to_numpy(), part["start_ns"].to_numpy() / NS_PER_MS,
                               part["end_ns"].to_numpy() / NS_PER_MS], axis=-1) if keep.any() else None
            hover = ("%{y}<br>" + name + ": %{customdata[0]:.1f} % of the bin busy, %{customdata[1]:,} kernel(s)"
                     "<br>bin %{customdata[2]:,.3f} – %{customdata[3]:,.3f} ms<extra></extra>")
        else:
            custom = np.stack([part["name"].astype(str).str.slice(0, NAME_CHARS).to_numpy(object),
                               part["busy_ns"].to_numpy() / 1e9, part["stream"].to_numpy(), part["rank"].to_numpy(),
                               part["start_ns"].to_numpy() / NS_PER_MS], axis=-1) if keep.any() else None
            hover = ("%{customdata[0]}<br>" + name + ", %{customdata[1]:.3s}s on stream %{customdata[2]} of rank "
                     "%{customdata[3]}<br>from %{customdata[4]:,.3f} ms<extra></extra>")
        fig.add_trace(go.Bar(
            y=y, x=bars["width"][keep] / NS_PER_MS, base=bars["base"][keep] / NS_PER_MS, orientation="h", name=name,
            marker=bar_marker(KERNEL_COLOURS[kind], level), customdata=custom, hovertemplate=hover,
        ))
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=list(labels[::-1]), fixedrange=True,
                     range=[-0.6, len(labels) - 0.4])
    fig.update_xaxes(range=[t / NS_PER_MS for t in window], title="ms on the profile's time line", showgrid=True)
    return styled(fig, height=max(260, 120 + 34 * len(labels)), barmode="overlay", bargap=0.3, dragmode="zoom",
                  meta={"level": level}, margin=dict(l=150, r=20, t=40, b=45))


def _rank_labels(ranks: pd.Series) -> list[str]:
    return ["Rank " + str(int(r)) for r in ranks]


def temporal_shares(temporal: pd.DataFrame) -> go.Figure:
    """HTA's temporal breakdown per rank (``gpu.temporal``): compute, non-compute and idle, stacked to 100 % of
    the rank's first kernel to its last. Past ``MANY_RANKS`` ranks, their distribution, the most compute first."""
    if temporal.empty:
        return empty("No GPU kernel.")
    labels = _rank_labels(temporal["rank"])
    if len(labels) > MANY_RANKS:
        fig = sorted_areas(labels, [(name, temporal[column].to_numpy(np.float64), colour)
                                    for column, name, colour in TEMPORAL_PARTS],
                           temporal["compute_pct"].to_numpy(np.float64), "the most compute",
                           "% of the rank's first kernel to its last", "%{y:.1f} %")
        return fig.update_yaxes(range=[0, 100])
    fig = go.Figure([go.Bar(y=labels, x=temporal[column], name=name, orientation="h", marker_color=colour,
                            hovertemplate="%{y}: " + name + " %{x:.1f} %<extra></extra>")
                     for column, name, colour in TEMPORAL_PARTS])
    fig.update_yaxes(categoryorder="array", categoryarray=labels[::-1])
    fig.update_xaxes(title="% of the rank's first kernel to its last", range=[0, 100])
    return styled(fig, height=max(220, 130 + 40 * len(labels)), barmode="stack", legend_traceorder="normal")


def kernel_type_shares(types: pd.DataFrame) -> go.Figure:
    """HTA's kernel types per rank and the sets of them that run at once (``gpu.kernel_types_by_rank``), each as a
    share of the rank's time with a kernel running. Past ``MANY_RANKS`` ranks, their distribution, the most
    computation first."""
    if types.empty:
        return empty("No kernel of HTA's types.")
    if types["rank"].nunique() > MANY_RANKS:
        return kernel_type_spread(types)
    labels = _rank_labels(types["rank"].drop_duplicates())
    fig = go.Figure()
    for kind, part in types.groupby("kernel_type", sort=False):
        fig.add_trace(go.Bar(y=_rank_labels(part["rank"]), x=part["pct"], name=str(kind).lower(), orientation="h",
                             marker_color=TYPE_COLOURS.get(str(kind), "#A0A7B4"), customdata=part["time_ns"] / 1e9,
                             hovertemplate="%{y}: " + str(kind).lower() + " %{x:.1f} % (%{customdata:.3s}s)"
                                           "<extra></extra>"))
    fig.update_yaxes(categoryorder="array", categoryarray=labels[::-1])
    fig.update_xaxes(title="% of the rank's time with a kernel running", range=[0, 100])
    # the legend above the plot takes a line per type set (their names are long)
    height = 150 + 40 * len(labels) + 20 * types["kernel_type"].nunique()
    return styled(fig, height=height, barmode="stack", legend_traceorder="normal")


def kernel_type_spread(types: pd.DataFrame) -> go.Figure:
    """``kernel_type_shares`` past ``MANY_RANKS`` ranks: each type's share a rank, stacked along the ranks sorted
    by their computation's share, the most first (a rank with no kernel of a type: 0 % of it)."""
    shares = types.pivot_table(index="rank", columns="kernel_type", values="pct", aggfunc="sum", fill_value=0.0,
                               sort=False).sort_index()
    kinds = list(dict.fromkeys(types["kernel_type"].astype(str)))  # in the order the view gives them
    computation = shares["COMPUTATION"] if "COMPUTATION" in shares else pd.Series(0.0, index=shares.index)
    fig = sorted_areas(_rank_labels(shares.index.to_series()),
                       [(kind.lower(), shares[kind].to_numpy(np.float64), TYPE_COLOURS.get(kind, "#A0A7B4"))
                        for kind in kinds],
                       computation.to_numpy(np.float64), "the most computation",
                       "% of the rank's time with a kernel running", "%{y:.1f} %",
                       height=340 + 20 * len(kinds))
    return fig.update_yaxes(range=[0, 100])


def overlap_bars(overlap: pd.DataFrame) -> go.Figure:
    """Each rank's communication hidden behind computation (``gpu.comm_comp_overlap``): the share of the time a
    communication kernel runs during which a computation kernel runs too. Past ``MANY_RANKS`` ranks, their
    distribution, the least hidden first (ranks with no communication last, at 0 %)."""
    if overlap.empty:
        return empty("No GPU kernel.")
    labels = _rank_labels(overlap["rank"])
    pct = overlap["comm_comp_overlap_pct"].to_numpy(np.float64)
    if len(labels) > MANY_RANKS:
        fig = sorted_areas(labels, [("hidden behind computation", np.nan_to_num(pct),
                                     TYPE_COLOURS["COMPUTATION overlapping COMMUNICATION"])],
                           pct, "the least hidden", "% of the communication kernels' time", "%{y:.1f} %",
                           most_first=False)
        return fig.update_yaxes(range=[0, 100])
    text = ["no communication" if np.isnan(p) else f"{p:,.1f} %" for p in pct.tolist()]  # a label per rank
    fig = go.Figure(go.Bar(y=labels, x=np.nan_to_num(pct), orientation="h", text=text, textposition="outside",
                           cliponaxis=False,
                           marker_color=TYPE_COLOURS["COMPUTATION overlapping COMMUNICATION"],
                           customdata=overlap["communication_ns"] / 1e9, name="hidden behind computation",
                           hovertemplate="%{y}: %{text} of %{customdata:.3s}s of communication<extra></extra>"))
    fig.update_yaxes(categoryorder="array", categoryarray=labels[::-1])
    fig.update_xaxes(title="% of the communication kernels' time", range=[0, 112], tickvals=list(range(0, 101, 20)))
    return styled(fig, height=max(200, 110 + 40 * len(labels)), showlegend=False)
