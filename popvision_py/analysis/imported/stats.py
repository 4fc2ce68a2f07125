"""Per-key figures of a rank's kernels worked out a piece of it at a time (``gpu.Kernels.pieces``) that are the
bits the whole rank at once gives: count, sum, largest, least, mean, standard deviation and median."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

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


def key_medians(pieces: Iterable[tuple[np.ndarray, np.ndarray]], size: int, most: int = 0,
                again: Parts | None = None) -> dict[str, np.ndarray]:
    """Per key (``0..size-1``): ``kernels`` (count), ``sum`` and ``median`` (NaN for a key without any) of the values
    of ``pieces`` (keys and int64 values a piece). Each (key, value) is written as one int64 into an array of them
    all (``PackedPairs``; ``most``: about how many there are, where known), sorted in place: a long rank's medians
    hold one int64 a value, not its keys' and values' columns joined (1.6 M kernels: 12 MiB, not 37).

    ``again``: a new pass over the same pieces each call. With it, no more than ``HELD_PAIRS`` pairs are held: past
    them, the medians are selected in passes over the pieces (``selected_medians``), and what they hold is flat in
    the values' count (a rank of 1.6 M kernels: 2 MiB, not 12; a pass over its pieces takes about 30 ms)."""
    count, total = np.zeros(size, np.int64), np.zeros(size, np.int64)
    packed: PackedPairs | None = PackedPairs(size, most if again is None else min(most, HELD_PAIRS))
    low, high = None, None
    for key, values in pieces:
        count += np.bincount(key, minlength=size)[:size]
        total += sum_by(key, values, size)
        if again is not None and len(values):
            lo, hi = int(values.min()), int(values.max())
            low, high = (lo, hi) if low is None else (min(low, lo), max(high, hi))
            if packed is not None and packed.at + len(values) > HELD_PAIRS:
                packed = None  # too many to hold: selected in passes below
        if packed is not None:
            packed.add(key, values)
    if packed is not None:
        median = packed.medians(count)
    elif high - low >= _FITS:  # (values too far apart for a window's width in an int64: held, as without ``again``)
        median = key_medians(again(), size, int(count.sum()))["median"]
    else:
        median = selected_medians(again, count, low, high)
    return {"kernels": count, "sum": total, "median": median}


HELD_PAIRS = 1 << 18  # (key, value) pairs a median holds at most where it can pass over its values again (2 MiB)
SELECT_BINS = 1 << 10  # the bins a pass counts a middle value's window in, at most
SELECT_PASSES = 12  # counting passes before the values left in the windows are taken whatever their number


