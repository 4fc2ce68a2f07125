"""The Program tree page's tree: the analysis's flat table (``programs.tree``) as nested ``html.Details``.

Each node with children is a ``<details>`` element whose ``<summary>`` line shows the node; the
browser opens and closes it without asking the server, so expanding a node costs nothing and the
page keeps no state of which nodes are open. A node's colour is its phase's (``PHASE_COLOURS``,
the execution trace's); its line gives its repeats, cycles of one execution, executions, total
and share of the IPU, and its ops. A pure function of the table: tests call it directly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from dash import html

from dashboards.components import fmt_count, fmt_int
from dashboards.figures.style import PHASE_COLOURS

OPEN_DEPTH = 4  # the IPU, its runs, the device iterations and the micro-batch loop start open


def _label(name: str, words: str) -> list[Any]:
    """The name, with the searched ``words`` marked where they occur (case-insensitive)."""
    if not words:
        return [name]
    at = name.lower().find(words)
    if at < 0:
        return [name]
    return [name[:at], html.Mark(name[at:at + len(words)]), name[at + len(words):]]


def _line(row: dict, words: str) -> list[Any]:
    times = f"×{fmt_int(row['repeats'])}" if row["kind"] == "repeat" or row["repeats"] != 1 else ""
    ops = row["op"] or (f"{row['ops']} ops" if row["ops"] > 1 else "")
    return [
        html.Span(className="program-swatch", style={"background": PHASE_COLOURS.get(row["phase"], "#A0A7B4")},
                  title=row["phase"]),
        html.Span(_label(row["name"], words), className="program-name"),
        html.Span(times, className="program-repeats"),
        html.Span(row["kind"].replace("_", " "), className="program-kind"),
        html.Span(f"{fmt_count(row['cycles'])} cycles × {fmt_count(row['executions'])} = "
                  f"{fmt_count(row['total_cycles'])}", className="program-cycles",
                  title=f"{fmt_int(row['cycles'])} cycles x {fmt_int(row['executions'])} executions = "
                        f"{fmt_int(row['total_cycles'])} cycles"),
        html.Span(f"{row['share_pct']:.1f}%", className="program-share"),
        html.Span(ops, className="program-ops"),
        html.Span(row["detail"], className="program-detail"),
    ]


def tree(frame: pd.DataFrame, keep: np.ndarray | None = None, words: str = "",
         open_depth: int = OPEN_DEPTH) -> list[Any]:
    """The nodes of ``frame`` (``programs.COLUMNS``, pre-order) where ``keep`` is true, nested.

    With ``words`` (a search), every node kept is open and the words are marked in the names;
    otherwise nodes open down to ``open_depth``."""
    rows = frame.to_dict("records")
    keep = np.ones(len(rows), bool) if keep is None else keep
    kids: list[list[Any]] = [[] for _ in rows]
    roots: list[Any] = []
    # Children before parents (reverse pre-order): each node is built once, from its built children.
    for index in range(len(rows) - 1, -1, -1):
        if not keep[index]:
            continue
        row = rows[index]
        children = kids[index][::-1]
        line = _line(row, words)
        node_id = {"data-node": str(row["node"])}
        if children:
            element: Any = html.Details(
                [html.Summary(line, className="program-line")] + children,
                open=bool(words) or row["depth"] < open_depth, className="program-node", **node_id)
        else:
            element = html.Div(line, className="program-line program-leaf", **node_id)
        parent = row["parent"]
        (kids[parent] if parent >= 0 else roots).append(element)
    return roots[::-1]
