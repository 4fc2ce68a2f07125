"""CSV: one file per block, ``<section>.<name>.csv``, in a folder; key figures as ``figure,value`` rows; a block
that has no meaning for the profile (no columns, a sentence saying why) as one ``note`` row.

``table_csv`` writes one table of NumPy columns (`popvision sql`'s result) as pandas' ``to_csv`` would
(the same cells, quoting and line ends), without pandas.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from popvision_py.analysis.common.answer import Table
from popvision_py.render.jsonout import plain

if TYPE_CHECKING:  # a report's CSV is made of frames; `popvision sql`'s table_csv imports neither
    import pandas as pd

    from popvision_py.render.document import Document

_DATE_UNITS = ("D", "s", "ms", "us", "ns")  # pandas' choice: the coarsest that shows every value of a column


def _cells(values: Any) -> list[str]:
    """One column's CSV cells: numbers as NumPy prints them (``6671360.0``, ``1e+20``), nulls (masked,
    NaN, NaT, None) empty, times at the coarsest resolution that shows every value of the column."""
    missing = np.ma.getmaskarray(values) if isinstance(values, np.ma.MaskedArray) else None
    data = np.asarray(values.data if missing is not None else values)
    kind = data.dtype.kind
    if kind in "iub":
        cells = data.astype(str).tolist()
    elif kind == "f":
        cells = data.astype(str).tolist()
        missing = np.isnan(data) if missing is None else missing | np.isnan(data)
    elif kind == "M":
        nat = np.isnat(data)
        missing = nat if missing is None else missing | nat
        shown = data[~missing]
        unit = next((u for u in _DATE_UNITS if (shown == shown.astype(f"datetime64[{u}]")).all()), "ns")
        cells = [c.replace("T", " ") for c in np.datetime_as_string(data, unit=unit).tolist()]
    else:
        cells = ["" if v is None else str(v) for v in data.tolist()]
    if missing is not None and missing.any():
        cells = ["" if m else c for c, m in zip(cells, missing.tolist())]
    return cells


def table_csv(table: Table) -> str:
    """``table`` as CSV text: a header of its names, then a row per row."""
    columns = [_cells(table[name]) for name in table.names]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.names)
    writer.writerows(zip(*columns))
    return out.getvalue()


def frames(doc: Document) -> Iterator[tuple[str, pd.DataFrame]]:
    """(file name, table) for every visible block, one at a time: a table is made as its file is written."""
    import pandas as pd

    for b in doc.visible():
        if isinstance(b.data, dict):
            yield f"{b.key}.csv", pd.DataFrame({"figure": list(b.data), "value": [plain(v) for v in b.data.values()]})
        elif isinstance(b.data, Table) and not b.data.columns and b.items == [] and b.empty:
            yield f"{b.key}.csv", pd.DataFrame({"note": [b.empty]})  # a section with no meaning here: its sentence
        else:  # a table's frame not kept by its table once its file is written
            yield f"{b.key}.csv", b.data.frame_not_kept() if isinstance(b.data, Table) else b.frame()


def write(doc: Document, folder: str | os.PathLike[str]) -> list[Path]:
    """Write each table atomically into ``folder`` (created if needed), its text into the file as pandas makes it
    (a 10 GB import's liveness by step, 34 MB of text, was held three times over); returns the paths written."""
    from popvision_py.format.atomic import atomic_output

    folder = Path(folder)
    written = []
    for name, frame in frames(doc):
        with atomic_output(folder / name) as out:
            text = io.TextIOWrapper(out, encoding="utf-8", newline="")
            frame.to_csv(text, index=False, lineterminator="\n")
            text.detach()  # flushed into ``out``, which the atomic output closes
        written.append(folder / name)
        del frame
    return written
