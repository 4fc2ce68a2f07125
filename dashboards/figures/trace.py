"""The Trace page's figures: the BSP timeline of IPUs and of chosen tiles, and the tiles' busy share (balance)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboards.figures.ranks import busy_heatmap, share_heatmap
from dashboards.figures.style import CAPACITY_COLOUR, IPUS, PHASE_COLOURS, Naming, bar_marker, empty, styled
from popvision_py.format.schema import PHASES


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


def trace_timeline(frame: pd.DataFrame, level: str, window: tuple[int, int], ipus: Sequence[int],
                   naming: Naming = IPUS) -> go.Figure:
    """The BSP timeline: one row per IPU, one bar trace per phase (bars placed by base and width).

    ``frame``: ``trace.timeline(...).frame``; ``window``: the (start, end) cycles shown. At most
    ``max_bins × phases`` bars per IPU, drawn by five traces, whatever the trace's length. An imported
    trace: one row per rank, its compute, exposed communication, a GPU's copies and sets, and idle, in ns.
    """
    bars = timeline_bars(frame)
    labels = [naming.label(ipu) for ipu in sorted(ipus)]
    unit = naming.unit
    fig = go.Figure()
    for phase in naming.phases:
        part = bars[bars["phase"] == phase]
        name = naming.phase(phase)
        fig.add_trace(
            go.Bar(
                y=part["ipu"].map(naming.label),
                x=naming.x_of(part["width"]),
                base=naming.x_of(part["base"]),
                orientation="h",
                name=name,
                marker=bar_marker(PHASE_COLOURS[phase], level),
                customdata=np.stack([part["start_cycle"], part["end_cycle"], part["cycles"], part["events"]], axis=-1)
                if len(part) else None,
                hovertemplate=(
                    "%{y} " + name + "<br>" + unit + " %{customdata[0]:,} – %{customdata[1]:,}"
                    "<br>" + name + " %{customdata[2]:,} " + unit + " in %{customdata[3]:,} event(s)<extra></extra>"
                ),
                showlegend=True,
            )
        )
    fig.update_yaxes(categoryorder="array", categoryarray=labels[::-1], fixedrange=True)
    fig.update_xaxes(range=[naming.x_of(t) for t in window], title=naming.x_title, showgrid=True)
    return styled(
        fig,
        height=max(260, 110 + 55 * len(labels)),
        barmode="overlay",
        bargap=0.25,
        uirevision="trace",
        dragmode="zoom",
        meta={"level": level},
        margin=dict(l=80, r=20, t=40, b=45),
    )


def compute_heatmap(frame: pd.DataFrame, level: str, window: tuple[int, int], ipus: Sequence[int],
                    naming: Naming = IPUS) -> go.Figure:
    """Past ``MANY_RANKS`` IPUs (or ranks), the timeline as a heat map: a row per IPU, a column per time bin, each
    cell the share of the bin the IPU spent computing. ``frame``: a ``trace.timeline`` frame. Its bins (``level``
    "bins") are the columns, each cell its compute cycles over the bin's width; its events are cut into
    ``HEATMAP_BINS`` bins of ``window``."""
    order = np.asarray(sorted(ipus), np.int64)
    labels = [naming.label(int(ipu)) for ipu in order]
    compute = frame[frame["phase"].astype(str) == "compute"]
    row = np.searchsorted(order, compute["ipu"].to_numpy(np.int64))
    start, end = compute["start_cycle"].to_numpy(np.int64), compute["end_cycle"].to_numpy(np.int64)
    what, title = "computing", naming.x_title
    if level != "bins" or frame.empty:
        fig = busy_heatmap(row, start, end, labels, window, naming.x_of, what, title)
    else:  # the levels' bins, each cell its compute cycles over the bin
        width = int(frame["end_cycle"].iloc[0] - frame["start_cycle"].iloc[0])
        first = int(frame["start_cycle"].min())
        columns = -(-(int(frame["end_cycle"].max()) - first) // width)
        share = np.zeros((len(labels), columns))
        np.add.at(share, (row, (start - first) // width), compute["cycles"].to_numpy(np.float64))
        fig = share_heatmap(100.0 * share / width, naming.x_of(first + width * (np.arange(columns) + 0.5)), labels,
                            what, title)
    fig.update_traces(colorbar=dict(title=dict(text="% compute")))
    fig.update_xaxes(range=[naming.x_of(t) for t in window])
    fig.update_yaxes(title=f"{len(labels):,} {naming.device}s (zoom a box onto a few to see each)")
    return fig


def tile_cycles(frame: pd.DataFrame, title: str = "") -> go.Figure:
    """Cycles per tile of one compute set (``trace.tile_cycles``): the BSP step lasts as long as the slowest."""
    if frame.empty:
        return empty("This step has no per-tile cycles (it is not a compute set).", height=300)
    slowest = float(frame["cycles"].max())
    fig = go.Figure(go.Bar(x=frame["tile"], y=frame["cycles"],
                           marker=dict(color=PHASE_COLOURS["compute"], line=dict(width=0)),
                           hovertemplate="tile %{x}: %{y:,} cycles<extra></extra>", name="tile cycles"))
    fig.add_hline(y=slowest, line=dict(color=CAPACITY_COLOUR, dash="dash"),
                  annotation_text=f"slowest tile: {slowest:,.0f} cycles (the step's length)",
                  annotation_position="top left")
    fig.update_xaxes(title="tile")
    fig.update_yaxes(title="cycles", rangemode="tozero")
    return styled(fig, title=title or None, height=300, bargap=0, showlegend=False)


# A tile that has finished its share of a compute set waits at the sync for the slowest: a pale sync red.
TILE_PHASE_COLOURS = {**PHASE_COLOURS, "wait": "#F2B8B5"}
TILE_PHASE_NAMES = {"compute": "compute", "wait": "wait (done, at the sync)", "sync": "sync", "exchange": "exchange",
                    "stream": "stream", "idle": "idle"}


def tile_bars(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Where each row of a tile time line (``analysis.ipu.tiles.tile_timeline``, rows in tile, start and phase
    order) is drawn: ``base`` and ``width`` in cycles, as arrays.

    An execution is drawn where it ran; in a bin the phases of one tile sit side by side in phase
    order, each as wide as its cycles there (as ``timeline_bars`` does for IPUs).
    """
    tile, start = frame["tile"].to_numpy(), frame["start_cycle"].to_numpy()
    cycles = frame["cycles"].to_numpy()
    return {"tile": tile, "start_cycle": start, "cycles": cycles, "events": frame["events"].to_numpy(),
            "step": frame["step"].to_numpy(), "phase": np.asarray(frame["phase"].astype(str)),
            "base": side_by_side(tile, start, cycles), "width": cycles}


