"""A long trace's supersteps and Gantt bars reduced as its row groups are folded, so that neither grows with it.

The summary cuts the trace into runs of rows (``trace.scan._Slots``), about 15,000 per million
rows, 45 bytes each: 700 MB at a billion rows if they were all kept to the end, and as much again
to cut them into supersteps there. But a superstep is complete once no row still to come can start
in it or end one inside it, and the row groups' first starts are in the footer: when row groups are
folded in order, every run starting before the first start of the row groups not yet folded (the
*horizon*) lies in supersteps that are complete, bounded by cuts that are all known. ``Settler``
takes each row group's runs as its fold finishes it and, once it holds ``SETTLE_RUNS`` of them,
cuts those before the horizon into supersteps (``retime.steps_between``, the code the whole trace's
cut uses) and keeps each distinct superstep once, with how many times it ran (``Supersteps.weight``):
a run repeats its iterations, so the distinct supersteps are few. Their figures are exact
(integer cycles in float64); only sums taken over them with fractional factors (``retime.length``
of a re-timing) may round differently from the same sum taken superstep by superstep.

The Gantt bars of the runs settled are merged by bar as they go and kept for the first iterations
only, up to ``GANTT_BARS`` bars (the charts draw the first few thousand: a run repeats its
pattern). A trace of fewer than ``SETTLE_RUNS`` runs, or whose footer has no statistics, keeps its
runs as before and is cut once at the end; row groups out of time order only hold the horizon back
(at worst to the end, then cut as before): the same figures either way.

A run that is not bulk-synchronous has no supersteps to cut: an imported PyTorch trace's ranks do
not wait for each other at every idle stretch, and its row groups hold one rank after another, so
no horizon would ever pass. Its ``Settler`` (``cut=False``) only merges each batch's runs into the
Gantt bars of the first iterations as they come (``add_bars``): its memory is the bars', whatever
the trace's length.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable

import numpy as np
import pyarrow.parquet as pq

from popvision_py.analysis.trace import retime
from popvision_py.analysis.trace.scan import SLOT, SLOT_COLUMNS

SETTLE_RUNS = 1 << 18  # runs held before the settled ones are cut into supersteps (about 11 MiB)
GANTT_BARS = 1 << 17  # bars kept (whole iterations, the first ones) once runs are settled
_STEP_COLUMNS = ("kind", "start_cycle", "cycles", "ipu", "stage", "pass")  # what retime.steps_between reads
_BAR_KEY = ("ipu", "stage", "pass", "run", "iteration", "micro_batch")


def group_starts(metadata: pq.FileMetaData | None) -> np.ndarray | None:
    """Each row group's first start (``start_cycle`` minimum) from the footer; ``None`` if one lacks it."""
    if metadata is None or metadata.num_row_groups == 0:
        return None
    names = [metadata.schema.column(i).name for i in range(metadata.num_columns)]
    if "start_cycle" not in names:
        return None
    where = names.index("start_cycle")
    out = np.empty(metadata.num_row_groups, np.int64)
    for g in range(metadata.num_row_groups):
        column = metadata.row_group(g).column(where)
        stats = column.statistics
        if column.num_values == 0:
            out[g] = np.iinfo(np.int64).max
        elif stats is None or not stats.has_min_max or not isinstance(stats.min, int):
            return None
        else:
            out[g] = stats.min
    return out


def _joined(parts: list[tuple[tuple[int, ...], dict[str, np.ndarray]]]) -> dict[str, np.ndarray]:
    parts = sorted(parts, key=lambda item: item[0])
    return {c: np.concatenate([p[c] for _, p in parts]) for c in SLOT_COLUMNS}


