"""A run of several instances (``poprun``: ``DIR/instance-I/...``) side by side: the summary figures
that differ between its instances' profiles.

Each instance emulates the whole launch (every instance's replicas on the system named), so their
profiles normally agree; where they do not (an instance given other options, a profile from another
version), the table says which figure and how.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from popvision_py.analysis.common.tables import Table


def _same(values: list[Any]) -> bool:
    first = values[0]
    if isinstance(first, float):
        return all(isinstance(v, float) and (v == first or (math.isnan(v) and math.isnan(first))) for v in values)
    return all(v == first for v in values)


def differences(labels: list[str], summaries: list[Any]) -> Table:
    """``[figure, <label>...]``: one row per summary figure whose value differs between the instances
    (none when every instance's profile gives the same figures)."""
    names = [f.name for f in dataclasses.fields(summaries[0])] if summaries else []
    rows = [n for n in names if not _same([getattr(s, n) for s in summaries])]
    columns: dict[str, Any] = {"figure": np.array(rows, dtype=object)}
    for label, s in zip(labels, summaries):
        columns[label] = np.array([getattr(s, n) for n in rows], dtype=object)
    return Table(columns)
