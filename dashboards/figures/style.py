"""What every page's figures share: the colours (one meaning each), the layout, the blank figure, IPU
labels, and the units numbers are shown in (``components.fmt_*`` use the same ``with_unit``)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go

from popvision_py.format.schema import MEMORY_CATEGORIES, PHASES
from popvision_py.render.figures import MAX_STEPS, peaks_of_runs  # noqa: F401 - the memory figures' thinning
from popvision_py.render.rank_words import NS_PER_MS, PHASE_WORDS

# Colours: one meaning per colour across every page.
PHASE_COLOURS: dict[str, str] = {
    "compute": "#3B7DD8",
    "sync": "#D64545",
    "exchange": "#F2A33A",
    "stream": "#3FA672",
    "idle": "#D5D9E0",
}
# A GPU's kernels by kind (schema.KERNEL_KINDS), in the phases' colours their time takes in the execution trace:
# compute, communication as exchange, copies as stream (sets a paler green, beside them).
KERNEL_COLOURS: dict[str, str] = {
    "compute": PHASE_COLOURS["compute"],
    "communication": PHASE_COLOURS["exchange"],
    "memcpy": PHASE_COLOURS["stream"],
    "memset": "#9AD3B0",
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
FONT = "Inter, 'Segoe UI', system-ui, -apple-system, sans-serif"

_BASE_LAYOUT = dict(
    template="plotly_white",
    font=dict(family=FONT, size=12, color="#1f2933"),
    margin=dict(l=60, r=20, t=40, b=45),
    legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
    hoverlabel=dict(font=dict(family=FONT)),
)


# Plotly draws its mode bar (zoom, pan, download) over the top right corner of a figure, this many pixels
# high: a legend drawn over the plot starts below it, and so does a title in the top margin.
MODEBAR_PX = 30
TITLE_PX = 22


# A bar's outline, in px, at a binned time line's level of detail. Plotly widens a bar of an opaque colour and no
# outline that is narrower than 2 px to whole pixels (its bar/plot.js), so that a short event shows; in a bin, where
# the kinds' bars lie side by side, that drew the last kind a pixel wide in every bin of about a pixel (800 bins on
# a 1,280 px page): 95% of a rank's row idle where its bins were 84% compute. With an outline, each bar is drawn
# at its width.
HAIRLINE_PX = 0.02


def bar_marker(colour: str, level: str) -> dict:
    """A time line's bar trace's marker: at ``level`` ``bins`` with a hairline of its own colour (``HAIRLINE_PX``),
    each bar at its width; else without outline, an event narrower than a pixel drawn a pixel wide."""
    return dict(color=colour, line=dict(width=HAIRLINE_PX if level == "bins" else 0, color=colour))


def styled(fig: go.Figure, title: str | None = None, height: int | None = None, **layout: object) -> go.Figure:
    """``fig`` in the dashboard's common layout, with its title, height and ``layout`` over it."""
    fig.update_layout(**_BASE_LAYOUT)
    if title:
        fig.update_layout(title=dict(text=title, x=0, xanchor="left", font=dict(size=14)))
    if height:
        fig.update_layout(height=height)
    fig.update_layout(**layout)
    return clear_of_mode_bar(fig)


def clear_of_mode_bar(fig: go.Figure) -> go.Figure:
    """``fig`` with a legend above its plot moved below the mode bar's band (and below the title, if any).

    A legend placed above the plot (``yanchor="bottom"``, ``y >= 1``) grows upwards into the mode bar as it
    gains entries or the figure narrows. Anchored to the figure's top instead, it starts at the band's foot and
    grows downwards; plotly then moves the plot down to make room for it.
    """
    legend = fig.layout.legend
    on_top = legend.orientation == "h" and legend.yanchor == "bottom" and (legend.y or 0) >= 1
    if fig.layout.showlegend is False or not on_top or legend.yref == "container":
        return fig
    height = float(fig.layout.height or 450)  # plotly's default height
    top = MODEBAR_PX
    if fig.layout.title.text:
        fig.update_layout(title=dict(yref="container", yanchor="top", y=1 - 6 / height))
        top = max(top, 6 + TITLE_PX)
    fig.update_layout(legend=dict(yref="container", yanchor="top", y=1 - top / height))
    return fig


EMPTY_LINE_CHARS = 52  # a half-width panel's line at 1,280 px, in the annotation's 14 px font


