"""The Exchange page's figures (and the Summary page's time by phase): the source to destination
matrix, bytes and cycles by kind, and the run's time by phase."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.figures.ranks import MANY_RANKS, MATRIX_BINS, binned_matrix, sorted_areas
from dashboards.figures.style import (IPUS, MODEBAR_PX, NANOSECOND_UNITS, PHASE_COLOURS, SHORT_BYTE_UNITS, Naming,
                                      byte_ticks, empty, styled, with_unit)


def _shown(value: str, naming: Naming) -> tuple[float, str, str]:
    """How a matrix of ``value`` shows its cells' values: (divisor, unit, hover's number format). Bytes as they
    are; cycles, or an imported trace's ns in ms (``Naming.scale``: its colour bar's ns read '100M')."""
    if value == "bytes":
        return 1.0, "bytes", ",.0f"
    divisor, unit = naming.scale
    return divisor, unit, ",.3f" if naming.imported else ",.0f"


def exchange_matrix(matrix: pd.DataFrame, value: str = "bytes", naming: Naming = IPUS) -> go.Figure:
    """Bytes (or cycles) moved from each source to each destination (``exchange.matrix()``); an imported
    trace's time in ms (``_shown``)."""
    if matrix.empty:
        return empty(f"No exchanges between {naming.device}s.")
    endpoints = sorted(set(matrix["src_ipu"]) | set(matrix["dst_ipu"]), key=lambda i: (i < 0, abs(i)))
    if len(endpoints) > MATRIX_BINS:
        return binned_exchange_matrix(matrix, value, naming, endpoints)
    grid = matrix.pivot_table(index="dst_ipu", columns="src_ipu", values=value, aggfunc="sum")
    grid = grid.reindex(index=endpoints, columns=endpoints)
    labels = [naming.label(i) for i in endpoints]
    divisor, unit, number = _shown(value, naming)
    # each cell's text (np.frompyfunc: DataFrame.map needs pandas 2.1)
    text = np.frompyfunc(lambda v: "" if pd.isna(v) or v == 0 else (short_bytes(v) if value == "bytes" else
                                                                    f"{v:,.0f}" if not naming.imported else
                                                                    with_unit(v, NANOSECOND_UNITS)), 1, 1)(
        grid.to_numpy().astype(object))
    fig = go.Figure(go.Heatmap(z=grid.to_numpy(dtype=float) / divisor, x=labels, y=labels, colorscale="Blues",
                               zmin=0, text=text, texttemplate="%{text}", hoverongaps=False,
                               colorbar=dict(title=dict(text=unit, side="right"), thickness=12,
                                             **(byte_ticks(float(np.nanmax(grid.to_numpy(dtype=float))))
                                                if value == "bytes" else {})),
                               hovertemplate="%{x} → %{y}<br>%{z:" + number + "} " + unit + "<extra></extra>"))
    fig.update_xaxes(title="source", side="bottom")
    fig.update_yaxes(title="destination", autorange="reversed")
    return styled(fig, height=max(300, 120 + 45 * len(labels)))


def binned_exchange_matrix(matrix: pd.DataFrame, value: str, naming: Naming, endpoints: list) -> go.Figure:
    """``exchange_matrix`` of more than ``MATRIX_BINS`` endpoints: summed into bins of consecutive ranks a side
    (``ranks.binned_matrix``), each cell its bins' total; a fixed height."""
    grid, spans = binned_matrix(matrix["src_ipu"].to_numpy(), matrix["dst_ipu"].to_numpy(),
                                matrix[value].to_numpy(), endpoints)
    labels = [naming.label(a) if a == b else f"{naming.label(a)} – {b}" for a, b in spans]
    divisor, unit, number = _shown(value, naming)
    fig = go.Figure(go.Heatmap(z=grid / divisor, x=labels, y=labels, colorscale="Blues", zmin=0, hoverongaps=False,
                               colorbar=dict(title=dict(text=unit, side="right"), thickness=12),
                               hovertemplate="%{x} → %{y}<br>%{z:" + number + "} " + unit + " in all<extra></extra>"))
    fig.update_xaxes(title=f"source ({len(endpoints):,} endpoints in {len(spans)} bins; zoom to read a bin)",
                     side="bottom", showticklabels=False)
    fig.update_yaxes(title="destination", autorange="reversed", showticklabels=False)
    return styled(fig, height=620, meta={"binned": True})