def selected_medians(parts: Parts, count: np.ndarray, low: int, high: int) -> np.ndarray:
    """Each key's median of the int64 values of ``parts()`` (``count``: each key's values; ``low``, ``high``: the
    least and greatest of all) without holding them. Each key's middle two values (by place among its sorted values)
    are looked for in a window of values, [``low``, ``high``] at first. A pass counts the values in each window in
    bins (``SELECT_BINS``, fewer where many keys share ``HELD_PAIRS`` counts), and the window narrows to the bins
    that hold the two places, the key's values below it counted. A window one value wide holds both values. Once
    the values left in the open windows are ``HELD_PAIRS`` or fewer, a last pass takes them and sorts them. Exact,
    as a sort of every value is: a pass narrows a window by its bins' number, so a few passes do."""
    keys = np.flatnonzero(count)
    lower, upper = (count[keys] - 1) // 2, count[keys] // 2  # the middle two places among a key's sorted values
    window_of = np.full(len(count), -1, np.int64)
    window_of[keys] = np.arange(len(keys))
    a, b = np.full(len(keys), low, np.int64), np.full(len(keys), high, np.int64)
    below, inside = np.zeros(len(keys), np.int64), count[keys].copy()  # the key's values below and in its window
    for _ in range(SELECT_PASSES):
        open_ = np.flatnonzero(a < b)
        if inside[open_].sum() <= HELD_PAIRS:
            break
        bins = int(np.clip(HELD_PAIRS // len(open_), 2, SELECT_BINS))
        least = a[open_]
        width = (b[open_] - least) // bins + 1
        counted = np.zeros(len(open_) * bins, np.int64)
        for row, values in _in_windows(parts, window_of, open_, a, b):
            counted += np.bincount(row * bins + (values - least[row]) // width[row], minlength=len(counted))
        counted = np.cumsum(counted.reshape(len(open_), bins), axis=1)
        at = np.arange(len(open_))
        first = (counted <= (lower - below)[open_, None]).sum(axis=1)  # the bins of the two places
        last = (counted <= (upper - below)[open_, None]).sum(axis=1)
        before = np.where(first > 0, counted[at, np.maximum(first - 1, 0)], 0)
        below[open_] += before
        inside[open_] = counted[at, last] - before
        b[open_] = np.minimum(a[open_] + (last + 1) * width - 1, b[open_])
        a[open_] += first * width
    lo, hi = a.copy(), a.copy()  # a window one value wide: that value, twice
    open_ = np.flatnonzero(a < b)
    if len(open_):
        which, kept = joined(list(_in_windows(parts, window_of, open_, a, b)))
        kept = kept[np.lexsort((kept, which))]
        start = np.cumsum(inside[open_]) - inside[open_]
        lo[open_] = kept[start + lower[open_] - below[open_]]
        hi[open_] = kept[start + upper[open_] - below[open_]]
    median = np.full(len(count), np.nan)
    median[keys] = (lo.astype(np.float64) + hi.astype(np.float64)) / 2
    return median


def _in_windows(parts: Parts, window_of: np.ndarray, open_: np.ndarray, a: np.ndarray,
                b: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """A pass over ``parts()``: of each piece, the values inside their key's window (``window_of``) where it is one
    of the windows ``open_``, with that window's place in ``open_``."""
    row = np.full(len(a) + 1, -1, np.int64)  # each window's place in ``open_`` (the last: a key without one)
    row[open_] = np.arange(len(open_))
    for key, values in parts():
        w = window_of[key]
        r = row[w]
        hit = (r >= 0) & (values >= a[w]) & (values <= b[w])
        yield r[hit], values[hit]


REWRITE_ROWS = 1 << 16  # the pairs written so far re-written this many at a time when the range widens
_FITS = 1 << 62  # a key times the range of the values must stay below this to share an int64


class PackedPairs:
    """(key, value) pairs, keys in ``0..size-1``, written one int64 each (key x width + value - low) into an array
    grown as needed. Where a piece's values fall outside the range so far, the width (at least doubled: a few
    re-writes in all) and ``low`` widen, and the pairs so far are re-written ``REWRITE_ROWS`` at a time. Once a key
    and a value no longer fit one int64, the pairs are kept as keys and values apart, and sorted as those."""

    def __init__(self, size: int, most: int = 0) -> None:
        self.size, self.at, self.low, self.width = max(size, 1), 0, 0, 0
        self.packed = np.empty(most, np.int64)
        self.apart: list[tuple[np.ndarray, np.ndarray]] | None = None

    def add(self, key: np.ndarray, values: np.ndarray) -> None:
        if not len(values):
            return
        if self.apart is not None:
            self.apart.append((key, values))
            return
        lo, hi = int(values.min()), int(values.max())
        if not self.width or lo < self.low or hi >= self.low + self.width:
            low = lo if not self.width else min(lo, self.low)
            need = (hi if not self.width else max(hi, self.low + self.width - 1)) - low + 1
            if self.size * need >= _FITS:
                keys, kept = np.divmod(self.packed[:self.at], max(self.width, 1))
                self.apart, self.packed = [(keys, kept + self.low), (key, values)], np.empty(0, np.int64)
                return
            self._rewrite(low, need if self.size * 2 * self.width >= _FITS else max(need, 2 * self.width))
        if self.at + len(values) > len(self.packed):
            grown = np.empty(max(2 * len(self.packed), self.at + len(values)), np.int64)
            grown[:self.at] = self.packed[:self.at]
            self.packed = grown
        into = self.packed[self.at:self.at + len(values)]
        np.multiply(key, self.width, out=into, casting="unsafe")  # + value - low, in an order that cannot wrap
        if self.low >= 0:
            into -= self.low
            np.add(into, values, out=into, casting="unsafe")
        else:
            np.add(into, values, out=into, casting="unsafe")
            into -= self.low
        self.at += len(values)

    def _rewrite(self, low: int, width: int) -> None:
        for a in range(0, self.at, REWRITE_ROWS):
            block = self.packed[a:a + REWRITE_ROWS]
            key, value = np.divmod(block, self.width)
            value += self.low - low
            np.multiply(key, width, out=block)
            block += value
        self.low, self.width = low, width

    def medians(self, count: np.ndarray) -> np.ndarray:
        """Each key's median (``count``: each key's pairs)."""
        if self.apart is not None:
            return _lexsorted_medians(*joined(self.apart), len(count))
        if not self.at:
            return np.full(len(count), np.nan)
        v = self.packed[:self.at]
        v.sort()
        np.remainder(v, self.width, out=v)
        v += self.low
        return sorted_medians(v, count)


def group_medians(group: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Each group's median of ``values`` (NaN for a group without any). Integers are packed with their group into
    one int64 each (``PackedPairs``: a rank's 1.6 M kernels make one array, sorted in place, not the sort's order
    and its gathers), and only the middle ones made floats."""
    if not len(values):
        return np.full(size, np.nan)
    if values.dtype.kind not in "iu":
        return _lexsorted_medians(group, values, size)
    packed = PackedPairs(size, len(values))
    packed.add(group, values)
    return packed.medians(np.bincount(group, minlength=size))


def _lexsorted_medians(group: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """``group_medians`` of values of any type, sorted by (group, value) as floats."""
    v = values[np.lexsort((values, group))].astype(np.float64)
    return sorted_medians(v, np.bincount(group, minlength=size))


def sorted_medians(v: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Each group's median of ``v``: its values sorted by group then value, ``count[g]`` of group ``g``."""
    first = np.cumsum(count) - count
    lo = np.minimum(first + np.maximum(count - 1, 0) // 2, len(v) - 1)
    hi = np.minimum(first + count // 2, len(v) - 1)
    return np.where(count > 0, (v[lo].astype(np.float64) + v[hi].astype(np.float64)) / 2, np.nan)
