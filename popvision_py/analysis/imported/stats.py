"""Per-key figures of a rank's kernels worked out a piece of it at a time (``gpu.Kernels.pieces``) that are the
bits the whole rank at once gives: count, sum, largest, least, mean, standard deviation and median."""

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


def key_medians(parts: Parts, size: int) -> dict[str, np.ndarray]:
    """Per key (``0..size-1``): ``kernels`` (count), ``sum`` and ``median`` (NaN for a key without any) of the values
    of ``parts()``, in two passes: the first finds the values' range, the second writes each (key, value) as one
    int64 into an array of them all, sorted in place (``sorted_medians``). What a long rank's medians hold is then
    one int64 a value, not its keys' and values' columns joined (1.6 M kernels: 12 MiB, not 37). Values too wide
    to share an int64 with their key are joined and sorted as ``group_medians`` sorts them."""
    count, total = np.zeros(size, np.int64), np.zeros(size, np.int64)
    low, high = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for key, values in parts():
        count += np.bincount(key, minlength=size)[:size]
        total += sum_by(key, values, size)
        if len(values):
            low, high = min(low, int(values.min())), max(high, int(values.max()))
    width = high - low + 1
    if not count.sum() or size * width >= 1 << 62:
        keys, values = joined(list(parts())) if count.sum() else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        return {"kernels": count, "sum": total, "median": group_medians(keys, values, size)}
    v, at = np.empty(int(count.sum()), np.int64), 0
    for key, values in parts():
        into = v[at:at + len(values)]
        np.multiply(key, width, out=into, casting="unsafe")
        into += values - low
        at += len(values)
    v.sort()
    np.remainder(v, width, out=v)
    v += low
    return {"kernels": count, "sum": total, "median": sorted_medians(v, count)}


def group_medians(group: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Each group's median of ``values`` (NaN for a group without any). Integers whose (group, value) fit one int64
    are sorted as those (a rank's 1.6 M kernels: one array made and sorted in place, not the sort's order and its
    gathers), and only the middle ones made floats."""
    if not len(values):
        return np.full(size, np.nan)
    low = int(values.min()) if values.dtype.kind in "iu" else 0
    width = int(values.max()) - low + 1 if values.dtype.kind in "iu" else 0
    if 0 < width and size * width < 1 << 62:
        v = np.multiply(group, width, dtype=np.int64)  # group x width + value - low, in an order that cannot wrap
        if low >= 0:
            v -= low
            np.add(v, values, out=v, casting="unsafe")
        else:
            np.add(v, values, out=v, casting="unsafe")
            v -= low
        v.sort()
        np.remainder(v, width, out=v)
        v += low
    else:
        v = values[np.lexsort((values, group))].astype(np.float64)
    return sorted_medians(v, np.bincount(group, minlength=size))


def sorted_medians(v: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Each group's median of ``v``: its values sorted by group then value, ``count[g]`` of group ``g``."""
    first = np.cumsum(count) - count
    lo = np.minimum(first + np.maximum(count - 1, 0) // 2, len(v) - 1)
    hi = np.minimum(first + count // 2, len(v) - 1)
    return np.where(count > 0, (v[lo].astype(np.float64) + v[hi].astype(np.float64)) / 2, np.nan)