def side_by_side(row: np.ndarray, start: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Where each bar of a binned time line starts: the bars of one (row, bin start), consecutive in the arrays,
    laid one after the other from the bin's start, each as wide as its time there (the bin's shares, side by
    side). Columnar: one running sum, less each group's sum before it."""
    before = np.concatenate([[0], np.cumsum(width)])
    first = np.flatnonzero(np.r_[True, (row[1:] != row[:-1]) | (start[1:] != start[:-1])]) if len(row) else \
        np.zeros(0, np.int64)
    group_start = np.repeat(before[first], np.diff(np.r_[first, len(row)]))
    return start + before[:-1] - group_start


def tile_timeline(frame: pd.DataFrame, level: str, window: tuple[int, int], tiles: Sequence[int],
                  names: dict[int, str] | None = None) -> go.Figure:
    """Chosen tiles as BSP rows: one row per tile in the order chosen, one bar trace per phase.

    ``frame``: ``analysis.ipu.tiles.tile_timeline(...).frame``; ``names``: step names, shown on hover
    over an execution of a compute set (events level). Rows are categories named by the tile's
    number (small integers on the wire, however many bars).
    """
    bars = tile_bars(frame)
    fig = go.Figure()
    for phase, name in TILE_PHASE_NAMES.items():
        keep = bars["phase"] == phase
        text = None
        if level == "events" and names is not None:
            text = [f"step {s} · {names.get(s, '')}" if s >= 0 else "" for s in bars["step"][keep].tolist()]
        fig.add_trace(go.Bar(
            y=bars["tile"][keep].astype(np.int16 if len(tiles) and max(tiles) < 2**15 else np.int32),
            x=bars["width"][keep], base=bars["base"][keep], orientation="h", name=name, text=text, textposition="none",
            marker=bar_marker(TILE_PHASE_COLOURS[phase], level),
            customdata=np.stack([bars["start_cycle"][keep], bars["cycles"][keep], bars["events"][keep]], axis=-1)
            if keep.any() else None,
            hovertemplate=("tile %{y} " + name + "<br>from cycle %{customdata[0]:,}: %{customdata[1]:,} cycles in "
                           "%{customdata[2]:,} execution(s)" + ("<br>%{text}" if text is not None else "")
                           + "<extra></extra>"),
        ))
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=[int(t) for t in tiles][::-1],
                     tickvals=[int(t) for t in tiles], ticktext=[f"tile {int(t)}" for t in tiles], fixedrange=True)
    fig.update_xaxes(range=list(window), title="cycles", showgrid=True)
    return styled(fig, height=max(220, 100 + 22 * len(tiles)), barmode="overlay", bargap=0.2, dragmode="zoom",
                  meta={"level": level}, margin=dict(l=80, r=20, t=40, b=45))


