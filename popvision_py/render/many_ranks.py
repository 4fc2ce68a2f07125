"""Reports of many ranks: a table of rows per rank told, for a reader's formats (text, Markdown, HTML), as each
figure's spread over the ranks and the ranks furthest past its median, or the rows of those ranks alone; JSON and
CSV keep every row. Past ``MANY_RANKS`` ranks; the figures are ``analysis.common.spread``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popvision_py.analysis.common.answer import Table
from popvision_py.analysis.common.spread import outlier_ranks, spread
from popvision_py.render.rank_words import as_ranks

MANY_RANKS = 32  # past this many ranks a table of rows per rank is shown as their spread and outliers
RANK_KEYS = ("rank", "ipu", "process")  # a table's column naming the rank of each row
NOT_FIGURES = ("rank", "ipu", "pid", "tid", "stream", "step", "collective", "device")  # numbers that name things
# the columns that add up over a rank's rows ...
ADDITIVE = ("_ns", "_ms", "_s", "cycles", "bytes", "calls", "kernels", "count")
NOT_ADDITIVE = ("mean", "min", "max", "std", "median", "p95", "avg", "capacity", "worst")  # ... unless these


def at_many_ranks(blocks: list[Any], ranks: np.ndarray | None = None) -> None:  # document.ReportBlocks (below it)
    """Each table block of more than ``MANY_RANKS`` ranks told in a few rows for text, Markdown and HTML
    (``shown``; JSON and CSV keep every row): one row a rank, each numeric figure's spread over the ranks and the
    ranks furthest past its median (``spread.spread``); several rows a rank (per stream, per kernel), the rows of
    the ranks its section's first table of one row a rank names past the median in the figures that add up
    (``spread.outlier_ranks``), else those this table names in its figures that add up over a rank's rows.
    ``ranks``: an import's rank of each IPU, which names the rows of a table keyed by IPU."""
    named_in: dict[tuple[str, str], tuple[np.ndarray, str]] = {}
    for b in blocks:
        if b.items is not None or b.tree or b.hidden or isinstance(b.data, dict):
            continue
        data = b.data if isinstance(b.data, Table) else Table({str(c): b.data[c].to_numpy() for c in b.data.columns})
        key = next((k for k in RANK_KEYS if k in data.names), None)
        if key is None or not len(data) or _few(np.asarray(data[key])):
            continue
        rank = np.asarray(as_ranks(key, data[key], ranks))
        ranks_here, row = np.unique(rank, return_inverse=True)
        if len(ranks_here) <= MANY_RANKS:
            continue
        numeric = [c for c in data.names if c not in (key, *NOT_FIGURES) and np.asarray(data[c]).dtype.kind in "iuf"]
        added = [c for c in numeric if c.endswith(ADDITIVE) and not any(w in c for w in NOT_ADDITIVE)]
        if len(ranks_here) == len(rank):
            b.shown = spread(rank, {c: data[c] for c in numeric})
            b.title += (f" ({len(ranks_here):,} ranks: each figure's spread and the ranks furthest past its median; "
                        "--format json or csv lists every rank)")
            if added:
                named_in.setdefault((b.section, key), (outlier_ranks(rank, {c: data[c] for c in added}),
                                                       f"{b.key}'s figures"))
            continue
        sums = {c: np.bincount(row, weights=np.asarray(data[c], np.float64), minlength=len(ranks_here)) for c in added}
        named, why = named_in.get((b.section, key)) or (outlier_ranks(ranks_here, sums) if sums else ranks_here[:0],
                                                        f"{', '.join(sums)} summed over a rank's rows")
        which = (f"the rows of ranks {', '.join(map(str, named.tolist()))}, furthest past the median in {why}"
                 if len(named) else f"rank {ranks_here[0]}'s rows: no rank stands out")
        b.shown = Table({c: np.asarray(v)[np.isin(rank, named if len(named) else ranks_here[:1])]
                         for c, v in data.columns.items()})
        b.title += f" ({len(ranks_here):,} ranks: {which}; --format json or csv lists every rank)"


def _few(column: np.ndarray) -> bool:
    """Whether a column of small IPU or rank numbers holds no more than ``MANY_RANKS`` of them, counted without a
    sort (a long run's memory at each of 348,000 steps: 14 MiB to sort for four ranks). ``as_ranks`` maps IPUs to
    ranks one to one, so its ranks are as few. False where it cannot tell so cheaply."""
    if column.dtype.kind not in "iu" or not len(column) or int(column.min()) < 0 or int(column.max()) >= 1 << 20:
        return False
    return int(np.count_nonzero(np.bincount(column))) <= MANY_RANKS


def named_ranks(t: Table, figures: tuple[str, ...]) -> tuple[np.ndarray | None, str]:
    """Past ``MANY_RANKS`` ranks (one row each in ``t``), the ranks furthest past the median in ``figures`` and a
    title's note naming them; else None and no note."""
    if len(t) <= MANY_RANKS:
        return None, ""
    named = outlier_ranks(np.asarray(t["rank"]), {f: t[f] for f in figures})
    return named, (f" ({len(t):,} ranks: ranks {', '.join(map(str, named.tolist()))}, furthest past the median in "
                   f"{', '.join(figures)}; --format json or csv lists every rank)")


def of_ranks(t: Table, ranks: np.ndarray | None) -> Table:
    """``t``'s rows of ``ranks`` (every row for None)."""
    return t if ranks is None else Table({c: np.asarray(v)[np.isin(t["rank"], ranks)] for c, v in t.columns.items()})
