"""A GPU's streams over time: each rank's streams as lanes, and a zoom window of them at a level of detail a
figure can draw, whatever the number of kernels (the dashboard's GPU page).

A *lane* is one (rank, stream) of the ``kernels`` table (``gpu.Kernels``). ``StreamIndex`` names the lanes and
the kernels' extent, and hands out the kernels of a window a piece at a time (``pieces``): from the table's row
groups whose footer statistics overlap the window (``StreamIndex.read``: nothing held between windows, so a
10 GB import's 6.3 M kernels are never in memory at once), or from kernels in memory (``StreamIndex.of``).
``window`` gives each kernel of the window while it holds at most ``max_kernels`` (level ``events``), else each
(lane, kind)'s occupancy in at most ``max_bins`` equal bins of the window (level ``bins``): the time a kernel of
that kind runs on the lane in the bin (kernels of one kind overlapping count once) and the kernels there, so
that the share of a bin busy with a kind is ``busy_ns / (end_ns - start_ns)``. A piece's kernels of each (lane,
kind) are merged into disjoint intervals, the last one carried into the next piece (a lane's kernels come in
order of their start), and each interval's time split over the bins it covers: whole columns, never a loop
over kernels or lanes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from popvision_py.analysis.common.tables import Columns, bin_edges
from popvision_py.analysis.imported.gpu import Kernels
from popvision_py.format.schema import KERNEL_KINDS
from popvision_py.format.values import statistics

WINDOW_COLUMNS = ["lane", "rank", "stream", "kind", "name", "start_ns", "end_ns", "busy_ns", "kernels"]
LANE_COLUMNS = ["lane", "ipu", "rank", "stream", "kernels"]
MAX_KERNELS = 2000  # a window holding more kernels than this is drawn as its occupancy in bins
MAX_BINS = 400  # bins per lane and kind
DENSE_CELLS = 1 << 20  # (lane, kind, bin) cells a window's pieces are added into whole, past which the cells touched
READ_COLUMNS = ["ipu", "stream", "kind", "name", "start_cycle", "end_cycle"]  # what a window reads of the table
_STREAM = 1 << 32  # a lane's key: ipu * _STREAM + stream + _STREAM // 2


@dataclass(frozen=True)
class Piece:
    """Some kernels as a window reads them: their IPU, stream, kind (a code into ``KERNEL_KINDS``), times and name
    (a code into ``names``)."""

    ipu: np.ndarray
    stream: np.ndarray
    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    name: np.ndarray
    names: np.ndarray

    @classmethod
    def of(cls, k: Kernels) -> Piece:
        return cls(k.ipu, k.stream, k.kind, k.start, k.end, k.name, k.names)

    @classmethod
    def read(cls, columns: Columns) -> Piece:
        """A batch of the ``kernels`` table's ``READ_COLUMNS``."""
        ipu, stream, start, end = (np.asarray(columns[c], np.int64) for c in ("ipu", "stream", "start_cycle",
                                                                                "end_cycle"))
        return cls(ipu, stream, columns.codes_in("kind", KERNEL_KINDS), start, end, columns.codes("name"),
                   np.asarray(columns.words("name"), dtype=object))

    def __len__(self) -> int:
        return len(self.start)

    def take(self, rows: np.ndarray) -> Piece:
        return Piece(self.ipu[rows], self.stream[rows], self.kind[rows], self.start[rows], self.end[rows],
                     self.name[rows], self.names)


def _key(ipu: np.ndarray, stream: np.ndarray) -> np.ndarray:
    return np.asarray(ipu, np.int64) * _STREAM + np.asarray(stream, np.int64) + _STREAM // 2


