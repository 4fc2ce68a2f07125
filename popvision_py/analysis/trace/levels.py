"""The execution trace read out of core: zoomed-out views from its levels of detail, zoomed-in ones from its rows.

A trace may hold a billion rows; no view holds them. ``TraceLevels`` answers a window of the run in
one of two ways:

- **levels**: the profile's ``trace_levels`` table (``format.levels``): each IPU's cycles per phase
  in bins of a few widths. A window wider than ``RAW_ROWS`` trace rows is drawn from the level whose
  bins are the narrowest that still give at most ``max_bins`` in the window; only that level's rows
  in the window are read (the table is sorted by level and start, so its row groups' statistics
  find them). A profile written before schema version 3 has no such table: it is folded once, on
  first use, in one streaming pass over four of the trace's columns, and kept (its size is the
  levels', a few bytes per 16,384 rows).
- **rows**: the trace's row groups that can hold a row of the window, found from their footer
  statistics of ``start_cycle`` and ``end_cycle`` (the writer writes run by run, IPU by IPU, in time
  order, so a row group is a stretch of one IPU's run and a window's rows lie in a few row groups;
  ``_group_spans``), read and indexed (``trace.TimelineIndex``) as long as
  they hold at most ``RAW_ROWS`` rows. The last two windows read are kept.

A window that is too wide for rows and too narrow for the levels (or a view that needs rows, the
tiles in time) raises ``WindowTooWideError``, whose sentence offers the widest window that fits.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from popvision_py.analysis.trace import timeline as _trace
from popvision_py.analysis.common.tables import PHASES, category, finish
from popvision_py.analysis.trace.timeline import Timeline, TimelineIndex
from popvision_py.analysis.trace.rows import TIMELINE_COLUMNS, timeline_arrays
from popvision_py.errors import OutOfRangeError
from popvision_py.format.levels import LEVEL_FACTOR, LevelFold

RAW_ROWS = 4_000_000  # trace rows a view reads at once: about 100 MB of arrays and index
KEPT_WINDOWS = 2  # windows of rows kept read (the timeline and the tiles of one zoom ask for the same)
MIN_LEVEL_BINS = 8  # a level is used for a window only if it gives at least this share of max_bins (1/8)


class WindowTooWideError(OutOfRangeError):
    """A view asked for more trace rows than ``RAW_ROWS``: ``fits`` is the widest window around it that fits."""

    def __init__(self, message: str, fits: tuple[int, int]) -> None:
        super().__init__(message)
        self.fits = fits


@dataclass(frozen=True)
class LevelBins:
    """One level's bins in a window: each (ipu, phase, bin) with rows, as arrays; ``width`` its bins' cycles."""

    width: int
    ipu: np.ndarray
    phase: np.ndarray  # codes into PHASES
    start_cycle: np.ndarray
    cycles: np.ndarray
    rows: np.ndarray


class TraceLevels:
    """The trace of one profile read out of core (see the module docstring). ``profile``: a ``format.Profile``."""

    def __init__(self, profile: Any, batches: Any) -> None:
        self._profile = profile
        self._batches = batches  # columns -> the trace's batches (``Report.trace_batches``)
        self._lock = threading.Lock()
        self._kept: list[tuple[tuple[int, ...], TimelineIndex]] = []
        self.spans = _group_spans(profile)  # stretches (row group, first start, last end) and each group's rows
        self.built = "trace_levels" not in profile.tables  # folded here, not read from the profile
        self._table: pa.Table | None = None
        if self.built:
            fold = LevelFold()
            for batch in batches(("ipu", "phase", "start_cycle", "end_cycle")):  # decoded one ahead
                fold.add_table(batch)
            self._table = fold.result()
        self.widths = self._widths()

    # -- the levels ------------------------------------------------------------------------------

    def _widths(self) -> list[int]:
        """Each level's bin width in cycles, level 0 first (none for an empty trace)."""
        if self._table is not None:
            first = self._table.slice(0, 1).to_pydict() if self._table.num_rows else None
            count = int(pc.max(self._table.column("level")).as_py()) + 1 if self._table.num_rows else 0
        else:
            meta = self._profile.metadata("trace_levels")
            if meta.num_rows == 0:
                return []
            head = next(iter(self._profile.iter_batches("trace_levels", ["level", "start_cycle", "end_cycle"],
                                                        batch_size=1, row_groups=[0])))
            first = head.slice(0, 1).to_pydict()
            column = meta.schema.names.index("level")
            count = max(int(meta.row_group(g).column(column).statistics.max) for g in range(meta.num_row_groups)) + 1
        if first is None:
            return []
        coarsest = int(first["end_cycle"][0]) - int(first["start_cycle"][0])
        return [coarsest // LEVEL_FACTOR**level for level in range(count)]

    def level_for(self, span: int, max_bins: int) -> int | None:
        """The finest level giving at most ``max_bins`` bins over ``span`` cycles, if it gives at least
        ``max_bins / MIN_LEVEL_BINS``; else None."""
        fits = [level for level, width in enumerate(self.widths) if span / width <= max_bins]
        if not fits:
            return None
        level = fits[-1]
        return level if span / self.widths[level] >= max_bins / MIN_LEVEL_BINS or level == 0 else None

    def bins(self, level: int, start_cycle: int, end_cycle: int) -> LevelBins:
        """Level ``level``'s bins overlapping [start_cycle, end_cycle)."""
        width = self.widths[level]
        a = start_cycle // width * width
        if self._table is not None:
            t = self._table
            level_col = t.column("level").to_numpy()
            start = t.column("start_cycle").to_numpy()
            keep = (level_col == level) & (start >= a) & (start < end_cycle)
            t = t.filter(pa.array(keep))
        else:
            meta = self._profile.metadata("trace_levels")
            names = meta.schema.names
            lv, st = names.index("level"), names.index("start_cycle")
            groups = []
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                lstat, sstat = group.column(lv).statistics, group.column(st).statistics
                # the table is sorted by level, then start: a group of this level alone is read only if its
                # starts reach the window
                if not lstat.min <= level <= lstat.max:
                    continue
                if lstat.min == lstat.max and (sstat.min >= end_cycle or sstat.max < a):
                    continue
                groups.append(g)
            parts = []
            for batch in self._profile.iter_batches("trace_levels", None, row_groups=groups):
                level_col, start = batch.column("level").to_numpy(), batch.column("start_cycle").to_numpy()
                keep = (level_col == level) & (start >= a) & (start < end_cycle)
                if keep.any():
                    parts.append(pa.Table.from_batches([batch]).filter(pa.array(keep)))
            t = pa.concat_tables(parts) if parts else LevelFold().result()  # no bins: an empty table
        phase = t.column("phase")
        phase = phase.combine_chunks() if isinstance(phase, pa.ChunkedArray) else phase
        words = phase.dictionary.to_pylist() if len(phase) else []
        lut = np.array([PHASES.index(w) for w in words] or [0], np.int64)
        return LevelBins(width, t.column("ipu").to_numpy().astype(np.int64), lut[phase.indices.to_numpy()] if len(phase)
                         else np.zeros(0, np.int64), t.column("start_cycle").to_numpy(),
                         t.column("cycles").to_numpy(), t.column("rows").to_numpy())

    # -- the rows ----------------------------------------------------------------------------------

    def groups(self, start_cycle: int, end_cycle: int) -> np.ndarray:
        """The trace's row groups that can hold a row overlapping [start_cycle, end_cycle)."""
        group, first, last, _ = self.spans
        return np.unique(group[(first < end_cycle) & (last > start_cycle)])

    def rows_in(self, start_cycle: int, end_cycle: int) -> int:
        """Trace rows a read of [start_cycle, end_cycle) decodes (those of its row groups)."""
        return int(self.spans[3][self.groups(start_cycle, end_cycle)].sum())

    def fitting(self, start_cycle: int, end_cycle: int) -> tuple[int, int]:
        """The widest window centred on [start_cycle, end_cycle) whose rows fit ``RAW_ROWS`` (halving it)."""
        middle, half = (start_cycle + end_cycle) // 2, max((end_cycle - start_cycle) // 2, 1)
        while half > 1 and self.rows_in(middle - half, middle + half) > RAW_ROWS:
            half //= 2
        return max(middle - half, 0), middle + half

    def index(self, start_cycle: int, end_cycle: int, what: str = "This view") -> TimelineIndex:
        """The rows of the row groups overlapping [start_cycle, end_cycle), indexed; WindowTooWideError if
        they are more than ``RAW_ROWS``."""
        groups = tuple(int(g) for g in self.groups(start_cycle, end_cycle))
        rows = int(self.spans[3][list(groups)].sum()) if groups else 0
        if rows > RAW_ROWS:
            a, b = self.fitting(start_cycle, end_cycle)
            raise WindowTooWideError(
                f"{what} reads the trace's rows, and cycles {start_cycle:,} to {end_cycle:,} hold {rows:,} of them, "
                f"more than the {RAW_ROWS:,} read at once: zoom to {b - a:,} cycles or less, e.g. cycles "
                f"{a:,} to {b:,}.", (a, b))
        # one read at a time: a second request for the same window waits for it, and two reads never
        # hold their rows at once
        with self._lock:
            for key, index in self._kept:
                if key == groups:
                    return index
            self._kept = self._kept[: KEPT_WINDOWS - 1]  # the oldest goes before the new rows come
            columns = self._profile.iter_batches("trace", list(TIMELINE_COLUMNS), row_groups=list(groups))
            index = TimelineIndex.from_ipus(timeline_arrays(columns)) if groups else TimelineIndex()
            self._kept = [(groups, index)] + self._kept
            return index


def _group_spans(profile: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where each trace row group lies in the run: stretches (row group, first start, last end), one per
    IPU it holds, and each group's rows.

    A row group of one IPU (its ``ipu`` statistics' minimum is its maximum) is one stretch, from its
    footer statistics. The writer writes run by run and IPU by IPU, so a row group where one IPU's
    rows end and the next one's begin spans the whole run by its statistics, though each IPU's part
    is a short stretch at one end: such a group's ``ipu``, ``start_cycle`` and ``end_cycle`` are read
    once, and each IPU's part is a stretch of its own (so a window reads the group only when one of
    them overlaps it). A row group without statistics is read the same way.
    """
    meta = profile.metadata("trace")
    n = meta.num_row_groups
    rows = np.array([meta.row_group(g).num_rows for g in range(n)], np.int64)
    names = meta.schema.names
    where = {c: names.index(c) for c in ("ipu", "start_cycle", "end_cycle")}
    group, first, last = [], [], []
    for g in range(n):
        if not rows[g]:
            continue
        stats = {c: meta.row_group(g).column(i).statistics for c, i in where.items()}
        if all(x is not None and x.has_min_max for x in stats.values()) and stats["ipu"].min == stats["ipu"].max:
            group.append(g), first.append(stats["start_cycle"].min), last.append(stats["end_cycle"].max)
            continue
        for batch in profile.iter_batches("trace", ["ipu", "start_cycle", "end_cycle"], row_groups=[g]):
            ipu, start, end = (batch.column(i).to_numpy() for i in range(3))
            cut = np.flatnonzero(np.r_[True, ipu[1:] != ipu[:-1]])
            group += [g] * len(cut)
            first += np.minimum.reduceat(start, cut).tolist()
            last += np.maximum.reduceat(end, cut).tolist()
    return (np.array(group, np.int64), np.array(first, np.int64), np.array(last, np.int64), rows)


def timeline(levels: TraceLevels, extent: tuple[int, int], start_cycle: int | None = None,
             end_cycle: int | None = None, max_bins: int = 2000, ipus: list[int] | None = None) -> Timeline:
    """``trace.timeline`` of the window out of core: from its rows when they fit ``RAW_ROWS``, else from the
    finest level with at most ``max_bins`` bins in it (bins whole: the first may start before the window,
    the last end after it); WindowTooWideError when neither serves."""
    a = extent[0] if start_cycle is None else int(start_cycle)
    b = extent[1] if end_cycle is None else int(end_cycle)
    b = max(b, a + 1)
    if levels.rows_in(a, b) <= RAW_ROWS:
        return _trace.timeline(levels.index(a, b), a, b, max_bins, ipus)
    level = levels.level_for(b - a, max(int(max_bins), 1))
    if level is None:
        levels.index(a, b, "The timeline at this zoom")  # raises, offering the zoom that fits
    got = levels.bins(level, a, b)
    keep = got.cycles > 0
    if ipus is not None:
        keep &= np.isin(got.ipu, np.asarray([int(i) for i in ipus], np.int64))
    frame = pd.DataFrame({"ipu": got.ipu[keep], "start_cycle": got.start_cycle[keep],
                          "end_cycle": got.start_cycle[keep] + got.width,
                          "phase": category(np.asarray(PHASES, object)[got.phase[keep]], PHASES),
                          "cycles": got.cycles[keep], "events": got.rows[keep]})
    return Timeline("bins", finish(frame, _trace.TIMELINE_COLUMNS, ["ipu", "start_cycle", "phase"]), a, b)
