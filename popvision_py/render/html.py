"""One self-contained HTML page: plotly figures (plotly.js inlined once) and the report's tables."""

from __future__ import annotations

import html
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from popvision_py.analysis.common.answer import Table
from popvision_py.render import figures as F
from popvision_py.render.document import Document
from popvision_py.render.format import IDENTIFIERS, heading, identifier, value
from popvision_py.render.rank_words import figure_in_words

MAX_ROWS = 200
MAX_CELL = 160  # characters of a cell shown, the whole text on hover: a CUDA kernel's template arguments run to 2,000

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.6em} h2{border-bottom:2px solid #2b8cbe;padding-bottom:.2em;margin-top:2em} h3{font-size:1.05em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0 1em} th,td{padding:.25em .6em;border-bottom:1px solid #ddd}
th{background:#f4f4f4;text-align:left} td.n{text-align:right;font-variant-numeric:tabular-nums}
.table-wrap{overflow-x:auto;max-width:100%}
.note{color:#666;font-size:.85em} .error{color:#b00} .warning{color:#b60}
"""


def _table(data: Table | pd.DataFrame) -> str:
    """A table's first ``MAX_ROWS`` rows (only those made a frame) and how many more there are."""
    rows = len(data)
    frame = data.head(MAX_ROWS).frame() if isinstance(data, Table) else data
    if not len(frame.columns) or not rows:
        return "<p class='note'>(no rows)</p>"
    shown = frame.head(MAX_ROWS)
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
               for c in frame.columns]
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = []
    for row in shown.itertuples(index=False):
        body.append("<tr>" + "".join(_cell(identifier(v) if c in IDENTIFIERS else value(v), n)
                                     for v, n, c in zip(row, numeric, frame.columns)) + "</tr>")
    more = (f"<p class='note'>... {rows - MAX_ROWS:,} more rows (use --format csv or json for all)</p>"
            if rows > MAX_ROWS else "")
    # a table wider than the page scrolls sideways in its own box, not the page
    return (f"<div class='table-wrap'><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            f"</div>{more}")


def _cell(text: str, numeric: bool) -> str:
    """A table cell: a number right-aligned; a text past ``MAX_CELL`` characters cut there, the whole on hover."""
    kind = "n" if numeric else ""
    if len(text) <= MAX_CELL:
        return f"<td class='{kind}'>{html.escape(text)}</td>"
    return f"<td class='{kind}' title='{html.escape(text)}'>{html.escape(text[:MAX_CELL - 1])}…</td>"


def _figures_for(doc: Document) -> dict[str, list[go.Figure]]:
    """Figures per section, built from the document's blocks: only the blocks a figure draws are made frames, and
    only while it is built (a 10 GB import's liveness by step alone is a frame of 17 MiB)."""
    data = _Frames(doc)
    out: dict[str, list[go.Figure]] = {}

    def add(section: str, build, *keys: str) -> None:
        if all(k in data and (isinstance(data[k], dict) or len(data[k])) for k in keys):
            out.setdefault(section, []).append(build(*(data[k] for k in keys)))

    tile_bytes = data.get("summary.figures", {}).get("bytes_per_tile", 0)  # "not recorded" where memory is not
    bytes_per_tile = int(tile_bytes or 0) if not isinstance(tile_bytes, str) else 0
    if "memory.by_tile" in data and not bytes_per_tile and len(data.get("memory.by_ipu", [])):
        by_ipu = data["memory.by_ipu"]
        bytes_per_tile = int(by_ipu["capacity_bytes"].iloc[0] / max(len(data["memory.by_tile"]) / len(by_ipu), 1))
    add("memory", F.memory_by_ipu, "memory.by_ipu")
    if not doc.rank_words:  # an imported trace's rank has no tiles: the report says so, and draws none
        add("memory", lambda t: F.tile_map(t, bytes_per_tile), "memory.by_tile")
        add("memory", lambda t: F.tile_histogram(t, bytes_per_tile), "memory.by_tile")
    add("liveness", F.liveness, "liveness.by_step")
    add("stages", F.gantt, "stages.gantt")
    imported = doc.rank_words
    pipeline = data.get("stages.figures", {}).get("bottleneck_stage", 0) != -1  # -1: data parallel, no stages
    if pipeline or not imported:
        add("stages", F.stage_times, "stages.summary")
    add("exchange", lambda f: F.phases(f, imported), "exchange.figures")
    add("exchange", lambda t: F.exchange_by_kind(t, imported), "exchange.by_kind")
    matrix = data.get("exchange.matrix")
    if not imported or (matrix is not None and len(matrix) and matrix["bytes"].sum() > 0):  # traces with sizes
        add("exchange", F.exchange_matrix, "exchange.matrix")
    add("programs", F.program_tree, "programs.tree")
    add("operations", lambda t: F.operations(t, imported=imported), "operations.by_layer")
    add("tiles", F.tile_balance, "tiles.balance")
    for key in [k for k in data.keys() if k.endswith(".comparison")]:
        if len(data[key]):
            out.setdefault(key.split(".")[0], []).append(F.comparison(data[key], key.split(".")[0].capitalize()))
    if doc.rank_words:
        out = {section: [figure_in_words(fig, doc.ranks) for fig in figs] for section, figs in out.items()}
    return out


class _Frames:
    """The document's blocks by key, as ``_figures_for`` reads them: a block's figures (a dict), or its table as a
    frame, made when asked for and kept for the figure after it (two figures draw ``memory.by_tile``)."""

    def __init__(self, doc: Document) -> None:
        self._blocks = {b.key: b for b in doc.blocks}
        self._made: dict[str, Any] = {}

    def keys(self) -> list[str]:
        return list(self._blocks)

    def __contains__(self, key: str) -> bool:
        return key in self._blocks

    def __getitem__(self, key: str) -> Any:
        if key not in self._made:
            b = self._blocks[key]
            # the one before let go; a table's frame not kept by its table either
            self._made = {key: b.data if isinstance(b.data, dict) else
                          b.data.frame_not_kept() if isinstance(b.data, Table) else b.data}
        return self._made[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default


def render(doc: Document) -> bytes:
    figs = _figures_for(doc)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(doc.title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{html.escape(doc.title)}</h1>",
             "<p class='note'>" + " vs ".join(html.escape(p) for p in doc.profiles)
             + f" &middot; {html.escape(doc.generator)}</p>"]
    plotly_included = False
    for section in doc.sections():
        blocks = [b for b in doc.read() if b.section == section]
        if not blocks and not figs.get(section):  # an imported trace's section of what it cannot have
            continue
        parts.append(f"<h2>{html.escape(heading(section))}</h2>")
        for fig in figs.get(section, []):
            parts.append(fig.to_html(full_html=False, include_plotlyjs=not plotly_included))
            plotly_included = True
        for b in blocks:
            parts.append(f"<h3>{html.escape(b.title)}</h3>")
            if isinstance(b.data, dict):
                shown = b.table()
                key_figures = pd.DataFrame({"figure": list(shown), "value": [value(v) for v in shown.values()]})
                parts.append(_table(key_figures))
            elif b.key in ("summary.insights", "overview.insights"):
                items = "".join(
                    f"<li><b class='{html.escape(r.severity)}'>{html.escape(r.severity)}</b> "
                    f"[{html.escape(r.topic)}] {html.escape(r.finding)}"
                    + (f"<br>Fix: {html.escape(r.suggestion)}" if r.suggestion else "")
                    + (f"<br>Effect: {html.escape(r.effect)}" if r.effect else "")
                    + (f"<br>Run: <code>{html.escape(r.command)}</code>" if r.command else "") + "</li>"
                    for r in b.frame().itertuples(index=False))
                parts.append(f"<ul>{items}</ul>")
            elif b.items is not None:  # the list, then its table: the page has room for both
                items = "".join(f"<li><b>{html.escape(head)}</b>"
                                + "".join(f"<br>{html.escape(line)}" for line in details)
                                + "</li>" for head, details in b.items)
                parts.append(f"<ul>{items}</ul>" if items else f"<p class='note'>({html.escape(b.empty)})</p>")
                parts.append(_table(b.data))
            else:
                parts.append(_table(b.table()))
    parts.append("</body></html>")
    return "\n".join(parts).encode()
