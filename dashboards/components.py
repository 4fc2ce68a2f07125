"""Small HTML building blocks shared by the pages: number formats, key-figure cards, tables.

Like the figure builders these are pure: values or DataFrames in, Dash components out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from dash import dcc, html

from dashboards.figures.ranks import MANY_RANKS
from dashboards.figures.style import BYTE_UNITS, COUNT_UNITS, IPUS, NANOSECOND_UNITS, Naming, with_unit
from popvision_py.analysis.common.spread import outlier_ranks, spread
from popvision_py.render.format import three_figures

Formatter = Callable[[Any], str]


def _missing(value: Any) -> bool:
    """None or NaN: shown as '–'."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_bytes(value: Any) -> str:
    """1536 -> '1.50 KiB' (binary units, as Poplar reports memory); 1,048,575 -> '1.00 MiB'."""
    if _missing(value):
        return "–"
    return with_unit(value, BYTE_UNITS)


def fmt_count(value: Any) -> str:
    """533301 -> '533.3 k', 12345678 -> '12.3 M' (k = 10^3, M = 10^6, G, T); below 10,000 whole:
    '9,999'. Rounding picks the unit: 999,950 -> '1.0 M'."""
    if _missing(value):
        return "–"
    return with_unit(value, COUNT_UNITS)


def fmt_rate(value: Any) -> str:
    """Bytes per second, e.g. '12.50 GiB/s'."""
    text = fmt_bytes(value)
    return text if text == "–" else f"{text}/s"


def fmt_int(value: Any) -> str:
    """A whole number with thousands separators; a float is rounded, not truncated (2.7 -> '3')."""
    if _missing(value):
        return "–"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    return f"{round(float(value)):,}"


def fmt_pct(value: Any) -> str:
    if _missing(value):
        return "–"
    return f"{float(value):,.1f} %"


def fmt_seconds(value: Any) -> str:
    """0.00123 -> '1.23 ms'; 0.9999999 -> '1.00 s' (never '1,000.00 ms')."""
    if _missing(value):
        return "–"
    return with_unit(float(value) * 1e9, NANOSECOND_UNITS)


def fmt_range_end(value: Any) -> str:
    """A range's end to three significant figures, as `popvision run` prints it and a reader compares
    them: 24,037 -> '24,000', 1,088,975 -> '1,090,000', 611.4 -> '611', 1.624 -> '1.62'."""
    return "–" if _missing(value) else three_figures(float(value))


def fmt_range(low: Any, high: Any, fmt: Formatter = fmt_range_end) -> str:
    """'24,000 to 31,000': both ends of a range."""
    return f"{fmt(low)} to {fmt(high)}"


def fmt_quantity(count: Any, noun: str) -> str:
    """1, 'iteration' -> '1 iteration'; 10 -> '10 iterations' (nouns that take an 's')."""
    return f"{fmt_int(count)} {noun}{'' if count == 1 else 's'}"


