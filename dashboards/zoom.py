"""What a zoom on a timeline asks the server for: the window of a relayout event, clamped to the run.

The Execution trace, GPU and System pages draw a window of their timeline at the level of detail the
analysis gives for it (``trace.timeline``, ``system.window``); each zoom, pan or double-click sends
plotly's ``relayoutData``, and these functions turn it into the window to ask for.

A page's zoom callback listens to the graph's moves (``follow_moves``), not to ``relayoutData`` itself: plotly
sends a relayout event for more than a zoom (a resize's ``autosize``, the mode bar's ``dragmode``), and Dash drops
the answer of a callback still running when its input changes again, so the zoom's figure, asked for and then
lost to the pan button clicked before it came, was never drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dash
from dash import Input, Output, dcc

# In the browser: a relayout event that moves an axis (a zoom, a pan, a double-click back to the whole
# range, a box over rows) goes on to the Store; any other (autosize, dragmode) changes nothing.
AXIS_MOVES = """function (relayout) {
    const moved = relayout && Object.keys(relayout).some(key => /^[xy]axis/.test(key));
    return moved ? relayout : window.dash_clientside.no_update;
}"""


def moves_id(graph_id: str) -> str:
    """The id of the Store that holds ``graph_id``'s last axis move (``follow_moves``)."""
    return f"{graph_id}-moves"


def follow_moves(graph_id: str) -> str:
    """Copies ``graph_id``'s relayout events that move an axis onto its Store (``moves_store``), in the browser;
    once, at the page module's import. The id of the Store, for the zoom callback's Input."""
    dash.clientside_callback(AXIS_MOVES, Output(moves_id(graph_id), "data"), Input(graph_id, "relayoutData"),
                             prevent_initial_call=True)
    return moves_id(graph_id)


def moves_store(graph_id: str) -> dcc.Store:
    """The Store of ``graph_id``'s axis moves, for the page's layout, beside the graph."""
    return dcc.Store(id=moves_id(graph_id))


def x_range(relayout: dict | None) -> tuple[Any, Any] | str | None:
    """The x range a relayout event sets, as the axis gives its ends (numbers, or date strings on a date
    axis); ``"auto"`` when an x axis went back to autorange; None when the event is not about x (a legend
    click, a y zoom). Any x axis counts: in figures of stacked subplots sharing x, the one dragged is named."""
    if not relayout:
        return None
    axes = sorted({key.split(".", 1)[0] for key in relayout if key.startswith("xaxis")})
    if any(relayout.get(f"{axis}.autorange") for axis in axes):
        return "auto"
    for axis in axes:
        if f"{axis}.range[0]" in relayout and f"{axis}.range[1]" in relayout:
            return relayout[f"{axis}.range[0]"], relayout[f"{axis}.range[1]"]
        whole = relayout.get(f"{axis}.range")
        if isinstance(whole, (list, tuple)) and len(whole) == 2:
            return whole[0], whole[1]
    return None


def window_from_relayout(relayout: dict | None, extent: tuple[int, int],
                         to_units: Callable[[Any], float] = float, snap: int = 0) -> tuple[int, int] | None:
    """The (start, end) a zoom asks for in whole units (cycles, ns), clamped to the run's ``extent``; the
    whole run on autorange; None when the event is not about the x axis. ``to_units`` turns an axis value
    into the units (seconds from the run's start, or a date, into ns since 1970). An end within ``snap``
    units of the run's is the run's: an axis that rounds its values (plotly's dates, to 0.1 ms) would
    otherwise cut the first or last event off a window that holds them."""
    found = x_range(relayout)
    if found is None:
        return None
    start, end = extent
    if found == "auto":
        return start, end
    try:
        low, high = int(to_units(found[0])), int(to_units(found[1])) + 1
    except (TypeError, ValueError, OverflowError):
        return None
    low, high = max(start, min(low, high)), min(end, max(low, high))
    low, high = (start if low - start <= snap else low), (end if end - high <= snap else high)
    if high <= low:
        high = min(end, low + 1)
    return low, high
