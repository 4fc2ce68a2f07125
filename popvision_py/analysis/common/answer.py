"""``Table``: an answer's columns as NumPy arrays, the DataFrame built when asked for.

Apart from ``tables`` (which decodes with pyarrow): `popvision sql` renders DuckDB's result as a
Table without importing pyarrow or pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


class Table:
    """An answer's columns as arrays, in its documented order; the DataFrame is built when asked for.

    Building a pandas DataFrame costs 50-150 us in pandas 3, more than most answers' arithmetic on
    a profile the size of bert-large's, and a report makes about twenty. So the analyzers answer
    with Tables: the ``Report`` facade hands out ``frame()`` (built once, cached), while the text,
    Markdown and JSON renderers and the analyzers that use each other's answers read the arrays.
    ``t[name]`` is a column and ``len(t)`` the rows, as on a DataFrame.
    """

    __slots__ = ("columns", "_frame")

    def __init__(self, columns: dict[str, Any]) -> None:
        self.columns = columns
        self._frame: pd.DataFrame | None = None

    @classmethod
    def empty(cls, dtypes: dict[str, Any]) -> Table:
        """No rows, each column of its dtype."""
        return cls({name: np.zeros(0, dtype) for name, dtype in dtypes.items()})

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, name: str) -> Any:
        return self.columns[name]

    def __contains__(self, name: str) -> bool:
        return name in self.columns

    def frame(self) -> pd.DataFrame:
        """The DataFrame (fresh RangeIndex), built on first call; the same object after."""
        if self._frame is None:
            import pandas as pd

            self._frame = pd.DataFrame(self.columns)
        return self._frame

    def frame_not_kept(self) -> pd.DataFrame:
        """A DataFrame of the columns, not kept by the table (the one ``frame`` built and keeps, where it did): for
        a reader that uses a long table once (the HTML page's figures, a CSV file) and lets it go."""
        if self._frame is not None:
            return self._frame
        import pandas as pd

        return pd.DataFrame(self.columns)

    def head(self, rows: int) -> Table:
        """The first ``rows`` rows, as views of the columns."""
        return Table({name: column[:rows] for name, column in self.columns.items()})

    def __repr__(self) -> str:
        return f"Table({len(self)} rows: {', '.join(self.columns)})"
