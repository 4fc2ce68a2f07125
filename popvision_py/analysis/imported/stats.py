"""Per-key figures of a rank's kernels worked out a piece of it at a time (``gpu.Kernels.pieces``) that are the
bits the whole rank at once gives: count, sum, largest, least, mean and standard deviation."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from popvision_py.analysis.common.tables import sum_by

Parts = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]  # a new pass over the (keys, int64 values) of each piece


def key_stats(parts: Parts, size: int) -> dict[str, np.ndarray]:
    """Per key (``0..size-1``): ``kernels`` (count), ``sum``, ``max``, ``min``, ``mean`` and ``std`` (ddof 1, 0 for
    one value) of the values of ``parts()``, in two passes. The second sums each key's squared deviations in the
    order of the values, piece after piece: each piece's ``np.bincount`` starts from the keys' sums so far (added
    first, to zeros), so the floating-point sums are the ones the values at once give, to the bit."""
    count, total = np.zeros(size, np.int64), np.zeros(size, np.int64)
    big, small = np.zeros(size, np.int64), np.full(size, np.iinfo(np.int64).max, np.int64)
    for key, values in parts():
        count += np.bincount(key, minlength=size)[:size]
        total += sum_by(key, values, size)
        np.maximum.at(big, key, values)
        np.minimum.at(small, key, values)
    mean = total / np.maximum(count, 1)
    square: np.ndarray | None = None
    for key, values in parts():
        deviation = (values - mean[key]) ** 2
        square = (np.bincount(key, weights=deviation, minlength=size) if square is None else
                  np.bincount(np.r_[np.arange(size), key], weights=np.r_[square, deviation], minlength=size))
    if square is None:
        square = np.zeros(size)
    std = np.where(count > 1, np.sqrt(square / np.maximum(count - 1, 1)), 0.0)
    return {"kernels": count, "sum": total, "max": big, "min": small, "mean": mean, "std": std}



def joined(found: list[tuple[np.ndarray, ...]]) -> list[np.ndarray]:
    """The columns of the pieces' rows (``found``: a tuple of columns a piece, emptied) each joined, a column's
    pieces let go once it is: what joining holds beside the joined columns is one column's pieces."""
    columns = [list(c) for c in zip(*found)]
    found.clear()
    out = []
    while columns:
        out.append(np.concatenate(columns.pop(0)))
    return out