def exchange_submatrix(matrix: pd.DataFrame, value: str, naming: Naming, sources: list, destinations: list
                       ) -> go.Figure:
    """The transfers from ``sources`` to ``destinations`` (a box zoomed onto a binned matrix), each pair its own
    cell, on a fixed height."""
    part = matrix[matrix["src_ipu"].isin(sources) & matrix["dst_ipu"].isin(destinations)]
    grid = part.pivot_table(index="dst_ipu", columns="src_ipu", values=value, aggfunc="sum")
    grid = grid.reindex(index=destinations, columns=sources)
    divisor, unit, number = _shown(value, naming)
    fig = go.Figure(go.Heatmap(z=grid.to_numpy(dtype=float) / divisor, x=[naming.label(i) for i in sources],
                               y=[naming.label(i) for i in destinations], colorscale="Blues", zmin=0,
                               hoverongaps=False, colorbar=dict(title=dict(text=unit, side="right"), thickness=12),
                               hovertemplate="%{x} → %{y}<br>%{z:" + number + "} " + unit + "<extra></extra>"))
    fig.update_xaxes(title=f"source ({len(sources):,} of them; double-click for every rank)", side="bottom")
    fig.update_yaxes(title="destination", autorange="reversed")
    return styled(fig, height=620)


def short_bytes(value: float) -> str:
    """A matrix cell's bytes, one decimal: '1.5 KiB'."""
    return with_unit(value, SHORT_BYTE_UNITS)


def exchange_by_kind(by_kind: pd.DataFrame, naming: Naming = IPUS) -> go.Figure:
    """Bytes and cycles by kind of exchange (``exchange.by_kind()``), side by side (an imported trace's
    time in ms, ``Naming.scale``: its ns read as '100M' in plotly's ticks)."""
    if by_kind.empty:
        return empty("No exchanges.")
    frame = by_kind.copy()
    frame["kind"] = frame["kind"].astype(str).str.replace("_", " ")
    divisor, unit = naming.scale
    fig = make_subplots(rows=1, cols=2, subplot_titles=("bytes", unit), horizontal_spacing=0.12)
    fig.add_trace(go.Bar(x=frame["kind"], y=frame["bytes"], marker_color="#3B7DD8", name="bytes",
                         hovertemplate="%{x}: %{y:,} bytes<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Bar(x=frame["kind"], y=frame["cycles"] / divisor, marker_color=PHASE_COLOURS["exchange"],
                         name=unit, customdata=frame["time_pct"],
                         hovertemplate="%{x}: %{y:,} " + unit + " (%{customdata:.1f} % of the time)<extra></extra>"),
                  row=1, col=2)
    if frame["bytes"].any():
        fig.update_yaxes(row=1, col=1, **byte_ticks(float(frame["bytes"].max())))
    else:  # no size recorded (a NCCL kernel without its message's): a sentence, not an empty axis from -1 to 1
        fig.update_yaxes(row=1, col=1, range=[0, 1], showticklabels=False, showgrid=False)
        fig.add_annotation(text="the traces record no sizes" if naming.imported else "no bytes moved",
                           xref="x domain", yref="y domain", x=0.5, y=0.5, showarrow=False)
    # the subplots' titles sit above the plots: below the mode bar's band
    return styled(fig, height=320, showlegend=False, margin=dict(l=60, r=20, t=MODEBAR_PX + 28, b=45))


def phase_shares(shares: Mapping[str, float], title: str | None = None, naming: Naming = IPUS) -> go.Figure:
    """One stacked bar of the run's time by phase (percentages from ``exchange.figures()``); an imported
    trace's phases are compute, exposed communication, a GPU's copies and sets, and idle (``Naming.phases``)."""
    fig = go.Figure()
    phases = [p for p in naming.phases if p != "stream" or not naming.imported or shares.get(p)]  # no copies: none
    for phase in phases:
        pct = float(shares.get(phase, 0.0) or 0.0)
        name = naming.phase(phase)
        fig.add_trace(go.Bar(y=[""], x=[pct], orientation="h", name=f"{name} {pct:.1f} %",
                             marker_color=PHASE_COLOURS[phase],
                             hovertemplate=f"{name}: {pct:.1f} % of {naming.time}<extra></extra>"))
    fig.update_xaxes(range=[0, 100], title=f"% of {naming.time}", ticksuffix=" %")
    fig.update_yaxes(visible=False)
    # a GPU trace's four long legend entries take two lines in half a page: room for them above the bar
    height = (170 if not title else 190) + (30 if naming.imported and len(phases) > 3 else 0)
    return styled(fig, title=title, barmode="stack", height=height,
                  margin=dict(l=20, r=20, t=60 if title else 30, b=40),
                  legend=dict(orientation="h", yanchor="bottom", y=1.05, x=0))


