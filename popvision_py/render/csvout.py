"""CSV: one file per block, ``<section>.<name>.csv``, in a folder; key figures as ``figure,value`` rows; a block
that has no meaning for the profile (no columns, a sentence saying why) as one ``note`` row."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pandas as pd

from popvision_py.analysis.tables import Table
from popvision_py.format.atomic import atomic_output
from popvision_py.render.document import Document
from popvision_py.render.jsonout import plain


def frames(doc: Document) -> dict[str, pd.DataFrame]:
    """File name -> table, for every visible block."""
    out = {}
    for b in doc.visible():
        if isinstance(b.data, dict):
            out[f"{b.key}.csv"] = pd.DataFrame({"figure": list(b.data), "value": [plain(v) for v in b.data.values()]})
        elif isinstance(b.data, Table) and not b.data.columns and b.items == [] and b.empty:
            out[f"{b.key}.csv"] = pd.DataFrame({"note": [b.empty]})  # a section with no meaning here: its sentence
        else:
            out[f"{b.key}.csv"] = b.frame()
    return out


def write(doc: Document, folder: str | os.PathLike[str]) -> list[Path]:
    """Write each table atomically into ``folder`` (created if needed); returns the paths written."""
    folder = Path(folder)
    written = []
    for name, frame in frames(doc).items():
        buffer = io.StringIO()
        frame.to_csv(buffer, index=False)
        with atomic_output(folder / name) as out:
            out.write(buffer.getvalue().encode())
        written.append(folder / name)
    return written