def fmt_text(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt_number(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return "–" if value is None else str(value)


def fmt_for_column(column: str) -> Formatter:
    """The formatter a column's unit suffix asks for (the analysis names columns unit-last)."""
    if column.endswith("bytes_per_s"):
        return fmt_rate
    if column.endswith("_per_s"):
        return fmt_per_second
    if column.endswith("bytes"):
        return fmt_bytes
    if column.endswith("_pct"):
        return fmt_pct
    if column.endswith("_s"):
        return fmt_seconds
    if column.endswith("cycles") or column in ("flops", "executions", "events"):
        return fmt_count
    return fmt_text


def fmt_per_second(value: Any) -> str:
    text = fmt_number(value)
    return text if text == "–" else f"{text} /s"


def fmt_number(value: Any) -> str:
    """Whole numbers with thousands separators, others with 2 decimals; anything else as text."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return fmt_text(value)
    if math.isnan(value):
        return "–"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}"


def custom_value(point: dict, index: int) -> Any:
    """``customdata[index]`` of a clicked point. Plotly sends NumPy-built custom data as a typed
    array, which reaches the server as ``{"0": ..., "1": ...}`` rather than a list."""
    custom = point["customdata"]
    if isinstance(custom, dict):
        return custom[str(index)]
    return custom[index]


def ipu_options(ipus: Iterable[int], naming: Naming = IPUS) -> list[dict]:
    """Dropdown options choosing an IPU: labelled as the figures label it ('IPU 2', or an imported trace's
    'Rank 2'), valued by its number."""
    return [{"label": naming.label(ipu), "value": int(ipu)} for ipu in ipus]


# A card's value past these many characters is set smaller (style.css: 21, 17, then 14 px), so that a name (a
# model's, a folder's: "resnet50_ddp_8ranks") holds one line of a card (219 px of text in a 1,280 px window).
LONG_VALUE, LONGER_VALUE = 14, 18


def card(label: str, value: str, note: str | None = None, tone: str = "") -> html.Div:
    """One key figure: a label above a large value, with an optional note below."""
    size = "" if not isinstance(value, str) or len(value) <= LONG_VALUE else (
        " long" if len(value) <= LONGER_VALUE else " longer")
    children: list[Any] = [html.Div(label, className="card-label"),
                           html.Div(value, className=f"card-value{size}")]
    if note:
        children.append(html.Div(note, className="card-note"))
    return html.Div(children, className=f"card {tone}".strip())


def cards(items: Sequence[tuple[str, str] | tuple[str, str, str | None]
                          | tuple[str, str, str | None, str]]) -> html.Div:
    """A row of key-figure cards from (label, value[, note[, tone]]) tuples; tone is '', 'good', 'warn'
    or 'bad'."""
    return html.Div([card(*item) for item in items], className="cards")


def table(
    frame: pd.DataFrame,
    columns: Mapping[str, str] | None = None,
    formats: Mapping[str, Formatter] | None = None,
    row_class: Callable[[pd.Series], str] | None = None,
    max_rows: int = 200,
    table_id: str | None = None,
) -> html.Div:
    """An HTML table of ``frame``: ``columns`` maps column -> header (default: all, as named); its first
    ``max_rows`` rows, and then a line saying how many there are."""
    columns = dict(columns) if columns is not None else {c: c.replace("_", " ") for c in frame.columns}
    formats = dict(formats or {})
    if frame.empty:
        return html.Div("Nothing to show.", className="empty", id=table_id or "")
    align = {col: _align(col, frame) for col in columns}  # once per column, not per cell
    head = html.Thead(html.Tr([html.Th(header, className=align[col]) for col, header in columns.items()]))
    rows = []
    for _, row in frame.head(max_rows).iterrows():
        cells = []
        for col in columns:
            value = row[col]
            text = formats.get(col, fmt_for_column(col))(value)
            cells.append(html.Td(text, className=align[col]))
        rows.append(html.Tr(cells, className=row_class(row) if row_class else None))
    props = {"id": table_id} if table_id else {}
    shown = html.Table([head, html.Tbody(rows)], className="pv-table", **props)
    if len(frame) <= max_rows:
        return html.Div(shown, className="table-wrap")
    return html.Div([shown, html.P(f"The first {max_rows:,} of {len(frame):,} rows (popvision report --format csv "
                                   "lists every one).", className="note")], className="table-wrap")


def rank_table(frame: pd.DataFrame, columns: Mapping[str, str], formats: Mapping[str, Formatter] | None = None,
               table_id: str | None = None, rank: str = "rank", named: Any = None,
               keys: tuple[str, ...] = ()) -> html.Div:
    """A table of rows per rank (``table``); past ``MANY_RANKS`` ranks, each shown figure's spread over the ranks
    and the ranks furthest past its median (``spread.spread``), then the rows of those ranks alone (or of
    ``named``, the ranks another table named). ``keys``: numeric columns that name a row (a step's number), not
    figures to spread."""
    ranks = frame[rank].to_numpy() if len(frame) else np.zeros(0)
    distinct = np.unique(ranks)
    if len(distinct) <= MANY_RANKS:
        return table(frame, columns, formats, table_id=table_id)
    shown = [col for col in columns if col != rank and col not in keys and pd.api.types.is_numeric_dtype(frame[col])
             and frame[col].dtype != bool]
    if named is None:
        if len(distinct) == len(ranks):
            named = outlier_ranks(ranks, {col: frame[col].to_numpy(np.float64) for col in shown})
        else:
            sums = frame.groupby(rank)[shown].sum()
            named = outlier_ranks(sums.index.to_numpy(), {col: sums[col].to_numpy(np.float64) for col in shown})
    head = html.P(f"{len(distinct):,} ranks: each figure's spread over them, and below the rows of the ranks "
                  f"furthest past its median ({', '.join(map(str, np.asarray(named).tolist()))})." if len(named)
                  else f"{len(distinct):,} ranks: each figure's spread over them; no rank is past its median.",
                  className="note")
    parts = [head]
    if len(distinct) == len(ranks):
        found = spread(ranks, {col: frame[col].to_numpy(np.float64) for col in shown}).frame()
        # each figure in its own column's units (ms, %, bytes): its format, else its name's suffix's, else a number
        own = {col: fmt_for_column(col) for col in shown}
        own = {col: (formats or {}).get(col) or (fmt_number if fmt is fmt_text else fmt) for col, fmt in own.items()}
        for k in ("min", "p50", "p90", "max"):
            found[k] = [own[col](v) for col, v in zip(found["figure"], found[k].tolist())]
        found["figure"] = found["figure"].map(lambda col: columns[col])
        parts.append(table(found, {"figure": "figure", "min": "min", "p50": "median", "p90": "p90", "max": "max",
                                   "highest": "ranks furthest past the median"},
                           table_id=f"{table_id}-spread" if table_id else None))
    if len(named):
        parts.append(table(frame[np.isin(ranks, named)], columns, formats, table_id=table_id))
    return html.Div(parts)


SHORT_WORDS = 16  # a column of words no longer than this is never broken inside a word ("annotation")


def _align(column: str, frame: pd.DataFrame) -> str:
    """A cell's class: ``num`` (right-aligned, whole), ``word`` (a column of short words: kept whole, where a long
    name beside it may break anywhere), or none."""
    values = frame[column]
    if pd.api.types.is_numeric_dtype(values) and values.dtype != bool:
        return "num"
    return "word" if len(values) and values.astype(str).str.len().max() <= SHORT_WORDS else ""


def section(title: str, *children: Any, note: str | None = None, class_name: str = "", section_id: str | None = None,
            title_id: str | None = None, note_id: str | None = None, hidden: bool = False) -> html.Section:
    """A titled panel of a page. The ids let a callback retitle it, or show and hide it (``shown``) for the
    profile chosen; ``hidden`` starts it hidden."""
    head: list[Any] = [html.H3(title, **({"id": title_id} if title_id else {}))]
    if note or note_id:
        head.append(html.P(note, className="section-note", **({"id": note_id} if note_id else {})))
    props: dict[str, Any] = {"id": section_id} if section_id else {}
    if hidden:
        props["style"] = HIDDEN
    return html.Section(head + list(children), className=f"panel {class_name}".strip(), **props)


HIDDEN = {"display": "none"}


def shown(show: bool) -> dict:
    """The style that shows (``{}``) or hides an element."""
    return {} if show else HIDDEN


def one_line(sentence: str, element_id: str | None = None) -> html.P:
    """What a view means nothing for, said in one line in its place (an imported trace's tiles, say)."""
    return html.P(sentence, className="empty one-line", **({"id": element_id} if element_id else {}))


def graph(graph_id: str, height: int | None = None, modebar: bool = True, **props: Any) -> dcc.Loading:
    """A Graph in a loading wrapper, with the mode bar trimmed to what profiles need (or none)."""
    # Not "responsive": that stretches every figure to the container's 450 px; each figure sets its height.
    config = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}
    if not modebar:
        config["displayModeBar"] = False
    style = {"height": f"{height}px"} if height else {}
    return dcc.Loading(
        dcc.Graph(id=graph_id, config=config, style=style, **props), type="dot", delay_show=300
    )


def page_header(title: str, description: str, description_id: str | None = None) -> html.Div:
    props = {"id": description_id} if description_id else {}
    return html.Div([html.H2(title), html.P(description, className="page-description", **props)],
                    className="page-header")


def command_block(command: str) -> list:
    """A ``popvision run`` command as code with a copy button; nothing without one."""
    if not command:
        return []
    # One box per argument: a long command wraps between arguments, never at a hyphen inside one.
    words = [html.Span(part, className="command-arg") if part.strip() else part for part in re.split(r"( +)", command)]
    return [html.Div([html.Code(words, className="insight-command-text"),
                      dcc.Clipboard(content=command, title="Copy the command", className="insight-copy")],
                     className="insight-command")]


def settings_table(settings: Any, table_id: str, same: str) -> Any:
    """The run settings that differ between A and B (``Comparison.configuration()``: setting, a, b), or
    ``same`` when none does."""
    if settings.empty:
        return html.Div(same, className="empty", id=table_id)
    return table(settings, columns={"setting": "setting", "a": "A", "b": "B"},
                 formats={"setting": str, "a": fmt_text, "b": fmt_text}, table_id=table_id)
