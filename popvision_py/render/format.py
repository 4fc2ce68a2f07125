"""Value formatting shared by the text and Markdown renderers."""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from popvision_py.analysis.common.answer import Table
from popvision_py.format.schema import FIT_VERDICTS

if TYPE_CHECKING:  # a pandas column can only reach these functions where pandas is loaded: never imported here
    import pandas as pd


def heading(section: str) -> str:
    """A section's heading: its name capitalised, an initialism in capitals (``gpu`` -> ``GPU``)."""
    return section.upper() if section in ("gpu",) else section.capitalize()


# numbers that name a process or a thread, as ``ps`` and the traces print them: no thousands separators
IDENTIFIERS = frozenset({"pid", "tid"})


def identifier(v: Any) -> str:
    """A process's or thread's id as it is printed elsewhere (``3113936``); ``value`` of anything else."""
    return str(int(v)) if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) else value(v)


def value(v: Any) -> str:
    """A value as a person reads it: ints with thousands separators, floats to 2 decimals, NaN as '-'."""
    if v is None:
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return _float(float(v))
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return str(v)


# A fit verdict (engine/prediction.py, stored in a manifest's run.prediction and tune.parquet) as a "fits?"
# column or card answers it
FIT_ANSWER = dict(zip(FIT_VERDICTS, ("yes", "no", "borderline")))


def assumption_value(x: float) -> str:
    """An assumption's value as --assume takes it, readably: 20,000,000,000, 7,168, 0.0005, 1.5."""
    return f"{x:,.0f}" if float(x) == int(x) and abs(x) >= 1 else f"{x:g}"


def three_figures(x: float) -> str:
    """A range's end to three significant figures, as a reader compares them (`popvision run`, `popvision tune`
    and the dashboard print ranges so): 24,037 -> '24,000', 1,088,975 -> '1,090,000', 611.4 -> '611',
    1.624 -> '1.62'."""
    if abs(x) >= 100:
        return f"{float(f'{x:.3g}'):,.0f}"
    return f"{x:.3g}"


def is_number(series: pd.Series) -> bool:
    return _numeric_dtype(series.dtype)


_NUMERIC: dict[Any, bool] = {}


def _numeric_dtype(dtype: Any) -> bool:
    if isinstance(dtype, np.dtype):  # as pandas' is_numeric_dtype, less booleans and datetimes
        return dtype.kind in "iufc"
    import pandas as pd  # a pandas extension dtype: pandas is loaded already

    try:
        return _NUMERIC[dtype]
    except KeyError:
        pass
    except TypeError:  # an unhashable dtype
        return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)
    out = _NUMERIC[dtype] = pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)
    return out


def column_names(data: Table | pd.DataFrame) -> list[str]:
    """A table's column names, in order."""
    return data.names if isinstance(data, Table) else [str(c) for c in data.columns]


def column_arrays(frame: Table | pd.DataFrame) -> list[Any]:
    """Each column's values (NumPy array or pandas extension array), read-only.

    A Table's are its arrays. ``DataFrame.items()`` builds a Series per column and ``dtypes`` a
    Series of dtypes (about 8 us a column in pandas 3): more than formatting the rows a terminal
    shows. pandas' own column iterator is used where it exists, ``items()`` otherwise.
    """
    if isinstance(frame, Table):
        return list(frame.columns.values())
    arrays = getattr(frame, "_iter_column_arrays", None)
    if arrays is not None:
        try:
            return list(arrays())
        except Exception:  # noqa: BLE001 - a private pandas API: fall back to the public one
            pass
    return [series.array for _, series in frame.items()]


def numeric_columns(frame: Table | pd.DataFrame, arrays: list[Any] | None = None) -> list[bool]:
    """For each column, whether it holds numbers (right-aligned)."""
    return [_numeric_dtype(a.dtype) for a in (column_arrays(frame) if arrays is None else arrays)]