def empty(message: str, height: int = 260) -> go.Figure:
    """A blank figure that says why there is nothing to draw, its sentence wrapped to fit a half-width panel
    (plotly draws an annotation on one line, cut at the figure's edge)."""
    fig = go.Figure()
    fig.add_annotation(text="<br>".join(textwrap.wrap(message, EMPTY_LINE_CHARS)) or message, showarrow=False,
                       x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=14, color="#6b7280"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return styled(fig, height=height)


def ipu_label(ipu: int, ranks: Sequence[int] | None = None) -> str:
    """IPU -1 is the host and -2 streaming memory (the exchange tables' convention). With ``ranks`` (a profile
    imported from PyTorch traces: the rank of each IPU) an IPU is its rank: 'Rank 2'."""
    ipu = int(ipu)
    if ranks is not None and ipu >= 0:
        return f"Rank {ranks[ipu] if ipu < len(ranks) else ipu}"
    return {-1: "host", -2: "streaming memory"}.get(ipu, f"IPU {ipu}")


@dataclass(frozen=True)
class Naming:
    """How the pages name a profile's devices and time: IPUs and cycles, or for a profile imported from
    PyTorch profiler traces (``ranks``: the rank of each IPU) ranks and nanoseconds (one cycle is one ns)."""

    ranks: tuple[int, ...] | None = None
    gpu: bool = False  # an imported GPU trace: its GPU's copies and sets are a phase of their own (``stream``)

    @property
    def imported(self) -> bool:
        return self.ranks is not None

    def label(self, ipu: int) -> str:
        """'IPU 2', or 'Rank 2'."""
        return ipu_label(ipu, self.ranks)

    @property
    def device(self) -> str:
        return "rank" if self.imported else "IPU"

    @property
    def unit(self) -> str:
        """What the figures' times count: cycles, or ns (an imported trace's cycle is 1 ns)."""
        return "ns" if self.imported else "cycles"

    @property
    def scale(self) -> tuple[float, str]:
        """(divisor, unit) of the time axes no zoom asks the server about: cycles, or an imported trace's ms."""
        return (NS_PER_MS, "ms") if self.imported else (1.0, "cycles")

    @property
    def x_title(self) -> str:
        """The time lines' x axis: cycles, or an imported trace's ms (its ns read as '0.2B' in plotly's ticks)."""
        return "ms on the profile's time line" if self.imported else "cycles"

    def x_of(self, cycles: Any) -> Any:
        """Cycles (an array, a number) as the time lines' x values: as they are, or an imported trace's ns in ms."""
        return cycles / self.scale[0] if self.imported else cycles

    def from_x(self, x: Any) -> float:
        """A time line's x value (a zoom's end) back in cycles or ns."""
        return float(x) * self.scale[0]

    @property
    def time(self) -> str:
        """Whose time the phases share: 'IPU time', or 'rank time'."""
        return "rank time" if self.imported else "IPU time"

    @property
    def phases(self) -> tuple[str, ...]:
        """The phases the time is in: an imported trace has no syncs, only compute, communication that the rank
        waits for (the ``exchange`` phase) and idle, and a GPU trace its GPU's copies and sets (``stream``)."""
        if not self.imported:
            return tuple(PHASES)
        return ("compute", "exchange", "stream", "idle") if self.gpu else ("compute", "exchange", "idle")

    def phase(self, phase: str) -> str:
        """A phase's name on the pages: an imported trace's exchange phase is its exposed communication, its stream
        phase its GPU's copies and sets."""
        return PHASE_WORDS.get(phase, phase) if self.imported else phase


IPUS = Naming()


# Units of the shown numbers as (starts at, scale, suffix, decimals), smallest first; decimals None shows
# whole numbers whole and others with 2 decimals. Counts stay whole below 10,000 ("9,999", not "10.0 k").
COUNT_UNITS = ((0.0, 1.0, "", None), (1e4, 1e3, " k", 1), (1e6, 1e6, " M", 1), (1e9, 1e9, " G", 1),
               (1e12, 1e12, " T", 1))
BYTE_UNITS = ((0.0, 1.0, " B", 0),) + tuple((1024.0**p, 1024.0**p, f" {u}", 2)
                                            for p, u in enumerate(("KiB", "MiB", "GiB", "TiB"), 1))
SHORT_BYTE_UNITS = tuple((start, scale, suffix, min(decimals, 1))
                         for start, scale, suffix, decimals in BYTE_UNITS)
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