class StreamIndex:
    """The lanes (one row per (rank, stream) holding a kernel, by IPU then stream: ``LANE_COLUMNS``), the kernels'
    extent as a half-open window ``[start_ns, end_ns)``, and ``pieces(a, b, ipus)``: the kernels that may run in
    ``[a, b)`` on those IPUs (every IPU's for None), a piece at a time, each IPU's in order of start."""

    def __init__(self, lanes: pd.DataFrame, start_ns: int, end_ns: int,
                 pieces: Callable[[int, int, list[int] | None], Iterator[Piece]]) -> None:
        self.lanes, self.start_ns, self.end_ns, self.pieces = lanes, start_ns, max(end_ns, start_ns + 1), pieces
        self.keys = _key(lanes["ipu"].to_numpy(), lanes["stream"].to_numpy())

    @classmethod
    def of(cls, k: Kernels) -> StreamIndex:
        """The index of kernels in memory (sorted by ipu then start, as ``Kernels`` are)."""
        def pieces(a: int, b: int, ipus: list[int] | None) -> Iterator[Piece]:
            yield Piece.of(k if ipus is None else k.take(np.isin(k.ipu, ipus)))

        keys, counts = np.unique(_key(k.ipu, k.stream), return_counts=True)
        return cls(_lanes(keys, counts, k.ranks), int(k.start.min()) if len(k) else 0,
                   int(k.end.max()) if len(k) else 0, pieces)

    @classmethod
    def read(cls, profile: Any, ranks: np.ndarray) -> StreamIndex:
        """The index of a profile's ``kernels`` table: its lanes and extent from one pass over its IPU, stream and
        time columns, a row group at a time; its windows' kernels read again from the row groups they need."""
        keys, counts, lo, hi = [], [], [], []
        for batch in profile.iter_batches("kernels", ["ipu", "stream", "start_cycle", "end_cycle"]):
            key, count = np.unique(_key(batch["ipu"].to_numpy(), batch["stream"].to_numpy()), return_counts=True)
            keys.append(key)
            counts.append(count)
            if batch.num_rows:
                lo.append(int(batch["start_cycle"].to_numpy().min()))
                hi.append(int(batch["end_cycle"].to_numpy().max()))
        key, at = np.unique(np.concatenate(keys) if keys else np.zeros(0, np.int64), return_inverse=True)
        total = np.bincount(at.ravel(), weights=np.concatenate(counts) if counts else None, minlength=len(key))
        metadata = profile.metadata("kernels")
        verified = profile.footer_verified("kernels")
        spans = [tuple(statistics(metadata, g, c) for c in ("ipu", "start_cycle", "end_cycle")) if verified else
                 (None, None, None) for g in range(metadata.num_row_groups)]

        def pieces(a: int, b: int, ipus: list[int] | None) -> Iterator[Piece]:
            chosen = None if ipus is None else np.asarray(sorted(ipus), np.int64)
            for group, (ipu, start, end) in enumerate(spans):
                if (start is not None and start[0] >= b) or (end is not None and end[1] <= a) or (
                        chosen is not None and ipu is not None and not ((chosen >= ipu[0]) & (chosen <= ipu[1])).any()):
                    continue  # its footer says it holds no kernel of the window
                for batch in profile.iter_batches("kernels", READ_COLUMNS, row_groups=[group]):
                    k = Piece.read(Columns(pa.Table.from_batches([batch])))
                    yield k if chosen is None else k.take(np.isin(k.ipu, chosen))

        return cls(_lanes(key, total.astype(np.int64), ranks), min(lo, default=0), max(hi, default=0), pieces)

    def lane_of(self, k: Piece) -> np.ndarray:
        """Each kernel's lane."""
        return np.searchsorted(self.keys, _key(k.ipu, k.stream))

    def chosen(self, ipus: list[int] | None) -> pd.DataFrame:
        """The lanes of ``ipus`` (every lane for None)."""
        return self.lanes if ipus is None else self.lanes[self.lanes["ipu"].isin([int(i) for i in ipus])]


