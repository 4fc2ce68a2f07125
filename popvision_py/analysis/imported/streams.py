"""A GPU's streams over time: each rank's streams as lanes, and a zoom window of them at a level of detail a
figure can draw, whatever the number of kernels (the dashboard's GPU page).

A *lane* is one (rank, stream) of the ``kernels`` table (``gpu.Kernels``). ``StreamIndex`` cuts the kernels
once into (lane, kind) groups, each sorted by start with the union of its kernels (``SpanUnion``), as the
System page's ``system.window`` does for the host's events. ``window`` gives each kernel of the window
while it holds at most ``max_kernels`` (level ``events``), else each group's occupancy in at most
``max_bins`` equal bins of the window (level ``bins``): the time a kernel of that kind runs on the lane
in the bin (kernels of one kind overlapping count once) and the kernels there, so that the share of a
bin busy with a kind is ``busy_ns / (end_ns - start_ns)``. A bin's time is the difference of the union's
covered time at its edges: one ``np.searchsorted`` per edge and group, never a pass over the kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from popvision_py.analysis.common.tables import SpanUnion, bin_edges
from popvision_py.analysis.imported.gpu import Kernels
from popvision_py.format.schema import KERNEL_KINDS

WINDOW_COLUMNS = ["lane", "rank", "stream", "kind", "name", "start_ns", "end_ns", "busy_ns", "kernels"]
LANE_COLUMNS = ["lane", "ipu", "rank", "stream", "kernels"]
MAX_KERNELS = 2000  # a window holding more kernels than this is drawn as its occupancy in bins
MAX_BINS = 400  # bins per lane and kind


@dataclass(frozen=True)
class _KindGroup:
    """The kernels of one (lane, kind), by start, with what a window needs of them."""

    lane: int
    kind: int
    rows: np.ndarray  # indexes into the Kernels
    start: np.ndarray
    end: np.ndarray
    reach: np.ndarray  # the latest end so far: the kernels before the first reach > a all end by a
    ends: np.ndarray  # ends sorted
    union: SpanUnion


class StreamIndex:
    """The kernels cut into (lane, kind) groups, each ready for ``window``; ``lanes`` names the lanes (one
    row per (rank, stream) holding a kernel, by IPU then stream: ``LANE_COLUMNS``)."""

    def __init__(self, k: Kernels) -> None:
        self.kernels = k
        streams, stream = np.unique(k.stream, return_inverse=True)
        width = max(len(streams), 1)
        codes, lane = np.unique(k.ipu * width + stream.astype(np.int64), return_inverse=True)
        lane = lane.astype(np.int64)
        ipu = codes // width
        self.lanes = pd.DataFrame({
            "lane": np.arange(len(codes), dtype=np.int64), "ipu": ipu, "rank": k.ranks[ipu] if len(codes) else ipu,
            "stream": streams[codes % width] if len(codes) else codes,
            "kernels": np.bincount(lane, minlength=len(codes)).astype(np.int64)})
        self.lane = lane
        kinds = len(KERNEL_KINDS)
        key = lane * kinds + k.kind
        order = np.lexsort((k.start, key))  # by group, each group's kernels by start
        cuts = np.flatnonzero(np.diff(key[order])) + 1
        self.groups = [_group(k, rows, int(key[rows[0]] // kinds), int(key[rows[0]] % kinds))
                       for rows in np.split(order, cuts)] if len(k) else []
        # the kernels' time as a half-open window [start_ns, end_ns): the last kernel's end included
        self.start_ns = int(k.start.min()) if len(k) else 0
        self.end_ns = max(int(k.end.max()) if len(k) else 0, self.start_ns + 1)

    def chosen(self, ipus: list[int] | None) -> list[_KindGroup]:
        """The groups of the lanes of ``ipus`` (every lane's for None)."""
        if ipus is None:
            return self.groups
        keep = set(self.lanes["lane"][self.lanes["ipu"].isin([int(i) for i in ipus])].tolist())
        return [g for g in self.groups if g.lane in keep]

    def count(self, a: int, b: int, groups: list[_KindGroup]) -> int:
        """Kernels of ``groups`` that run in [a, b): those starting before b less those ended by a."""
        return sum(int(np.searchsorted(g.start, b, "left") - np.searchsorted(g.ends, a, "right")) for g in groups)


def _group(k: Kernels, rows: np.ndarray, lane: int, kind: int) -> _KindGroup:
    start, end = k.start[rows], k.end[rows]
    return _KindGroup(lane, kind, rows, start, end, np.maximum.accumulate(end), np.sort(end), SpanUnion.of(start, end))


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
    ``max_kernels``, else each (lane, kind)'s busy time and kernels in at most ``max_bins`` bins."""
    a = index.start_ns if start_ns is None else int(start_ns)
    b = max(index.end_ns if end_ns is None else int(end_ns), a + 1)
    groups = index.chosen(ipus)
    lanes = index.lanes if ipus is None else index.lanes[index.lanes["ipu"].isin([int(i) for i in ipus])]
    inside = index.count(a, b, groups)
    k = index.kernels
    if inside <= max_kernels:
        picked = []
        for g in groups:
            lo, hi = int(np.searchsorted(g.reach, a, "right")), int(np.searchsorted(g.start, b, "left"))
            rows = g.rows[lo:max(hi, lo)]
            picked.append(rows[k.end[rows] > a])
        rows = np.concatenate(picked) if picked else np.zeros(0, np.int64)
        rows = rows[np.lexsort((k.start[rows], index.lane[rows]))]
        frame = _frame(index, index.lane[rows], k.kind[rows], k.names[k.name[rows]].astype(object), k.start[rows],
                       k.end[rows], k.end[rows] - k.start[rows], np.ones(len(rows), np.int64))
        return StreamWindow("events", frame, lanes.reset_index(drop=True), a, b, inside)
    edges = bin_edges(a, b, max_bins)
    low, high = edges[:-1], edges[1:]
    parts: list[tuple[np.ndarray, ...]] = []
    for g in groups:
        busy = np.diff(g.union.before(edges))
        count = np.searchsorted(g.start, high, "left") - np.searchsorted(g.ends, low, "right")
        keep = np.flatnonzero((busy > 0) | (count > 0))
        parts.append((np.full(len(keep), g.lane), np.full(len(keep), g.kind), low[keep], high[keep], busy[keep],
                      count[keep]))
    lane, kind, start, end, busy, count = (np.concatenate([p[c] for p in parts]) if parts else np.zeros(0, np.int64)
                                           for c in range(6))
    order = np.lexsort((kind, start, lane))
    frame = _frame(index, lane[order], kind[order], np.full(len(order), "", dtype=object), start[order], end[order],
                   busy[order], count[order])
    return StreamWindow("bins", frame, lanes.reset_index(drop=True), a, b, inside)


def _frame(index: StreamIndex, lane: np.ndarray, kind: np.ndarray, name: np.ndarray, start: np.ndarray,
           end: np.ndarray, busy: np.ndarray, count: np.ndarray) -> pd.DataFrame:
    lane = np.asarray(lane, np.int64)
    return pd.DataFrame({
        "lane": lane, "rank": index.lanes["rank"].to_numpy()[lane], "stream": index.lanes["stream"].to_numpy()[lane],
        "kind": np.asarray(KERNEL_KINDS, dtype=object)[np.asarray(kind, np.int64)], "name": name,
        "start_ns": np.asarray(start, np.int64), "end_ns": np.asarray(end, np.int64),
        "busy_ns": np.asarray(busy, np.int64), "kernels": np.asarray(count, np.int64)}, columns=WINDOW_COLUMNS)
