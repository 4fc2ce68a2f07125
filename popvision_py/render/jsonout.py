"""JSON, documented in docs/reports.md ("JSON output"): stable keys, tables as lists of row objects."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from popvision_py.analysis.common.answer import Table
from popvision_py.render.format import column_names

if TYPE_CHECKING:  # annotations only: `popvision sql` renders its table without the report's imports (pandas)
    import pandas as pd

    from popvision_py.render.document import Document

JSON_FORMAT = "popvision-report"
JSON_VERSION = 1
# A table's rows made into objects and encoded at a time (``chunks``): a long table (the liveness section's memory
# at each of 420 K steps, say) is never held as objects whole. A row object is about 1 KB with its values: 32 K
# rows at a time took a 10 GB import's `report --section all --format json` to 296 MB, 4 K to 220 (text: 219)
PIECE_ROWS = 1 << 12


def plain(v: Any) -> Any:
    """NumPy/pandas scalars to JSON values; NaN and infinities become null."""
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return None if math.isnan(f) or math.isinf(f) else f
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    pd = sys.modules.get("pandas")  # pandas' missing values exist only where pandas is loaded
    if pd is not None and (v is pd.NA or v is pd.NaT):
        return None
    return str(v)


def values(column: Any) -> list[Any]:
    """A column's values as JSON values (``plain``'s). A column of NumPy numbers or booleans converts
    whole: ``tolist`` gives the same Python ints, floats and bools ``plain`` would, and only the NaNs
    and infinities of a float column are then set to null; other columns go value by value."""
    dtype = getattr(column, "dtype", None)
    if isinstance(dtype, np.dtype) and dtype.kind in "biuf":
        array = np.asarray(column)
        out = array.tolist()
        if dtype.kind == "f":
            for i in np.flatnonzero(~np.isfinite(array)).tolist():
                out[i] = None
        return out
    return [plain(v) for v in column.tolist()]


def records(frame: Table | pd.DataFrame, rows: slice = slice(None)) -> list[dict[str, Any]]:
    """Rows (all, or a ``slice`` of them) as objects; a Table's arrays are read directly, a DataFrame's through
    its Series."""
    names = column_names(frame)
    if isinstance(frame, Table):
        columns = [values(frame[c][rows]) for c in names]
    else:
        columns = [values(frame[c].iloc[rows]) for c in frame.columns]
    return [dict(zip(names, row)) for row in zip(*columns)] if columns else []


def nested(frame: Table | pd.DataFrame) -> list[dict[str, Any]]:
    """A tree block's rows (``ReportBlock.tree``) as nested objects: each node's ``children`` inside it,
    roots first."""
    rows = records(frame)
    roots: list[dict[str, Any]] = []
    for row in rows:  # a node's number is its row, and its parent comes before it
        parent = row.pop("parent")
        row.pop("node")
        row["children"] = []
        (rows[parent]["children"] if parent is not None and parent >= 0 else roots).append(row)
    return roots


def block_data(b: Any) -> Any:
    """A block's JSON value: its figures, its rows as objects, or a tree's nested nodes."""
    if isinstance(b.data, dict):
        return plain(b.data)
    return nested(b.data) if b.tree else records(b.data)


def _head(doc: Document) -> dict[str, Any]:
    return {"format": JSON_FORMAT, "version": JSON_VERSION, "kind": doc.kind, "generator": doc.generator,
            "profiles": doc.profiles}


def _sections(doc: Document) -> dict[str, dict[str, Any]]:
    """The visible blocks by section and name; a name given twice in a section keeps its first place and its
    last block, as a dict does."""
    sections: dict[str, dict[str, Any]] = {}
    for b in doc.visible():
        sections.setdefault(b.section, {})[b.name] = b
    return sections


def to_dict(doc: Document) -> dict[str, Any]:
    """The document as JSON values, whole (what ``chunks`` writes a block at a time)."""
    sections = {section: {name: block_data(b) for name, b in blocks.items()}
                for section, blocks in _sections(doc).items()}
    return {**_head(doc), "sections": sections}


def _compact(value: Any) -> bytes:
    return json.dumps(value, allow_nan=False, separators=(",", ":")).encode()


def chunks(doc: Document) -> Iterator[bytes]:
    """The document as JSON, in pieces: ``json.dumps(to_dict(doc), indent=2)`` and a newline, byte for byte, when
    joined. Each block is built, encoded and laid out on its own and its Python objects let go, so that a report
    of thousands of ranks holds one block's rows as objects at a time (a long table's, ``PIECE_ROWS`` of them:
    ``_laid_out``), and nothing of the whole text: the CLI writes the pieces as they come.

    ``json.dumps`` with an indent runs Python's own encoder (C's writes compact JSON only): 0.29 s for
    bert-large's 8 MB report. Encoded compact in C, then laid out by msgspec's formatter, which copies every
    number and string as it is: the same bytes in a sixth of the time. A block sits three levels deep (the
    document, its sections, the section), so each of its lines after the first is indented by six spaces more:
    a JSON string holds no raw line break, so every one is the layout's."""
    import msgspec

    sections = _sections(doc)
    head = msgspec.json.format(_compact(_head(doc)), indent=2)[:-2]  # its closing line left off
    yield head + b',\n  "sections": ' + (b"{" if sections else b"{}")
    for i, (section, blocks) in enumerate(sections.items()):
        yield b"," * (i > 0) + b"\n    " + _compact(section) + b": {"
        for j, (name, b) in enumerate(blocks.items()):
            yield b"," * (j > 0) + b"\n      " + _compact(name) + b": "
            yield from _laid_out(b, msgspec.json.format)
        yield b"\n    }"
    yield b"\n  }\n}\n" if sections else b"\n}\n"


def _laid_out(b: Any, layout: Any) -> Iterator[bytes]:
    """A block's value as ``chunks`` lays it out (``layout``: msgspec's formatter), a table's rows ``PIECE_ROWS`` at a
    time: each piece is a list laid out on its own, less its brackets' lines, the pieces joined by a comma and a
    line break, as the whole list's items are."""
    if isinstance(b.data, dict) or b.tree or len(b.data) <= PIECE_ROWS:
        yield layout(_compact(block_data(b)), indent=2).replace(b"\n", b"\n      ")
        return
    yield b"["
    for at in range(0, len(b.data), PIECE_ROWS):
        piece = layout(_compact(records(b.data, slice(at, at + PIECE_ROWS))), indent=2)
        yield b"," * (at > 0) + piece[1:-2].replace(b"\n", b"\n      ")  # "[" and "\n]" left off
    yield b"\n      ]"


def render(doc: Document) -> bytes:
    """The document as JSON, indented by two spaces, as ``json.dumps(to_dict(doc), indent=2)`` writes it, byte for
    byte (``chunks``, joined)."""
    return b"".join(chunks(doc))