def _lanes(keys: np.ndarray, counts: np.ndarray, ranks: np.ndarray) -> pd.DataFrame:
    ipu = keys // _STREAM
    return pd.DataFrame({"lane": np.arange(len(keys), dtype=np.int64), "ipu": ipu,
                         "rank": np.asarray(ranks, np.int64)[ipu] if len(keys) else ipu,
                         "stream": keys % _STREAM - _STREAM // 2, "kernels": np.asarray(counts, np.int64)})


@dataclass(frozen=True)
class StreamWindow:
    """One zoom window: ``level`` is ``"events"`` (each kernel) or ``"bins"``; ``frame`` has ``WINDOW_COLUMNS``
    (a bin's ``name`` is empty), ``lanes`` the lanes shown (``LANE_COLUMNS``), ``kernels`` those in the window."""

    level: str
    frame: pd.DataFrame
    lanes: pd.DataFrame
    start_ns: int
    end_ns: int
    kernels: int


def window(index: StreamIndex, start_ns: int | None = None, end_ns: int | None = None, ipus: list[int] | None = None,
           max_kernels: int = MAX_KERNELS, max_bins: int = MAX_BINS) -> StreamWindow:
    """The lanes of ``ipus`` (every rank's for None) between two times (ns): each kernel while there are at most
    ``max_kernels``, else each (lane, kind)'s busy time and kernels in at most ``max_bins`` bins; the window's
    kernels read a piece at a time (``StreamIndex.pieces``), each piece's bins added up as it comes."""
    a = index.start_ns if start_ns is None else int(start_ns)
    b = max(index.end_ns if end_ns is None else int(end_ns), a + 1)
    lanes = index.chosen(ipus)
    edges = bin_edges(a, b, max_bins)
    slot = np.full(len(index.lanes), -1, np.int64)  # each lane's place among those shown: the bins' keys
    slot[lanes["lane"].to_numpy()] = np.arange(len(lanes))
    bins = _Bins(edges, len(lanes) * len(KERNEL_KINDS))
    events: list[tuple[np.ndarray, ...]] = []  # the kernels themselves while they are few enough
    inside = 0
    for k in index.pieces(a, b, ipus):
        k = k.take((k.start < b) & (k.end > a))
        if not len(k):
            continue
        lane = index.lane_of(k)
        inside += len(k)
        if inside <= max_kernels:
            events.append((lane, k.kind, k.names[k.name].astype(object), k.start, k.end))
        bins.add(slot[lane] * len(KERNEL_KINDS) + k.kind, k.start, k.end)
    if inside <= max_kernels:
        lane, kind, name, start, end = (np.concatenate([e[c] for e in events]) if events else
                                        np.zeros(0, object if c == 2 else np.int64) for c in range(5))
        order = np.lexsort((start, lane))
        frame = _frame(index, lane[order], kind[order], name[order], start[order], end[order],
                       (end - start)[order], np.ones(len(order), np.int64))
        return StreamWindow("events", frame, lanes.reset_index(drop=True), a, b, inside)
    key, at, busy, count = bins.result()
    lane, kind = lanes["lane"].to_numpy()[key // len(KERNEL_KINDS)], key % len(KERNEL_KINDS)
    order = np.lexsort((kind, at, lane))
    frame = _frame(index, lane[order], kind[order], np.full(len(order), "", dtype=object), edges[at][order],
                   edges[at + 1][order], busy[order], count[order])
    return StreamWindow("bins", frame, lanes.reset_index(drop=True), a, b, inside)


class _Bins:
    """Each (lane, kind) key's busy time and kernels in each bin of ``edges``, added a piece of kernels at a time:
    a key's kernels merged into disjoint intervals, its last interval carried into the next piece (it may still
    grow), the others' time split over the bins they cover."""

    def __init__(self, edges: np.ndarray, keys: int) -> None:
        self.edges, self.bins = edges, len(edges) - 1
        self.size = keys * self.bins
        self.busy = np.zeros(self.size, np.int64)
        self.count = np.zeros(self.size, np.int64)
        self.held = (np.zeros(0, np.int64),) * 3  # (key, start, end) of each key's last interval

    def add(self, key: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        which, at = self._spread(start, end)
        self._added(self.count, key[which] * self.bins + at, None)
        key, start, end = (np.concatenate([h, x]) for h, x in zip(self.held, (key, start, end)))
        order = np.lexsort((start, key))
        key, start, end = key[order], start[order], end[order]
        reach = pd.Series(end).groupby(key).cummax().to_numpy()  # the latest end so far of the key's kernels
        first = np.flatnonzero(np.r_[True, (key[1:] != key[:-1]) | (start[1:] > reach[:-1])])
        last = np.r_[first[1:], len(key)] - 1
        merged = key[first], start[first], reach[last]
        closing = np.r_[merged[0][1:] == merged[0][:-1], False]  # a key's intervals but its last
        self._busy(*(m[closing] for m in merged))
        self.held = tuple(m[~closing] for m in merged)

    def result(self) -> tuple[np.ndarray, ...]:
        """``(key, bin, busy_ns, kernels)`` of each (key, bin) with either."""
        self._busy(*self.held)
        self.held = (np.zeros(0, np.int64),) * 3
        cell = np.flatnonzero((self.busy > 0) | (self.count > 0))
        return cell // self.bins, cell % self.bins, self.busy[cell], self.count[cell]

    def _busy(self, key: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        which, at = self._spread(start, end)
        lo, hi = self.edges[at], self.edges[at + 1]
        self._added(self.busy, key[which] * self.bins + at, np.minimum(end[which], hi) - np.maximum(start[which], lo))

    @staticmethod
    def _added(into: np.ndarray, cells: np.ndarray, values: np.ndarray | None) -> None:
        """``values`` (1 each for None) added to ``into`` at ``cells``; past ``DENSE_CELLS`` cells, summed over the
        cells they touch, not over an array of every cell (every lane of thousands of ranks: millions of cells)."""
        if len(into) <= DENSE_CELLS:
            into += np.bincount(cells, weights=values, minlength=len(into)).astype(np.int64)
            return
        touched, at = np.unique(cells, return_inverse=True)
        into[touched] += np.bincount(at.ravel(), weights=values, minlength=len(touched)).astype(np.int64)

    def _spread(self, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each interval's row and each bin it overlaps (``[start, end)`` against ``[edge, next edge)``)."""
        first = np.maximum(np.searchsorted(self.edges, start, "right") - 1, 0)
        last = np.minimum(np.searchsorted(self.edges, end, "left"), self.bins)  # one past the last bin it overlaps
        span = np.maximum(last - first, 0)
        which = np.repeat(np.arange(len(start)), span)
        at = np.arange(len(which)) - np.repeat(np.cumsum(span) - span, span) + first[which]
        return which, at


def _frame(index: StreamIndex, lane: np.ndarray, kind: np.ndarray, name: np.ndarray, start: np.ndarray,
           end: np.ndarray, busy: np.ndarray, count: np.ndarray) -> pd.DataFrame:
    lane = np.asarray(lane, np.int64)
    return pd.DataFrame({
        "lane": lane, "rank": index.lanes["rank"].to_numpy()[lane], "stream": index.lanes["stream"].to_numpy()[lane],
        "kind": np.asarray(KERNEL_KINDS, dtype=object)[np.asarray(kind, np.int64)], "name": name,
        "start_ns": np.asarray(start, np.int64), "end_ns": np.asarray(end, np.int64),
        "busy_ns": np.asarray(busy, np.int64), "kernels": np.asarray(count, np.int64)}, columns=WINDOW_COLUMNS)
