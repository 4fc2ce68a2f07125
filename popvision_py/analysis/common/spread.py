"""A per-rank table at many ranks, told in a few rows: each figure's distribution over the ranks and the ranks
furthest from its median.

A report of a thousand ranks cannot list a thousand rows; what a reader wants of them is how the ranks spread
(min, median, p90, max) and which ranks stand out, by how much. ``spread`` answers that for every numeric
figure of a table with one row per rank; ``outlier_ranks`` gathers the ranks it names, so that the tables of
several rows a rank (per stream, per kernel) can show those ranks' rows alone.
"""

from __future__ import annotations

import warnings

import numpy as np

from popvision_py.analysis.common.answer import Table

SPREAD_COLUMNS = ["figure", "ranks", "min", "p50", "p90", "max", "highest"]
TOP = 3  # the ranks named for each figure


def _highest(rank: np.ndarray, figures: dict[str, np.ndarray], top: int) -> tuple[np.ndarray, ...]:
    """Each figure's values (figures x rows), its median, its ``top`` rows of highest value (NaNs last) and
    whether each is above the median."""
    values = np.array([np.asarray(v, np.float64) for v in figures.values()]).reshape(len(figures), len(rank))
    with warnings.catch_warnings():  # a figure no rank has (all NaN): its spread is NaN, said once as "-"
        warnings.simplefilter("ignore", RuntimeWarning)
        median = np.nanmedian(values, axis=1) if len(rank) else np.full(len(figures), np.nan)
    order = np.argsort(np.where(np.isnan(values), np.inf, -values), axis=1, kind="stable")[:, :top]
    with np.errstate(invalid="ignore"):
        above = np.take_along_axis(values, order, axis=1) > median[:, None]  # at the median stands out from nothing
    return values, median, order, above


def spread(rank: np.ndarray, figures: dict[str, np.ndarray], top: int = TOP) -> Table:
    """``SPREAD_COLUMNS``, a row per figure (``figures``: name -> a value per row, one row per rank of ``rank``):
    its least, median, 90th percentile and most over the ranks (NaNs left out), and ``highest``: the ``top`` ranks
    of highest value above the median, the highest first, each with how far past the median it is (% of the median)."""
    rank = np.asarray(rank)
    values, median, order, held = _highest(rank, figures, top)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, p90, hi = (np.nanpercentile(values, q, axis=1) if len(rank) else np.full(len(figures), np.nan)
                       for q in (0, 90, 100))
        over = 100 * (np.take_along_axis(values, order, axis=1) / median[:, None] - 1)
    words = np.empty(len(figures), object)
    words[:] = [", ".join(f"{r} ({o:+.1f}%)" if o == o and abs(o) != np.inf else f"{r}"
                          for r, o, h in zip(rs, os, hs) if h)
                for rs, os, hs in zip(rank[order].tolist(), over.tolist(), held.tolist())]
    return Table({"figure": np.array(list(figures), dtype=object), "ranks": (~np.isnan(values)).sum(axis=1),
                  "min": lo, "p50": median, "p90": p90, "max": hi, "highest": words})


def outlier_ranks(rank: np.ndarray, figures: dict[str, np.ndarray], top: int = TOP) -> np.ndarray:
    """The ranks ``spread`` names (the ``top`` highest of each figure above its median), each once, in the order
    first named."""
    rank = np.asarray(rank)
    _, _, order, held = _highest(rank, figures, top)
    named = rank[order][held]
    _, first = np.unique(named, return_index=True)
    return named[np.sort(first)]
