"""The System page's figure: every host process's timeline on one time axis, counters below it.

One row per (process, thread): spans as bars coloured by name (a span held by another drawn thinner
inside it), instants as markers on their row; below, sharing the time axis, a line per process and
counter (samples per second). Time is relative (seconds since the run's first event) or absolute
(the wall clock, UTC, on a date axis).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.figures.style import NANOSECOND_UNITS, bar_marker, empty, styled, with_unit
from popvision_py.format import system as S

RELATIVE, ABSOLUTE = "relative", "absolute"
# One colour per event the PopTorch shim records, the same on every run; other names take the palette in turn.
NAME_COLOURS: dict[str, str] = {
    S.MODEL_CALL: "#3B7DD8", S.COMPILE: "#8E6BBF", S.OPTIMIZER_UPDATE: "#F2A33A", S.DATA_LOADING: "#3FA672",
    S.WAIT_FOR_DATA: "#D64545", S.EPOCH: "#1f2933", S.WEIGHTS_TO_DEVICE: "#17becf", S.WEIGHTS_TO_HOST: "#bcbd22",
}
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf", "#bcbd22",
            "#aec7e8", "#ffbb78", "#98df8a"]
COUNTER_COLOURS = ["#3B7DD8", "#F2A33A", "#3FA672", "#8E6BBF", "#D64545", "#17becf"]
THICKNESS = (0.8, 0.55, 0.35, 0.22)  # a bar's height on its row at depth 0, 1, 2 and deeper
DATE_PRECISION_NS = 100_000  # plotly gives a date axis's range to 0.1 ms


def colours(families: Sequence[str]) -> dict[str, str]:
    """A colour per family: the shim's events their own, the others the palette in order."""
    out, spare = {}, iter(_PALETTE * (len(families) // len(_PALETTE) + 1))
    for name in families:
        out[name] = NAME_COLOURS.get(name) or next(spare)
    return out


def x_of(ns: Any, mode: str, origin_ns: int) -> Any:
    """Times (ns since 1970) on the figure's axis: seconds since ``origin_ns``, or datetimes (UTC)."""
    ns = np.asarray(ns, np.int64)
    if mode == ABSOLUTE:
        return ns.astype("datetime64[ns]")
    return (ns - origin_ns) / 1e9


def length_of(ns: Any, mode: str) -> Any:
    """Durations (ns) as bar lengths on the axis: seconds, or milliseconds on a date axis (plotly's unit)."""
    return np.asarray(ns, np.float64) / (1e6 if mode == ABSOLUTE else 1e9)


def from_x(value: Any, mode: str, origin_ns: int) -> int:
    """An axis value a zoom sends back, as ns since 1970: seconds since ``origin_ns``, or a date string (UTC).
    Whole nanoseconds are added to the origin, never through a float (a float holds 1.7e18 ns to 256 ns)."""
    if mode == ABSOLUTE:
        stamp = pd.Timestamp(value)
        stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
        return int(stamp.value)
    return origin_ns + round(float(value) * 1e9)


def clock(ns: int) -> str:
    """ns since 1970 as a UTC wall-clock time to the microsecond."""
    moment = datetime.fromtimestamp(ns // 1_000_000_000, timezone.utc)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{ns % 1_000_000_000 // 1000:06d} UTC"


def _at(part: pd.DataFrame, binned: bool) -> np.ndarray:
    """Where a point sits: an event's start, or a bin's middle."""
    start = part["start_ns"].to_numpy()
    return (start + part["end_ns"].to_numpy()) // 2 if binned else start


def _when(start: np.ndarray, mode: str, origin_ns: int) -> list[str]:
    if mode == ABSOLUTE:
        return [clock(int(t)) for t in start]
    return [f"{(int(t) - origin_ns) / 1e9:,.6f} s" for t in start]


def system_timeline(frame: pd.DataFrame, level: str, window: tuple[int, int], labels: Sequence[str], mode: str,
                    origin_ns: int) -> go.Figure:
    """The timeline of ``system.window(...)``'s ``frame`` over ``window`` (ns), one row per label (row code
    order), counters in a second panel below sharing the x axis."""
    if not len(labels):
        return empty("The system timeline files hold no events.")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.74, 0.26], vertical_spacing=0.07)
    label = np.asarray(labels, dtype=object)
    families = sorted(set(frame["family"]))
    palette = colours(families)
    spans = frame[frame["kind"] == "span"]
    # outer spans first, so that those they hold are drawn over them
    order = spans.groupby("family")["depth"].min().sort_values(kind="stable").index.tolist() if len(spans) else []
    binned = level == "bins"
    for name in order:
        part = spans[spans["family"] == name]
        depth = np.minimum(part["depth"].to_numpy(), len(THICKNESS) - 1)
        start = part["start_ns"].to_numpy()
        detail = [f"{with_unit(t, NANOSECOND_UNITS)} of {n} in {e:,} span(s)" if binned else
                  f"{n}: {with_unit(t, NANOSECOND_UNITS)}"
                  for t, n, e in zip(part["time_ns"].tolist(), part["name"].tolist(), part["events"].tolist())]
        fig.add_trace(go.Bar(
            y=label[part["row"].to_numpy()], x=length_of(part["time_ns"], mode), base=x_of(start, mode, origin_ns),
            width=np.asarray(THICKNESS)[depth], orientation="h", name=name, legendgroup=name,
            marker=bar_marker(palette[name], level),
            customdata=np.stack([detail, _when(start, mode, origin_ns)], axis=-1),
            hovertemplate="%{y}<br>%{customdata[0]}<br>from %{customdata[1]}<extra></extra>",
        ), row=1, col=1)
    points = frame[frame["kind"] == "instant"]
    for name in sorted(set(points["family"])):
        part = points[points["family"] == name]
        at = _at(part, binned)
        detail = [f"{n} ×{e:,} in this bin" if binned else n for n, e in zip(part["name"], part["events"])]
        fig.add_trace(go.Scatter(
            y=label[part["row"].to_numpy()], x=x_of(at, mode, origin_ns), mode="markers", name=name, legendgroup=name,
            marker=dict(symbol="diamond", size=10, color=palette[name], line=dict(width=1, color="#ffffff")),
            customdata=np.stack([detail, _when(at, mode, origin_ns)], axis=-1),
            hovertemplate="%{y}<br>%{customdata[0]}<br>at %{customdata[1]}<extra></extra>",
        ), row=1, col=1)
    counts = frame[frame["kind"] == "counter"]
    for k, ((process, thread, name), part) in enumerate(counts.groupby(["process", "thread", "name"], sort=True)):
        at = _at(part, binned)
        fig.add_trace(go.Scatter(
            x=x_of(at, mode, origin_ns), y=part["value"], mode="lines+markers" if len(part) <= 60 else "lines",
            name=f"{process} · {name}", line=dict(color=COUNTER_COLOURS[k % len(COUNTER_COLOURS)], width=2),
            marker=dict(size=5), customdata=_when(at, mode, origin_ns),
            hovertemplate=f"{process} · {thread}<br>{name}: %{{y:,.1f}}" + (" (mean of the bin)" if binned else "")
                          + "<br>at %{customdata}<extra></extra>",
        ), row=2, col=1)
    fig.update_yaxes(categoryorder="array", categoryarray=list(label[::-1]), type="category", fixedrange=True,
                     range=[-0.6, len(label) - 0.4], row=1, col=1)
    samples = not len(counts) or counts["name"].str.startswith("samples").all()
    fig.update_yaxes(title="samples/s" if samples else "value",
                     rangemode="tozero", fixedrange=True, row=2, col=1)
    x_range: list[Any] = [(int(t) - origin_ns) / 1e9 for t in window]
    if mode == ABSOLUTE:
        x_range = [str(pd.Timestamp(int(t))) for t in window]
        fig.update_xaxes(type="date")
    fig.update_xaxes(range=x_range, showgrid=True)
    fig.update_xaxes(title="wall clock (UTC)" if mode == ABSOLUTE else "seconds since the run's first event",
                     row=2, col=1)
    return styled(
        fig,
        height=max(360, 190 + 46 * len(label) + 170),
        barmode="overlay",
        dragmode="zoom",
        meta={"level": level, "mode": mode},
        margin=dict(l=170, r=20, t=40, b=45),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
    )