def _taken(runs: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    return {c: v[rows] for c, v in runs.items()}


class Settler:
    """The runs of the row groups folded so far, settled into supersteps and bars past the horizon.

    ``starts``: each row group's first start (``group_starts``); ``bounds``: the trace's
    (``trace.scan.column_bounds``), for the run's first start and last end and its IPUs. Thread-safe:
    each worker hands in its row group's runs (``add``) when its fold has finished the row group.
    """

    def __init__(self, starts: np.ndarray | None, bounds: dict[str, tuple[int, int]], per_run: int,
                 limit: int | None = None, bars: int | None = None, cut: bool = True) -> None:
        self.cut = cut  # cut supersteps (a bulk-synchronous run); else keep the first iterations' bars only
        # each row group's first cycle, for the horizon (None where nothing is cut: ``add_bars`` reads none)
        starts = np.zeros(0, np.int64) if starts is None else starts
        self.starts, self.done = starts, np.zeros(len(starts), bool)
        self.lo, self.hi = int(bounds["start_cycle"][0]), int(bounds["end_cycle"][1])
        self.ipus = int(bounds["ipu"][1]) + 1
        self.per_run = max(per_run, 1)
        self.limit = SETTLE_RUNS if limit is None else limit
        self.max_bars = GANTT_BARS if bars is None else bars
        self.lock = threading.Lock()  # guards pending, held, done and settling: held only to hand runs in
        self.settle_lock = threading.Lock()  # one settle at a time; finish waits for a settle under way
        self.settling = False  # a worker is settling (outside ``lock``): the others hand in and go on
        self.pending: list[tuple[tuple[int, ...], dict[str, np.ndarray]]] = []
        self.held = 0  # runs pending
        self.handed = 0  # row groups handed in so far
        self.boundary = self.lo  # the first cut of the supersteps not settled yet
        self.ahead = np.zeros(0, np.int64)  # cuts at or past the boundary, from runs settled already
        self.rows: np.ndarray | None = None  # the distinct supersteps so far, one row each (``_row``)
        self.weight = np.zeros(0, np.int64)
        self.bar_runs: list[dict[str, np.ndarray]] = []  # counted runs merged by bar, the first iterations'
        self.last_iteration = np.iinfo(np.int64).max  # bars of later (global) iterations are dropped
        self.settled = False

    def add(self, group: int, parts: list[tuple[tuple[int, ...], dict[str, np.ndarray]]]) -> None:
        """Take row group ``group``'s runs (``_Slots.parts``), its fold done with it; settle if enough are held.

        The worker whose runs fill the limit settles the runs held so far outside ``lock``, so the other
        workers hand theirs in and fold on meanwhile: the runs handed in during a settle belong to row
        groups not done when it began, so they start at or after its horizon and wait for the next. A
        worker that hands in during a settle does not settle itself; the settling one tries again for it
        (its row group may have moved the horizon), until a settle ends with nothing handed in meanwhile.
        """
        with self.lock:
            self.pending += parts
            self.held += sum(len(p["kind"]) for _, p in parts)
            self.done[group] = True
            self.handed += 1
        while True:
            with self.lock:
                if self.held < self.limit or self.settling:
                    return
                self.settling, handed = True, self.handed
                taken, self.pending, self.held = self.pending, [], 0
                horizon = int(self.starts[~self.done].min()) if not self.done.all() else self.hi
            rest: list[tuple[tuple[int, ...], dict[str, np.ndarray]]] = taken
            try:
                with self.settle_lock:
                    rest = self._settle(taken, horizon)
            finally:
                with self.lock:  # what could not settle yet goes back first: it is earlier in the trace
                    self.pending = rest + self.pending
                    self.held += sum(len(p["kind"]) for _, p in rest)
                    self.settling = False
                    again = self.handed != handed
            if not again:
                return

    def add_bars(self, parts: list[tuple[tuple[int, ...], dict[str, np.ndarray]]]) -> None:
        """Merge ``parts`` (a batch's runs, ``_Slots.parts``) into the first iterations' bars, cutting no
        supersteps (``cut=False``): the bars do not depend on the order the runs come in."""
        if not parts:
            return
        with self.settle_lock:
            self._bars(_joined(parts))
            self.settled = True

    def finish(self, parts: list[tuple[tuple[int, ...], dict[str, np.ndarray]]]
               ) -> tuple[dict, retime.Supersteps | None]:
        """Settle everything (with ``parts``, runs not handed in yet): (the bars' runs, the supersteps;
        ``None`` where none are cut, ``cut=False``)."""
        with self.settle_lock, self.lock:
            if self.cut:
                self.pending = self._settle(self.pending + parts, None)
            elif parts:
                self._bars(_joined(parts))
            if sum(len(b["kind"]) for b in self.bar_runs) > self.max_bars:
                self._trim()
            bars = ({c: np.concatenate([b[c] for b in self.bar_runs]) for c in SLOT_COLUMNS} if self.bar_runs
                    else {c: np.zeros(0, np.int64) for c in SLOT_COLUMNS})
            return bars, self._supersteps() if self.cut else None

    def _settle(self, pending: list[tuple[tuple[int, ...], dict[str, np.ndarray]]],
                horizon: int | None) -> list[tuple[tuple[int, ...], dict[str, np.ndarray]]]:
        """Cut the runs of ``pending`` that start before the last cut at or before ``horizon`` (``None``:
        all); returns the runs left to settle later: ``pending`` itself if none could settle, else the rest
        as one part, first in the trace's order."""
        if not pending:
            return []
        runs = _joined(pending)
        ends = retime.cut_ends(runs)
        known = retime.ascending_distinct(np.concatenate((self.ahead, ends[(ends > self.boundary) & (ends < self.hi)])))
        if horizon is None:
            cuts = np.concatenate(([self.boundary], known, [self.hi]))
            now = np.ones(len(runs["kind"]), bool)
        else:
            # every cut below the horizon is known (a run still to come starts at or past it)
            before = known[known <= min(horizon, self.hi - 1)]
            if not len(before):
                return pending
            cuts = np.concatenate(([self.boundary], before))
            now = runs["start_cycle"] < cuts[-1]
        if horizon is not None and not now.any():
            return pending
        steps = retime.steps_between(_taken(runs, now), cuts, self.ipus)
        self._keep(steps)
        self._bars(_taken(runs, now))
        rest = _taken(runs, ~now)
        self.boundary = int(cuts[-1])
        self.ahead = known[known > self.boundary]
        self.settled = self.settled or horizon is not None
        _trimmed()
        return [((-1,), rest)] if len(rest["kind"]) else []


    def _keep(self, s: retime.Supersteps) -> None:
        """Add ``s``'s supersteps to the distinct ones kept, each as a row: length, gap, work per IPU,
        then its cells (IPU, stage, pass, cycles), padded with -1; in the order they first ran."""
        count = len(s.cycles)
        cells = np.bincount(s.cell_step, minlength=count)
        width = 2 + self.ipus + 4 * int(cells.max(initial=0))
        rows = np.full((count, width), -1.0)
        rows[:, 0], rows[:, 1], rows[:, 2: 2 + self.ipus] = s.cycles, s.gap, s.fixed
        at = np.arange(len(s.cell_step)) - np.repeat(np.cumsum(cells) - cells, cells)
        for k, column in enumerate((s.cell_ipu, s.cell_stage, s.cell_pass, s.cell_cycles)):
            rows[s.cell_step, 2 + self.ipus + 4 * at + k] = column
        weight = np.ones(count, np.int64)
        if self.rows is not None:
            width = max(width, self.rows.shape[1])
            rows = np.concatenate((_padded(self.rows, width), _padded(rows, width)))
            weight = np.concatenate((self.weight, weight))
        first, which = _distinct_rows(rows)
        order = np.argsort(first, kind="stable")  # as they first ran (the ones kept before come first)
        self.rows = rows[first[order]]
        self.weight = np.bincount(which, weight, len(first)).astype(np.int64)[order]

    def _supersteps(self) -> retime.Supersteps:
        rows, n = self.rows, self.ipus
        if rows is None:
            return retime.steps_between({c: np.zeros(0, np.int64) for c in _STEP_COLUMNS}, np.array([self.lo]), n)
        cells = rows[:, 2 + n:].reshape(len(rows), -1, 4)
        there = cells[:, :, 0] >= 0
        step = np.repeat(np.arange(len(rows), dtype=np.int64), there.sum(axis=1))
        ipu, stage, pass_, cycles = (cells[:, :, k][there] for k in range(4))
        return retime.Supersteps(rows[:, 0].copy(), rows[:, 2: 2 + n].copy(), rows[:, 1].copy(), step,
                                 ipu.astype(np.int64), stage.astype(np.int64), pass_.astype(np.int64), cycles,
                                 self.weight.astype(np.float64))

    def _bars(self, runs: dict[str, np.ndarray]) -> None:
        """Merge the counted runs among ``runs`` by bar (first start, last end) and keep the first iterations'."""
        counted = (runs["stage"] >= 0) & (runs["micro_batch"] >= 0) & (runs["kind"] != SLOT["idle"])
        counted &= self._iteration(runs) <= self.last_iteration
        runs = _taken(runs, np.flatnonzero(counted))
        if len(runs["kind"]):
            self.bar_runs.append(_merged(runs))
        if sum(len(b["kind"]) for b in self.bar_runs) > 2 * self.max_bars:
            self._trim()

    def _trim(self) -> None:
        """Keep the bars of the first iterations whose bars, as known so far, fit in ``max_bars``: whole
        iterations, from the first (a bar of a later iteration is dropped from now on)."""
        if not self.bar_runs:
            return
        joined = _merged({c: np.concatenate([b[c] for b in self.bar_runs]) for c in SLOT_COLUMNS})
        g = self._iteration(joined)
        its, counts = np.unique(g, return_counts=True)
        fit = max(int(np.searchsorted(np.cumsum(counts), self.max_bars, side="right")), 1)
        self.last_iteration = min(self.last_iteration, int(its[fit - 1]))
        self.bar_runs = [_taken(joined, np.flatnonzero(g <= self.last_iteration))]

    def _iteration(self, runs: dict[str, np.ndarray]) -> np.ndarray:
        return runs["run"].astype(np.int64) * self.per_run + runs["iteration"]


def _merged(runs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Counted runs merged by bar (``_BAR_KEY``): one run per bar, its first start and last end."""
    _, first, which = np.unique(_packed([runs[c] for c in _BAR_KEY]), return_index=True, return_inverse=True)
    which = which.reshape(-1)
    start = np.full(len(first), np.iinfo(np.int64).max)
    end = np.full(len(first), np.iinfo(np.int64).min)
    np.minimum.at(start, which, runs["start_cycle"])
    np.maximum.at(end, which, runs["end_cycle"])
    merged = _taken(runs, first)
    merged.update(start_cycle=start, end_cycle=end)
    return merged


def _packed(columns: list[np.ndarray]) -> np.ndarray:
    """One int64 per row ordering the rows as ``columns`` do, the first most significant: each column
    less its least (or 0, if that is less), in mixed radix. Where the spans' product passes int64, the
    rows' ranks in that order instead (``np.unique`` over the stacked columns, several times slower).
    The same order, so ``np.unique`` of the packed keys finds the same groups, first rows and order as
    over the columns."""
    lows = [int(c.min(initial=0)) for c in columns]
    spans = [int(c.max(initial=0)) - low + 1 for c, low in zip(columns, lows)]
    if int(np.prod(spans, dtype=object)) >= 2**63:
        return np.unique(np.stack([c.astype(np.int64) for c in columns]), axis=1, return_inverse=True)[1].reshape(-1)
    key = np.zeros(len(columns[0]), np.int64)
    for column, low, span in zip(columns, lows, spans):
        key *= span
        key += column
        key -= low
    return key


def _distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a float64 array: (each one's first row, each row's distinct one), as
    ``np.unique(rows, axis=0, return_index=True, return_inverse=True)`` numbers them.

    ``np.unique`` over rows sorts them column by column; a 64-bit hash of each row's bytes, sorted
    once, finds the same groups several times faster. Equal hashes are then checked to be equal rows
    (and a collision, which would merge two supersteps, falls back to ``np.unique``), so the answer is
    always exact. ``-0.0`` is made ``0.0`` first: equal as floats, they differ in their bytes.
    """
    rows = np.ascontiguousarray(rows + 0.0)
    words = rows.view(np.uint64)
    h = np.full(len(rows), 0x9E3779B97F4A7C15, np.uint64)
    for k in range(rows.shape[1]):  # one mixing round per column (FNV-style, wrapping in uint64)
        h ^= words[:, k]
        h *= np.uint64(0x100000001B3)
        h ^= h >> np.uint64(29)
    _, index, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not np.array_equal(rows, rows[index[inverse]]):
        _, index, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    return index, inverse


def _padded(rows: np.ndarray, width: int) -> np.ndarray:
    if rows.shape[1] == width:
        return rows
    out = np.full((len(rows), width), -1.0)
    out[:, : rows.shape[1]] = rows
    return out


def _trimmed() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing).

    The runs held between settles are small arrays interleaved on the heap with the batches' large
    temporaries, which glibc serves from the heap too once it has raised its mmap threshold: freed,
    those pages stay resident, and over a billion rows that was 280 MB of the fold's peak.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