def cells(frame: Table | pd.DataFrame, max_rows: int | None = None) -> list[list[str]]:
    """The first ``max_rows`` rows (all if None) of ``frame``, every cell formatted.

    Columns are read once as arrays and sliced: indexing a pandas frame by column name or
    ``head()`` costs more than formatting the few rows a terminal shows. Each column is formatted
    by a function chosen once for its dtype (the same text as ``value``).
    """
    columns = formatted_columns(frame, max_rows)
    return [list(row) for row in zip(*columns)] if columns else []


def formatted_columns(frame: Table | pd.DataFrame, max_rows: int | None = None,
                      arrays: list[Any] | None = None) -> list[list[str]]:
    """``cells`` column by column: one list of formatted cells per column (an ``IDENTIFIERS`` column's without
    separators)."""
    return [_format_column(a[:max_rows]) if name not in IDENTIFIERS else
            [identifier(v) for v in np.asarray(a[:max_rows]).tolist()]
            for name, a in zip(column_names(frame), column_arrays(frame) if arrays is None else arrays)]


def _format_column(values: Any) -> list[str]:
    """``value`` of each cell, with the type checks done once per column, not per cell. A masked
    array's (DuckDB's nulls, ``popvision sql``) masked cells are "-"."""
    if isinstance(values, np.ma.MaskedArray):
        masked = np.ma.getmaskarray(values).tolist()
        return ["-" if m else cell for cell, m in zip(_format_column(values.data), masked)]
    pd = sys.modules.get("pandas")  # a pandas array exists only where pandas is loaded
    if pd is not None:
        # pandas 2.1 renamed PandasArray NumpyExtensionArray
        if isinstance(values, getattr(pd.arrays, "NumpyExtensionArray", None) or pd.arrays.PandasArray):
            values = values.to_numpy()  # what ``Series.array`` wraps NumPy columns in
    if isinstance(values, np.ndarray):
        kind = values.dtype.kind
        if kind in "iu":
            return [f"{v:,}" for v in values.tolist()]
        if kind == "f":
            return [_float(v) for v in values.tolist()]
        if kind == "b":
            return ["yes" if v else "no" for v in values.tolist()]
    elif pd is not None and isinstance(values.dtype, pd.StringDtype):
        return [v if isinstance(v, str) else value(v) for v in values.tolist()]
    return [value(v) for v in np.asarray(values).tolist()]


def _float(f: float) -> str:
    """``value`` of a Python float."""
    if f != f:
        return "-"
    if abs(f) == math.inf:
        return "inf" if f > 0 else "-inf"
    if f == int(f):
        return f"{f:,.0f}" if abs(f) < 1e15 else f"{f:.3e}"
    if abs(f) >= 1000:
        return f"{f:,.0f}"
    if abs(f) >= 0.01 or f == 0:
        return f"{f:,.2f}"
    return f"{f:.3g}"


def verification(data: Table | pd.DataFrame) -> list[tuple[str, list[str]]]:
    """``popvision report --verify``'s table as a heading and detail lines per fix (text, Markdown, HTML)."""
    columns = {c: list(data[c]) for c in column_names(data)}
    out = []
    for row in (dict(zip(columns, values)) for values in zip(*columns.values())):
        lines = [f"time per step: {_measured(row, 'step_s', 1e3, 'ms', 3)}",
                 f"throughput: {_measured(row, 'samples_per_second', 1.0, 'samples/s', 0)}",
                 f"worst tile: {_measured(row, 'worst_tile_bytes', 1.0, 'bytes', 0)}",
                 str(row["verdict"])]
        if row["profile"]:
            lines.append(f"profile: {row['profile']}")
        out.append((f"[{row['status']}] {row['tag']}: {row['suggestion']}", lines))
    return out


def _measured(row: dict[str, Any], name: str, scale: float, unit: str, digits: int) -> str:
    """``name`` before -> after the fix, and what was predicted when something was."""
    def text(v: Any) -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * scale:,.{digits}f}"

    before, after, predicted = (text(row[f"{name}_{w}"]) for w in ("before", "after", "predicted"))
    said = f" (predicted {predicted})" if predicted != "-" else ""
    return f"{before} -> {after} {unit}{said}"
