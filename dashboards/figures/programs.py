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
    """A node's line: its name (and repeats), then its figures as one text (two components a node: a
    tree of a thousand nodes stays quick to build, send and draw); its phase colours the line's edge."""
    times = f" ×{fmt_int(row['repeats'])}" if row["kind"] == "repeat" or row["repeats"] != 1 else ""
    ops = row["op"] or (f"{row['ops']} ops" if row["ops"] > 1 else "")
    figures = (f"{row['kind'].replace('_', ' ')} · {fmt_count(row['cycles'])} cycles × {fmt_count(row['executions'])}"
               f" = {fmt_count(row['total_cycles'])} · {row['share_pct']:.1f}%" + (f" · {ops}" if ops else "")
               + (f" · {row['detail']}" if row["detail"] else ""))
    return [html.Span(_label(row["name"], words) + [times], className="program-name"),
            html.Span(figures, className="program-figures")]


def tree(frame: pd.DataFrame, keep: np.ndarray | None = None, words: str = "",
         open_depth: int = OPEN_DEPTH) -> list[Any]:
    """The nodes of ``frame`` (``programs.COLUMNS``, pre-order) where ``keep`` is true, nested.

    With ``words`` (a search), every node kept is open and the words are marked in the names;
    otherwise nodes open down to ``open_depth``."""
    kept = np.flatnonzero(np.ones(len(frame), bool) if keep is None else keep)
    columns = {c: frame[c].to_numpy()[kept].tolist() for c in ("node", "parent", "depth", "kind", "name", "op", "ops",
                                                             "repeats", "executions", "cycles", "total_cycles",
                                                             "share_pct", "detail", "phase")}
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    position = {node: k for k, node in enumerate(columns["node"])}
    kids: list[list[Any]] = [[] for _ in rows]
    roots: list[Any] = []
    # Children before parents (reverse pre-order): each node is built once, from its built children.
    for index in range(len(rows) - 1, -1, -1):
        row = rows[index]
        children = kids[index][::-1]
        edge = {"borderLeftColor": PHASE_COLOURS.get(row["phase"], "#A0A7B4")}
        line = _line(row, words)
        if children:
            element: Any = html.Details(
                [html.Summary(line, className="program-line", style=edge)] + children,
                open=bool(words) or row["depth"] < open_depth, className="program-node",
                **{"data-node": str(row["node"])})
        else:
            element = html.Div(line, className="program-line program-leaf", style=edge,
                               **{"data-node": str(row["node"])})
        parent = position.get(row["parent"], -1)
        (kids[parent] if parent >= 0 else roots).append(element)
    return roots[::-1]
