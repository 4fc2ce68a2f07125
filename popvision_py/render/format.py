"""Value formatting shared by the text and Markdown renderers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def value(v: Any) -> str:
    """A value as a person reads it: ints with thousands separators, floats to 2 decimals, NaN as '-'."""
    if v is None:
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return "-"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        if f == int(f):
            return f"{f:,.0f}" if abs(f) < 1e15 else f"{f:.3e}"
        if abs(f) >= 1000:
            return f"{f:,.0f}"
        if abs(f) >= 0.01 or f == 0:
            return f"{f:,.2f}"
        return f"{f:.3g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return str(v)


def is_number(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def cells(frame: pd.DataFrame) -> list[list[str]]:
    """Every cell of ``frame`` formatted (columns formatted as a whole, not per cell where possible)."""
    columns = [[value(v) for v in frame[c].tolist()] for c in frame.columns]
    return [list(row) for row in zip(*columns)] if columns else []