def tile_balance(frame: pd.DataFrame, title: str = "", note: str = "of the step's cycles") -> go.Figure:
    """Each tile's busy share (``busy_pct``: its compute cycles over the step's, or the window's compute sets'),
    with the least, mean and most of the tiles that compute (cycles > 0) as lines."""
    working = frame[frame["cycles"] > 0]
    if working.empty:
        return empty(f"{title}: no tile computes here." if title else "No tile computes here.", height=300)
    fig = go.Figure(go.Bar(x=frame["tile"], y=frame["busy_pct"], customdata=frame["cycles"], name="busy share",
                           marker=dict(color=PHASE_COLOURS["compute"], line=dict(width=0)),
                           hovertemplate="tile %{x}: %{y:.1f} % busy (%{customdata:,} cycles)<extra></extra>"))
    share = working["busy_pct"]
    for label, value, dash_ in (("least", share.min(), "dot"), ("mean", share.mean(), "dash"),
                                ("most", share.max(), "solid")):
        fig.add_hline(y=float(value),
                      line=dict(color=CAPACITY_COLOUR if label == "least" else "#1f2933", dash=dash_, width=1),
                      annotation_text=f"{label} {value:.1f} %",
                      annotation_position={"least": "bottom right", "mean": "bottom left", "most": "top right"}[label])
    fig.update_xaxes(title="tile")
    fig.update_yaxes(title=f"busy, % {note}", rangemode="tozero")
    subtitle = (f"{len(working):,} of {len(frame):,} tiles compute · least {share.min():.1f} % · mean "
                f"{share.mean():.1f} % · most {share.max():.1f} %")
    return styled(fig, title=f"{title}<br><sup>{subtitle}</sup>" if title else subtitle, height=320, bargap=0,
                  showlegend=False, margin=dict(l=60, r=20, t=60, b=45))


CHAIN_COLOURS = {"compute": "#3B7DD8", "communication": "#D9822B", "waiting": "#C9CED6"}


def critical_chain(chain: pd.DataFrame, naming: Naming = IPUS) -> go.Figure:
    """One measured step's critical path across ranks (``report.critical_path.chain()``): its links as bars on
    their ranks' rows (compute, communication, waiting), joined in time order by a line, so the path's
    hops from rank to rank show."""
    if chain.empty:
        return empty("The step's critical path has no link.")
    fig = go.Figure()
    rows = chain.assign(row=[naming.label(int(r)) for r in chain["rank"]])
    for kind, part in rows.groupby("kind", sort=False):
        fig.add_trace(go.Bar(
            y=part["row"], x=part["ms"], base=part["start_ms"], orientation="h", name=str(kind),
            marker=dict(color=CHAIN_COLOURS.get(str(kind), "#888888")), hovertext=(
                part["what"] + "<br>" + part["ms"].map("{:,.2f} ms".format) + " from " + part["start_ms"].map(
                    "{:,.2f} ms".format)).tolist(), hoverinfo="text"))
    order = rows.sort_values("start_ms", kind="stable")
    fig.add_trace(go.Scatter(x=order["start_ms"] + order["ms"] / 2, y=order["row"], mode="lines", name="path",
                             line=dict(color="#1f2933", width=1), hoverinfo="skip"))
    ranks = sorted(set(rows["rank"].astype(int)), reverse=True)
    return styled(fig, height=160 + 40 * len(ranks), barmode="overlay", xaxis_title="ms from the step's start",
                  yaxis=dict(categoryorder="array", categoryarray=[naming.label(r) for r in ranks]),
                  legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0))
