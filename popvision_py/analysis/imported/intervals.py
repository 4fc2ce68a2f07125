"""The time each set of labels runs at once over many intervals (a GPU's kernels of a few kinds, per rank or
stream): ``coverage``, a piece of the intervals at a time, so that what it holds beside them is a piece's however
long a rank's time line."""

from __future__ import annotations

import numpy as np

from popvision_py.analysis.common.tables import sum_by

COVERAGE_ROWS = 1 << 17  # intervals ``coverage`` takes at a time
PIECE_KERNELS = 1 << 16  # kernels a figure of a long rank works on at a time (``idle_cuts``)


def coverage(group: np.ndarray, start: np.ndarray, end: np.ndarray, label: np.ndarray, groups: int,
             labels: int, rows: int = COVERAGE_ROWS) -> np.ndarray:
    """``[groups, 2**labels]`` ns: per group, the time during which exactly each set of labels (a bit
    mask: bit ``l`` set while a kernel of label ``l`` runs) has a kernel running; intervals of label -1
    count for nothing; overlapping kernels of a label count once.

    ``rows`` intervals at a time, in order of group then start, so that what it holds beside its arguments is
    a piece's, however many kernels a rank has: each piece's time is its group's up to the next piece's first
    start (``cut``), and the intervals of the piece that run past it are carried, from the cut, into the next.
    Time is cut, never counted twice: the sum of the pieces' is the whole's, to the nanosecond. The time no
    kernel runs (the empty set) is each group's first start to last end less its busy time: a gap across a
    cut is in no piece."""
    n = len(start)
    if n <= rows:
        return _coverage(group, start, end, label, groups, labels)
    ordered = bool((np.diff(group) >= 0).all()) and bool(
        ((np.diff(start) >= 0) | (np.diff(group) > 0)).all())
    order = None if ordered else np.lexsort((start, group))
    out = np.zeros((groups, 1 << labels), np.int64)
    first, last = np.full(groups, np.iinfo(np.int64).max, np.int64), np.full(groups, np.iinfo(np.int64).min, np.int64)
    carry = tuple(np.zeros(0, np.int64) for _ in range(4))  # (group, start, end, label) run past the last cut
    for a in range(0, n, rows):
        at = slice(a, min(a + rows, n)) if order is None else order[a:a + rows]
        piece = [np.concatenate([c, np.asarray(v[at], np.int64)]) for c, v in zip(carry, (group, start, end, label))]
        g, s, e, lab = piece
        carry = tuple(np.zeros(0, np.int64) for _ in range(4))
        if a + rows < n:
            following = a + rows if order is None else int(order[a + rows])
            if group[following] == g[-1]:  # the group goes on in the next piece: cut its time at its next start
                cut = int(start[following])
                late = (g == g[-1]) & (e > cut)
                carry = (g[late], np.full(int(late.sum()), cut, np.int64), e[late], lab[late])
                e = np.where(late, cut, e)
        out += _coverage(g, s, e, lab, groups, labels)
        kept = (lab >= 0) & (e > s)
        np.minimum.at(first, g[kept], s[kept])
        np.maximum.at(last, g[kept], e[kept])
    busy = out[:, 1:].sum(axis=1)
    out[:, 0] = np.where(last > first, last - first, 0) - np.where(last > first, busy, 0)
    return out


def _coverage(group: np.ndarray, start: np.ndarray, end: np.ndarray, label: np.ndarray, groups: int,
              labels: int) -> np.ndarray:
    """``coverage`` of intervals at once: one sort of every start and end."""
    keep = (label >= 0) & (end > start)
    group, start, end, label = group[keep], start[keep], end[keep], label[keep]
    times = np.concatenate([start, end])
    key = np.concatenate([group, group])
    order = np.lexsort((times, key))
    times, key = times[order], key[order]
    mask = np.zeros(len(times), np.int64)
    for bit in range(labels):  # each label's running count: +1 at a start, -1 at an end (a group's sum to 0)
        mine = (label == bit).astype(np.int64)
        running = np.cumsum(np.concatenate([mine, -mine])[order])
        mask |= (running > 0).astype(np.int64) << bit
    width = 1 << labels
    if len(times) < 2:
        return np.zeros((groups, width), np.int64)
    step = np.where(key[1:] == key[:-1], np.diff(times), 0)
    return sum_by(key[:-1] * width + mask[:-1], step, groups * width).reshape(groups, width)


def idle_cuts(ipu: np.ndarray, start: np.ndarray, end: np.ndarray, rows: int | None = None) -> np.ndarray:
    """Row bounds ``[0, ..., n]`` cutting intervals (kernels sorted by ``ipu``, each rank's by start) into pieces of
    about ``rows`` or more: each cut at the first row, ``rows`` on or after the last cut, where a new rank starts,
    or, within one rank, where every interval before it has ended before any from there on starts (its GPU idles
    between). A figure additive over a rank's time is then the sum of the pieces' (no moment holds intervals of
    two pieces), and one that follows a stream's kernels in start order meets them in the pieces' order. Several
    ranks (a run of short ones, ``gpu_ranks.CHUNK_KERNELS`` at most) are cut where a rank starts only. No cut where
    the intervals are not sorted by ``ipu``. ``rows``: ``PIECE_KERNELS`` by default."""
    n, rows = len(start), PIECE_KERNELS if rows is None else rows
    if n <= rows or (np.diff(ipu) < 0).any():
        return np.array([0, n])
    if ipu[0] == ipu[-1]:  # one rank (a long one): its running latest end and earliest start from each row
        free = np.flatnonzero(np.maximum.accumulate(end)[:-1] < np.minimum.accumulate(start[::-1])[::-1][1:]) + 1
    else:
        free = np.flatnonzero(ipu[1:] != ipu[:-1]) + 1
    return np.array([0, *chosen(free, rows), n])


def chosen(free: np.ndarray, rows: int, last: int = 0) -> list[int]:
    """The cuts among ``free`` (rising rows before which a cut may fall): each the first ``rows`` or more after the
    one before it, the first ``rows`` or more after ``last``."""
    cuts = []
    while (at := int(np.searchsorted(free, last + rows))) < len(free):
        last = int(free[at])
        cuts.append(last)
    return cuts


def masks_with(bit: int, labels: int) -> np.ndarray:
    """The sets of ``labels`` labels (bit masks, ``coverage``'s columns) that hold label ``bit``."""
    return np.array([m for m in range(1 << labels) if m & (1 << bit)], np.int64)