def _parts(comm: pd.DataFrame) -> list[tuple[str, str, str]]:
    """The parts of a rank's time stacked to its whole (column, name, colour): compute, exposed communication, a
    GPU's copies and sets where a rank has any, idle."""
    copies = "copies_cycles" in comm and bool((comm["copies_cycles"] > 0).any())
    return [("compute_cycles", "compute", PHASE_COLOURS["compute"]),
            ("exposed_comm_cycles", "exposed communication", PHASE_COLOURS["exchange"]),
            *([("copies_cycles", "copies and sets", PHASE_COLOURS["stream"])] if copies else []),
            ("idle_cycles", "idle", PHASE_COLOURS["idle"])]


def communication(comm: pd.DataFrame, clock_hz: float, naming: Naming = IPUS) -> go.Figure:
    """Each rank's time (``exchange.communication()``): compute, communication it waited for (exposed) and
    idle, stacked to its whole time; beside them, the communication hidden behind its compute."""
    if comm.empty:
        return empty("No ranks.")
    if len(comm) > MANY_RANKS:
        return communication_spread(comm, clock_hz, naming)
    labels = [naming.label(ipu) for ipu in range(len(comm))]  # a row per IPU (rank), in order
    fig = go.Figure()
    for column, name, colour in _parts(comm):
        seconds = comm[column].to_numpy(dtype=float) / clock_hz
        fig.add_trace(go.Bar(x=labels, y=seconds * 1e3, name=name, marker_color=colour, offsetgroup="time",
                             customdata=[with_unit(v * 1e9, NANOSECOND_UNITS) for v in seconds],
                             hovertemplate="%{x}: %{customdata} " + name + "<extra></extra>"))
    hidden = comm["hidden_comm_cycles"].to_numpy(dtype=float) / clock_hz
    fig.add_trace(go.Bar(x=labels, y=hidden * 1e3, name="communication hidden behind compute", offsetgroup="hidden",
                         marker=dict(color="#FBD9A6", pattern=dict(shape="/", size=6)),
                         customdata=np.stack([[with_unit(v * 1e9, NANOSECOND_UNITS) for v in hidden],
                                              comm["hidden_comm_pct"].to_numpy(dtype=float)], axis=-1),
                         hovertemplate="%{x}: %{customdata[0]} hidden behind compute (%{customdata[1]:.0f} % of its "
                                       "communication)<extra></extra>"))
    fig.update_yaxes(title="ms", rangemode="tozero")
    return styled(fig, barmode="relative", height=340)


def communication_spread(comm: pd.DataFrame, clock_hz: float, naming: Naming = IPUS, named: int = 3) -> go.Figure:
    """``communication`` past ``MANY_RANKS`` ranks: a bar each would be a pixel wide, so the ranks are sorted by
    compute, the most first, and their compute, exposed communication and idle drawn as stacked areas along that
    order (the hidden communication a line over them): the distribution, each rank on hover, up to ``named``
    with the most compute named where they stand out from the median (``ranks.sorted_areas``)."""
    def ms(column: str) -> np.ndarray:
        return comm[column].to_numpy(np.float64) / clock_hz * 1e3

    return sorted_areas([naming.label(i) for i in range(len(comm))],
                        [(name, ms(column), colour) for column, name, colour in _parts(comm)],
                        comm["compute_cycles"].to_numpy(np.float64), "the most compute", "ms", "%{y:,.3f} ms",
                        lines=[("communication hidden behind compute", ms("hidden_comm_cycles"), "#F2A33A")],
                        named=named)
