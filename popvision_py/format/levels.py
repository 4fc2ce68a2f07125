"""The trace's levels of detail: busy cycles per IPU and phase in bins of a few widths, as map tiles are.

A trace of a billion rows is too many to draw or to hold; a zoomed-out view of it needs only each
IPU's cycles per phase in a few hundred bins. ``LevelFold`` folds the trace's rows, batch by batch
and in any order, into each IPU's cycles, overlapping rows and first rows per phase in bins
``[k × width, (k + 1) × width)`` of the finest width, doubling the width (two bins merged into one,
exactly) whenever the bins outgrow what the rows so far need. ``levels`` then gives the table
``trace_levels``: the finest level and coarser ones, each ``LEVEL_FACTOR`` times wider, down to a
level of at most ``COARSEST_BINS`` bins; level 0 is the coarsest.

The writer folds the trace as it writes it (so ``popvision run`` and ``popvision import`` write the
table); a profile written before schema version 3 has none, and the analysis folds it once on open
(``analysis.trace.levels``). Every figure is an exact integer: a bin's ``cycles`` are the sum of its rows'
cycles inside it, so each level's cycles per IPU and phase sum to the trace's.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from popvision_py.format.schema import PHASES
from popvision_py.format.arrays import arrow, numbers

COARSEST_BINS = 512  # a level of at most this many bins over the run is the last (level 0)
LEVEL_FACTOR = 4  # each level's bins are this many times narrower than the level above
ROWS_PER_BIN = 16_384  # the finest bins hold about this many trace rows (all IPUs) or fewer
MAX_BINS = 1 << 20  # the finest level never has more bins than this over the run
# While folding, up to this many bins are kept whatever the rows so far (a fold over rows out of time order
# sees the run's end early); the result is then merged down to the bins the rows need.
FOLD_BINS = 1 << 14
# Rows of the trace held as they come (a profile's trace of up to this many rows, an import's say) and binned
# once at the end, straight at the finest level's width, a few IPUs at a time (``CHUNK_CELLS`` cells of each
# array): the bins of a fold, ``FOLD_BINS`` wide for every IPU, would grow with IPUs x FOLD_BINS (7 MB an IPU).
HELD_ROWS = 1 << 21
CHUNK_CELLS = 1 << 20
FLOAT_EXACT = float(2**53)  # a float64 sum below this is an exact integer
SUM_LIMIT = float(2**62)  # a trace whose cycles sum to this or more is refused by readers: no levels are kept
LEVEL_COLUMNS = ("level", "ipu", "phase", "start_cycle", "end_cycle", "cycles", "rows")
N_PHASE = len(PHASES)


def phase_codes(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Codes into PHASES of a phase column (a dictionary or plain strings); an unknown word is idle's code
    (the reader refuses such a word before any fold sees it)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not pa.types.is_dictionary(column.type):
        column = column.dictionary_encode()
    words = column.dictionary.to_pylist()
    lut = np.array([PHASES.index(w) if w in PHASES else N_PHASE - 1 for w in words] or [0], np.int64)
    indices = numbers(column.indices)
    return lut[indices] if len(indices) else np.zeros(0, np.int64)


class LevelFold:
    """The running bins of ``levels``: ``cycles``, ``rows`` (rows overlapping the bin) and ``first``
    (rows whose first overlapped bin it is), each ``[ipu, phase, bin]`` at ``width`` cycles a bin.

    A row overlaps bin k when it starts before the bin's end and ends after its start (a row of no
    cycles then overlaps the bin it lies inside, none when it lies on an edge), as the timeline's
    bins count rows. Two bins merge exactly: cycles and first rows add, and the rows overlapping the
    pair are those overlapping the first plus those whose first bin is the second.
    """

    def __init__(self) -> None:
        self.width = 1
        self.total_rows = 0
        self.cycles_sum = 0.0
        self.end = 0
        self.cycles = np.zeros((0, N_PHASE, 0), np.int64)
        self.rows = np.zeros((0, N_PHASE, 0), np.int64)
        self.first = np.zeros((0, N_PHASE, 0), np.int64)
        # the rows, held until the end while they are few (``HELD_ROWS``), each batch with the width it came at
        self.held: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]] | None = []
        self.held_rows = 0

    def _bins_allowed(self) -> int:
        return min(MAX_BINS, max(FOLD_BINS, self.total_rows // ROWS_PER_BIN)) * 2

    def add_table(self, table: pa.Table | pa.RecordBatch) -> None:
        """Fold a batch of the trace (its ``ipu``, ``phase``, ``start_cycle`` and ``end_cycle`` columns)."""
        self.add(numbers(table.column("ipu")), phase_codes(table.column("phase")),
                 numbers(table.column("start_cycle")), numbers(table.column("end_cycle")))

    def add(self, ipu: np.ndarray, phase: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """Fold rows given as arrays (``phase``: codes into PHASES)."""
        n = len(ipu)
        if not n:
            return
        self.total_rows += n
        self.cycles_sum += float(np.sum(end - start, dtype=np.float64))
        if self.cycles_sum >= SUM_LIMIT:  # a trace no reader takes (trace.scan.SUM_LIMIT): nothing to fold
            return
        self.end = max(self.end, int(end.max()))
        while -(-self.end // self.width) > self._bins_allowed():
            if self.held is None:
                self._double()
            else:
                self.width *= 2  # the bins are made once the rows are all in (``result``) or too many to hold
        if self.held is not None:
            self.held.append((np.asarray(ipu, np.int32), np.asarray(phase, np.int8),
                              np.asarray(start, np.int64), np.asarray(end, np.int64), self.width))
            self.held_rows += n
            if self.held_rows > HELD_ROWS:
                self._bin_held()
            return
        self._fold(ipu, phase, start, end)

    def _fold(self, ipu: np.ndarray, phase: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """Add rows to the bins at the current width, the bins grown to hold them."""
        n_ipu = max(self.cycles.shape[0], int(ipu.max()) + 1)
        n_bin = max(self.cycles.shape[2], -(-self.end // self.width) + 2)
        if (n_ipu, n_bin) != (self.cycles.shape[0], self.cycles.shape[2]):
            n_bin = max(n_bin, min(2 * self.cycles.shape[2], self._bins_allowed() + 1))
            self.cycles, self.rows, self.first = (_grown(a, n_ipu, n_bin) for a in (self.cycles, self.rows, self.first))
        _add_rows((self.cycles, self.rows, self.first), self.width, ipu, phase, start, end)

    def _held_rows(self) -> tuple[np.ndarray, ...]:
        """The rows held, as one set of columns, less those each batch's width did not count (``_counted``)."""
        held, self.held, self.held_rows = self.held or [], [], 0
        kept = [[c[_counted(b[2], b[3], b[4])] for c in b[:4]] for b in held]
        return tuple(np.concatenate([k[i] for k in kept]) if kept else np.zeros(0, np.int64) for i in range(4))

    def _bin_held(self) -> None:
        """Too many rows to hold: the held rows binned at the current width, and every later batch as it comes."""
        ipu, phase, start, end = self._held_rows()
        self.held = None
        if len(ipu):
            self._fold(ipu, phase, start, end)

    def _double(self) -> None:
        """Merge each pair of bins: the width doubles."""
        self.cycles, self.rows, self.first = merged(self.cycles, self.rows, self.first, 2)
        self.width *= 2

    def result(self) -> pa.Table:
        """The ``trace_levels`` table (LEVEL_COLUMNS), sorted by level, start_cycle, ipu and phase."""
        if self.cycles_sum >= SUM_LIMIT:
            self.cycles, self.rows, self.first, self.end = (np.zeros((0, N_PHASE, 0), np.int64),) * 3 + (0,)
            self.held = None
        want = min(MAX_BINS, max(COARSEST_BINS, self.total_rows // ROWS_PER_BIN))
        if self.held is not None:
            return _table(self._held_levels(want))
        while -(-self.end // self.width) > want:
            self._double()
        return _table(_levels(self.cycles, self.rows, self.first, self.width, self.end))

    def _held_levels(self, want: int) -> list[dict[str, np.ndarray]]:
        """``_levels`` of the held rows, binned straight at the finest level's width, a few IPUs at a time: what
        is held grows with the bins the table has, not with the IPUs times the bins of the fold."""
        width = self.width
        while -(-self.end // width) > want:
            width *= 2
        ipu, phase, start, end = self._held_rows()
        order = np.argsort(ipu, kind="stable")
        ipu, phase, start, end = ipu[order], phase[order], start[order], end[order]
        n_bin = -(-self.end // width) + 2
        step = max(1, CHUNK_CELLS // (N_PHASE * n_bin))
        bounds = np.searchsorted(ipu, np.arange(0, int(ipu.max(initial=-1)) + step + 1, step))
        parts = []
        for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            if a == b:
                continue
            lowest = k * step
            bins = tuple(np.zeros((step, N_PHASE, n_bin), np.int64) for _ in range(3))
            _add_rows(bins, width, ipu[a:b] - lowest, phase[a:b], start[a:b], end[a:b])
            for part in _levels(*bins, width, self.end):
                part["ipu"] = (part["ipu"] + lowest).astype(np.int16)
                parts.append(part)
        return parts


def _counted(start: np.ndarray, end: np.ndarray, width: int) -> np.ndarray:
    """Whether each row overlaps a bin at ``width`` (``LevelFold``'s rule). A row counted at a width is counted
    at every multiple of it, with the same cycles, rows and first rows as its bins merged (``merged``): rows
    binned at a coarser width than they came at, less those not counted then, give the same bins."""
    return start // width <= -(-end // width) - 1


def _add_rows(bins: tuple[np.ndarray, np.ndarray, np.ndarray], w: int, ipu: np.ndarray, phase: np.ndarray,
              start: np.ndarray, end: np.ndarray) -> None:
    """Rows added to ``bins`` (cycles, rows, first: ``[ipu, phase, bin]`` at ``w`` cycles a bin, large enough)."""
    all_cycles, all_rows, all_first = bins
    n_ipu = all_cycles.shape[0]
    start = start.astype(np.int64, copy=False)
    end = end.astype(np.int64, copy=False)
    lo = start // w  # the bin of the row's start
    hi = -(-end // w) - 1  # the last bin starting before the row's end
    counted = lo <= hi
    # the bins this batch touches (a batch of a time-ordered trace covers a short stretch of the run)
    b0, b1 = int(lo.min()), int(np.maximum(hi, lo).max()) + 2
    nb, n_cell = b1 - b0, n_ipu * N_PHASE
    lo, hi = lo - b0, hi - b0
    cell = (ipu.astype(np.int64) * N_PHASE + phase.astype(np.int64)) * nb  # [ipu, phase, b0] flat
    size = n_cell * nb
    # cycles: a row in one bin adds its own; a longer one its head to the first bin, its tail to the
    # last, and a whole width to every bin between (a running count of open rows)
    one = counted & (lo == hi)
    many = counted & (lo < hi)
    head = np.where(one, end - start, (lo + b0 + 1) * w - start)
    tail = end - (hi + b0) * w
    cycles = _sum_at(np.concatenate([(cell + lo)[counted], (cell + hi)[many]]),
                     np.concatenate([head[counted], tail[many]]), size)
    if many.any():
        between = (np.bincount((cell + lo + 1)[many], minlength=size)
                   - np.bincount((cell + hi)[many], minlength=size))
        cycles += np.cumsum(between.reshape(n_cell, nb), axis=1).reshape(-1) * w
    # rows overlapping each bin: +1 from the first bin, -1 after the last
    first_at = (cell + lo)[counted]
    first = np.bincount(first_at, minlength=size)
    overlap = first - np.bincount((cell + hi + 1)[counted], minlength=size)
    shape = (n_ipu, N_PHASE, nb)
    all_cycles[:, :, b0:b1] += cycles.reshape(shape)
    all_rows[:, :, b0:b1] += np.cumsum(overlap.reshape(shape), axis=2)
    all_first[:, :, b0:b1] += first.reshape(shape)


def _levels(cycles: np.ndarray, rows: np.ndarray, first: np.ndarray, width: int,
            end: int) -> list[dict[str, np.ndarray]]:
    """Each level's cells (``_cells``), from the finest bins (``width`` cycles) to a level of at most
    ``COARSEST_BINS`` bins over ``end`` cycles."""
    found = [(cycles, rows, width)]
    while -(-end // width) > COARSEST_BINS:
        cycles, rows, first = merged(cycles, rows, first, LEVEL_FACTOR)
        width *= LEVEL_FACTOR
        found.append((cycles, rows, width))
    return [_cells(level, *found[-1 - level]) for level in range(len(found))]


def _table(parts: list[dict[str, np.ndarray]]) -> pa.Table:
    """The levels' cells as the ``trace_levels`` table, sorted by level, start_cycle, ipu and phase; a column at a
    time, each part's copy of it dropped once it is joined (a table of thousands of IPUs holds millions of cells)."""
    dtypes = {"level": np.int32, "ipu": np.int16, "phase": np.int32}

    def column(name: str) -> np.ndarray:
        return np.concatenate([np.zeros(0, dtypes.get(name, np.int64))] + [p.pop(name) for p in parts])

    keys = {name: column(name) for name in ("level", "start_cycle", "ipu", "phase")}
    order = np.lexsort((keys["phase"], keys["ipu"], keys["start_cycle"], keys["level"]))
    columns = {}
    for name in LEVEL_COLUMNS:
        values = keys.pop(name) if name in keys else column(name)
        columns[name] = arrow(values[order].astype(dtypes.get(name, np.int64), copy=False))
        del values
    columns["phase"] = pa.DictionaryArray.from_arrays(columns["phase"].cast(pa.int32()), arrow(list(PHASES)))
    return pa.table(columns)


def merged(cycles: np.ndarray, rows: np.ndarray, first: np.ndarray, factor: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bins ``factor`` at a time merged into one (the last bins padded with empty ones)."""
    n_ipu, n_phase, n_bin = cycles.shape
    n_out = -(-n_bin // factor)

    def grouped(a: np.ndarray) -> np.ndarray:
        out = np.zeros((n_ipu, n_phase, n_out * factor), np.int64)
        out[:, :, :n_bin] = a
        return out.reshape(n_ipu, n_phase, n_out, factor)

    c, r, f = grouped(cycles), grouped(rows), grouped(first)
    # rows overlapping the group: those overlapping its first bin, plus those first overlapping a later one
    return c.sum(axis=3), r[..., 0] + f[..., 1:].sum(axis=3), f.sum(axis=3)


def _cells(level: int, cycles: np.ndarray, rows: np.ndarray, width: int) -> dict[str, np.ndarray]:
    """One level's bins that hold a row, as columns, in (start, ipu, phase) order."""
    keep = rows > 0
    bins, ipu, phase = np.nonzero(keep.transpose(2, 0, 1))
    start = bins.astype(np.int64) * width
    return {"level": np.full(len(bins), level, np.int32), "ipu": ipu.astype(np.int16), "phase": phase.astype(np.int32),
            "start_cycle": start, "end_cycle": start + width, "cycles": cycles[ipu, phase, bins],
            "rows": rows[ipu, phase, bins]}


def _grown(a: np.ndarray, n_ipu: int, n_bin: int) -> np.ndarray:
    out = np.zeros((n_ipu, N_PHASE, n_bin), np.int64)
    out[: a.shape[0], :, : a.shape[2]] = a
    return out


def _sum_at(where: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """Weights summed per cell: a float bincount when its sums are exact, else ``np.add.at`` in int64."""
    if float(weights.sum(dtype=np.float64)) < FLOAT_EXACT:
        return np.rint(np.bincount(where, weights=weights, minlength=size)).astype(np.int64)
    out = np.zeros(size, np.int64)
    np.add.at(out, where, weights)
    return out
