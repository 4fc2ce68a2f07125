"""The trace reduced in one streaming pass over its record batches, with memory bounded by a batch.

A trace may hold tens of millions of rows: decoded whole it would be 44 bytes a row (2.2 GB at 50M
rows), and concatenating its row groups into single arrays costs as much again. So no report
holds it: ``summarise`` reads the batches (a row group, about 1 Mi rows, each) one after another
and folds each into small dense arrays (``tables.Aggregates``) with ``np.bincount`` /
``np.add.at`` on integer keys, and into runs of rows from which ``gantt_bars`` merges the stages'
Gantt bars. The per-IPU rows of the execution trace's index are a second pass, made only when a
figure asks for it (``trace.rows.timeline_arrays``).

``prefetched`` decodes the next batch in a thread while the current one is folded: pyarrow and
NumPy both release the GIL, so on two cores the fold costs little beyond the decoding itself.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from popvision_py.analysis.common.tables import PASSES, PHASE, PHASES, TRACE_COLUMNS, codes
from popvision_py.analysis.trace.cube import Cube
from popvision_py.errors import ValueRangeError

if TYPE_CHECKING:  # pandas only for executions(): `export-trace` reads the bounds here without it
    import pandas as pd

    from popvision_py.analysis.common.tables import TraceArrays

# The columns each pass reads (the summary reads every column the reports use).
SUMMARY_COLUMNS: tuple[str, ...] = TRACE_COLUMNS
BATCH_ROWS = 1 << 20  # rows per decoded batch: about a row group of the writer's

N_PASS, N_PHASE = len(PASSES) + 1, len(PHASES) + 1  # the last code of each: a word the schema does not know


def prefetched(batches: Iterable[pa.RecordBatch], depth: int = 2) -> Iterator[pa.RecordBatch]:
    """``batches``, each decoded in a background thread while the caller works on the one before.

    At most ``depth`` batches wait decoded, so memory stays bounded. An error in the reader is
    raised here, in the caller's thread.
    """
    slots: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def produce() -> None:
        try:
            for batch in batches:
                if stop.is_set():
                    return
                slots.put(batch)
            slots.put(done)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            slots.put(exc)

    worker = threading.Thread(target=produce, name="popvision-trace-reader", daemon=True)
    worker.start()
    try:
        while True:
            item = slots.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while worker.is_alive():  # unblock a producer waiting on a full queue
            try:
                slots.get_nowait()
            except queue.Empty:
                worker.join(0.01)


def _codes(column: pa.Array | pa.ChunkedArray, vocabulary: tuple[str, ...]) -> np.ndarray:
    """Fixed codes of a category column; the dictionary's own indexes when it is in schema order (no copy)."""
    chunk = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(chunk.type):
        words = chunk.dictionary.to_pylist()
        if words == list(vocabulary[: len(words)]):
            return chunk.indices.to_numpy(zero_copy_only=False)
    return codes(chunk, vocabulary)


def _numbers(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column.to_numpy(zero_copy_only=False)


def arrays(batch: pa.RecordBatch | pa.Table | dict[str, np.ndarray], columns: Iterable[str]) -> dict[str, np.ndarray]:
    """The batch's ``columns`` as NumPy arrays; ``pass`` and ``phase`` as codes into PASSES / PHASES.

    A dict of arrays (``TraceArrays.columns()``, codes already) is taken as it is.
    """
    if isinstance(batch, dict):
        return {name: batch[name] for name in columns}
    out = {}
    for name in columns:
        column = batch.column(name)
        if name in ("pass", "phase"):
            out[name] = _codes(column, PASSES if name == "pass" else PHASES)
        else:
            out[name] = _numbers(column)
    return out


def _grown(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``array`` padded with zeros to at least ``shape`` (each axis at least doubled when it grows)."""
    if all(n <= m for n, m in zip(shape, array.shape)):
        return array
    new = tuple(m if n <= m else max(n, 2 * m) for n, m in zip(shape, array.shape))
    out = np.zeros(new, array.dtype)
    out[tuple(slice(0, m) for m in array.shape)] = array
    return out


def stated_extent(profile: Any) -> tuple[int, int] | None:
    """The trace's (first start, last end) cycle from its footer's statistics, where the footer was verified at open
    (the summary's pass takes them from there then, so they are its ``timeline.extent``); None where it was not, or
    they are missing: the pass is the way."""
    if "trace" not in profile.tables or not profile.footer_verified("trace"):
        return None
    bounds = column_bounds(profile.metadata("trace"), ("start_cycle", "end_cycle"))
    return None if bounds is None else (bounds["start_cycle"][0], bounds["end_cycle"][1])


def column_bounds(metadata: pq.FileMetaData | None, columns: Iterable[str]) -> dict[str, tuple[int, int]] | None:
    """Each integer column's (min, max) over the whole table from the row groups' statistics in the
    footer, without decoding anything; ``None`` if any row group lacks them (another writer)."""
    if metadata is None or metadata.num_row_groups == 0:
        return None
    where = {metadata.schema.column(i).name: i for i in range(metadata.num_columns)}
    bounds: dict[str, tuple[int, int]] = {}
    for name in columns:
        if name not in where:
            return None
        lo, hi = None, None
        for g in range(metadata.num_row_groups):
            column = metadata.row_group(g).column(where[name])
            stats = column.statistics
            if column.num_values == 0:
                continue
            if (stats is None or not stats.has_min_max
                    or not isinstance(stats.min, int) or not isinstance(stats.max, int)):
                return None
            lo = stats.min if lo is None else min(lo, stats.min)
            hi = stats.max if hi is None else max(hi, stats.max)
        if lo is None:
            return None
        bounds[name] = (lo, hi)
    return bounds


# The columns whose whole-table bounds the summary takes from the footer when it has them.
BOUND_COLUMNS = ("run", "iteration", "micro_batch", "ipu", "stage", "step", "start_cycle", "end_cycle")
SUM_LIMIT = float(2**62)  # a sum of int64 counts at or beyond this may have wrapped
SEEN_LIMIT = 1 << 26  # cells of the whole run's (run, iteration, stage, micro-batch) set held at once (64 MiB)


_BAR_COLUMNS = ("ipu", "stage", "pass", "run", "iteration", "micro_batch")  # what tells one Gantt bar from another
# What ``_Slots`` keeps per run of rows (its bar's columns, first start, last end and cycles), and the
# kinds of work a run can be.
SLOT_COLUMNS = ("ipu", "stage", "pass", "run", "iteration", "micro_batch", "kind", "start_cycle", "end_cycle", "cycles")
SLOT_KINDS = ("micro_batch", "fixed", "idle", "superstep_sync")
SLOT = {name: i for i, name in enumerate(SLOT_KINDS)}


@dataclass(frozen=True)
class Aggregates:
    """Everything the reports need from the trace's rows, folded batch by batch (``summarise``).

    ``cube``: cycles per ``[ipu, stage + 1, pass, phase]`` (``Cube``; stage -1 at index 0; pass/phase code
    ``len(...)`` for unknown words); ``executions[ipu, step]``; ``micro_batches[stage]``: distinct (run,
    iteration, micro_batch >= 0) per stage; ``iterations``: distinct (run, iteration);
    ``rows``: trace rows; ``iterations_per_run``, ``micro_batch_slots``, ``run_slots``: the largest
    iteration, micro-batch and run + 1 (sizes for dense keys). ``slots``: the trace cut into runs of
    rows of one kind of work (``SLOT_COLUMNS``), from which the stages report re-times
    the run's supersteps (``retime.supersteps``). ``supersteps``: those supersteps already cut, when a
    long trace's were settled as it was folded (``trace.steps``). ``first_bars``: ``slots`` holds only
    the runs of the Gantt bars of the first iterations (a long trace's, or one not bulk-synchronous).
    """

    cube: Cube
    executions: np.ndarray
    micro_batches: np.ndarray
    iterations: int
    start_cycle: int
    end_cycle: int
    rows: int = 0
    iterations_per_run: int = 0
    micro_batch_slots: int = 0
    run_slots: int = 0
    slots: dict[str, np.ndarray] | None = None
    ipu_rows: np.ndarray | None = None
    supersteps: Any = None  # retime.Supersteps (retime imports this module)
    first_bars: bool = False

    def __len__(self) -> int:
        return self.rows


def _neighbours(column: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row but the first, and the row before it."""
    return column[1:], column[:-1]


def _kinds(phase: np.ndarray, stage: np.ndarray, micro_batch: np.ndarray, pass_: np.ndarray) -> np.ndarray:
    """Each row's kind of work (``SLOT``, int8): ``idle``, ``superstep_sync`` (a sync of no stage),
    ``micro_batch`` (a stage's forward or backward of one micro-batch) or ``fixed``."""
    idle = phase == PHASE["idle"]
    sync = (phase == PHASE["sync"]) & (stage < 0)
    mb = ((stage >= 0) & (micro_batch >= 0) & ~idle
          & ((pass_ == PASSES.index("forward")) | (pass_ == PASSES.index("backward"))))
    # the three are exclusive (idle and sync are phases, sync has no stage, micro_batch one and not idle)
    kind = np.full(len(phase), SLOT["fixed"], np.int8)
    kind[idle], kind[sync], kind[mb] = SLOT["idle"], SLOT["superstep_sync"], SLOT["micro_batch"]
    return kind


class _Slots:
    """The running state of the summary's slots: each batch cut into runs of rows of one piece of work.

    A run is rows that follow each other on one IPU with the same stage, pass, run, iteration,
    micro-batch and kind: ``micro_batch`` (a stage's forward or backward of one micro-batch, the work
    balancing moves), ``idle``, ``superstep_sync`` (a sync of no stage: the barrier closing a
    superstep) or ``fixed`` (anything else: the update, weight loads, host calls). A run is kept as
    its columns, first start, last end and cycles; the engine writes a segment's rows back to back,
    so a trace holds about as many runs as segment executions, a few per IPU and superstep (772,595
    runs for 50M rows). The Gantt bars are these runs merged bar by bar (``gantt_bars``): a run's
    rows all count towards one bar or none, so the bars need no pass of their own.
    """

    def __init__(self, constant: Iterable[str] = ()) -> None:
        self.parts: list[tuple[tuple[int, ...], dict[str, np.ndarray]]] = []  # (batch's place in the trace, runs)
        self.constant = frozenset(constant)  # bar columns of one value in the whole trace: never cut at

    def add(self, t: dict[str, np.ndarray], durations: np.ndarray,
            order: tuple[int, ...] = ()) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Fold a batch in (``durations``: its rows' end - start, which ``_Fold`` has made already);
        returns the first row of each of its runs (``_Fold`` marks its set there) and the runs.
        ``order``: the batch's place in the trace (row group, batch), by which batches folded apart
        are put back in order; the batches of one fold come in order."""
        n = len(t["ipu"])
        if n == 0:
            return np.zeros(0, np.intp), {}
        phase, stage = t["phase"], t["stage"]
        # Within rows of one stage, micro-batch and pass a row's kind changes only where it turns idle or
        # not, or a sync of no stage (the barrier closing a superstep) or not: any other row is
        # micro_batch or fixed as those columns say. So the runs are cut there, and the kind is worked out
        # for their first rows only.
        idle = phase == PHASE["idle"]
        barrier = phase == PHASE["sync"]
        barrier &= stage < 0
        change = np.not_equal(*_neighbours(idle))
        change |= np.not_equal(*_neighbours(barrier))
        for name in _BAR_COLUMNS:
            if name not in self.constant:
                change |= np.not_equal(*_neighbours(t[name]))
        cut = np.flatnonzero(np.r_[True, change])
        part = {name: t[name][cut] for name in _BAR_COLUMNS}
        part.update(kind=_kinds(phase[cut], part["stage"], part["micro_batch"], part["pass"]),
                    start_cycle=np.minimum.reduceat(t["start_cycle"], cut),
                    end_cycle=np.maximum.reduceat(t["end_cycle"], cut),
                    cycles=np.add.reduceat(durations, cut))
        self.parts.append((order, part))
        return cut, part

    def result(self) -> dict[str, np.ndarray]:
        if not self.parts:
            return {c: np.zeros(0, np.int64) for c in SLOT_COLUMNS}
        parts = [p for _, p in sorted(self.parts, key=lambda item: item[0])]  # stable: one fold's own order kept
        out = {c: np.concatenate([p[c] for p in parts]) for c in SLOT_COLUMNS}
        self.parts = []
        return out


def _key(columns: list[tuple[np.ndarray, int]], offset: int, size: int, out: np.ndarray | None = None) -> np.ndarray:
    """One integer per row packing several small columns: ``((c0 * n1 + c1) * n2 + c2)... + offset``
    for ``columns`` = [(c0, _), (c1, n1), (c2, n2)...], into ``range(size)``.

    Built in place in one array (a multiply, then an add and a multiply per column), as int32 when
    ``size`` fits: half the memory traffic of int64 temporaries, and ``np.add.at`` takes int32
    indexes without a cast. ``out``: an int32 scratch array at least as long, reused from batch to
    batch (a fresh 4 MiB array costs its page faults on every batch).
    """
    (c0, _), (c1, n1) = columns[0], columns[1]
    # the factor in the key's own type: the product is computed there, never in the column's (an int16
    # ipu times a program of 97,096 steps overflowed int16)
    wide = np.int32 if size < 2**31 else np.int64
    if wide is np.int32 and out is not None and len(out) >= len(c0):
        key = np.multiply(c0, wide(n1), out=out[: len(c0)], casting="unsafe")
    else:
        key = np.multiply(c0, wide(n1), dtype=wide)
    key += c1
    for column, n in columns[2:]:
        key *= n
        key += column
    if offset:
        key += offset
    return key


def _per_row(head: np.ndarray, lengths: np.ndarray, column: np.ndarray) -> np.ndarray:
    """``head`` (one value per run of rows, ``lengths`` rows each) repeated over its rows, plus ``column``."""
    rows = np.repeat(head, lengths)
    rows += column
    return rows


class _Fold:
    """The running sums of ``summarise``: dense arrays that grow as batches show larger ids.

    ``bounds`` (``column_bounds`` of ``BOUND_COLUMNS``) gives the run's first start and last end and
    the largest ids up front, from the footer: each batch is then not reduced for them, and the
    (run, iteration, stage, micro-batch) set is one array for the whole run, marked row by row.
    Each aggregate is one packed integer key per row (``_key``) and one ``np.add.at``.
    """

    def __init__(self, bounds: dict[str, tuple[int, int]] | None = None, seen: np.ndarray | None = None) -> None:
        # cycles per [pair, pass, phase], a pair (ipu << 32 | stage + 1) a row in the order first seen: a dense
        # [ipu, stage + 1] is N x N for N ranks each its own stage (``Cube``)
        self.pairs = np.zeros(0, np.int64)
        self.cells = np.zeros((0, N_PASS, N_PHASE), np.int64)
        self.by_code = np.zeros(0, np.int64)  # the pairs' rows in code order
        self.execs = np.zeros((1, 1), np.int64)  # [ipu, step + 1] rows
        self.seen = np.zeros((1, 1, 1, 1), bool)  # [run, iteration, stage + 1, micro_batch + 1] has rows
        self.n_ipu = self.n_stage = self.width = self.n_run = self.n_iter = self.n_mb = 0
        self.rows = 0
        self.start = np.iinfo(np.int64).max
        self.end = np.iinfo(np.int64).min
        self.bounded = bounds is not None
        self.whole_seen = False  # the seen set sized for the whole run from the bounds
        self.scratch = np.zeros(0, np.int32)  # the keys of a batch, one after the other
        self.durations = np.zeros(0, np.int64)
        self.cycles_sum = 0.0
        self.slots = _Slots()
        if bounds is not None:
            # a column of one value in the whole trace (the footer says) never cuts a run
            self.slots.constant = frozenset(c for c in _BAR_COLUMNS if c in bounds and bounds[c][0] == bounds[c][1])
            self.start, self.end = bounds["start_cycle"][0], bounds["end_cycle"][1]
            self.n_ipu, self.n_stage = bounds["ipu"][1] + 1, bounds["stage"][1] + 2
            self.width = bounds["step"][1] + 2
            self.execs = np.zeros((self.n_ipu, self.width), np.int64)
            known = all(c in bounds for c in ("run", "iteration", "micro_batch"))
            if known and min(bounds["run"][0], bounds["iteration"][0], bounds["micro_batch"][0] + 1,
                             bounds["stage"][0] + 1) >= 0:
                n_run, n_iter, n_mb = bounds["run"][1] + 1, bounds["iteration"][1] + 1, bounds["micro_batch"][1] + 2
                if n_run * n_iter * self.n_stage * n_mb <= SEEN_LIMIT:
                    self.n_run, self.n_iter, self.n_mb = n_run, n_iter, n_mb
                    # folds of one trace in parallel may share it: they only ever set cells to True
                    shape = (n_run, n_iter, self.n_stage, n_mb)
                    self.seen = seen if seen is not None and seen.shape == shape else np.zeros(shape, bool)
                    self.whole_seen = True

    def add(self, t: dict[str, np.ndarray], order: tuple[int, ...] = ()) -> None:
        """Fold a batch's columns in; ``order``: its place in the trace (``_Slots.add``)."""
        n = len(t["ipu"])
        if n == 0:
            return
        self.rows += n
        ipu, stage, step = t["ipu"], t["stage"], t["step"]
        start, end = t["start_cycle"], t["end_cycle"]
        if self.bounded:
            n_stage = self.n_stage
        else:
            n_ipu, n_stage, width = int(ipu.max()) + 1, int(stage.max()) + 2, int(step.max()) + 2
            self.n_ipu, self.n_stage = max(self.n_ipu, n_ipu), max(self.n_stage, n_stage)
            self.width = max(self.width, width)
            self.start, self.end = min(self.start, int(start.min())), max(self.end, int(end.max()))
        self.execs = _grown(self.execs, (self.n_ipu, self.width))

        if len(self.scratch) < n:
            self.scratch, self.durations = np.empty(n, np.int32), np.empty(n, np.int64)
        scratch, durations = self.scratch, np.subtract(end, start, out=self.durations[:n])
        # rows where a run of one (run, iteration, stage, micro-batch...) starts
        cut, runs = self.slots.add(t, durations, order)
        # ipu, stage and pass are one value in each run of rows: each key's part of them is made per run and
        # repeated over its rows, and only the column that changes within runs is added row by row
        lengths = np.diff(cut, append=n)
        # cycles per (ipu, stage, pass, phase): np.add.at on int64 is exact and faster than a weighted bincount
        slot = self._rows_of((runs["ipu"].astype(np.int64) << 32) | (runs["stage"].astype(np.int64) + 1))
        wide = np.int32 if self.cells.size < 2**31 else np.int64
        head = (slot.astype(wide) * wide(N_PASS) + runs["pass"]) * wide(N_PHASE)
        np.add.at(self.cells.reshape(-1), _per_row(head, lengths, t["phase"]), durations)
        # durations are >= 0 (the reader checks end >= start): if their float sum stays below
        # SUM_LIMIT no int64 cell of the cube can have wrapped. The runs' cycles hold the same sum in a
        # few int64s, exact unless a run's could pass 2**63: at most the batch's rows times its longest span
        sums = runs["cycles"] if n * max(self.end - self.start, 0) < 2**63 else durations
        self.cycles_sum += float(np.sum(sums, dtype=np.float64))
        # executions per (ipu, step): a count, which np.bincount makes in about 2/3 of np.add.at's time
        wide = np.int32 if self.execs.size < 2**31 else np.int64
        head = runs["ipu"].astype(wide) * wide(self.execs.shape[1]) + wide(1)
        counts = self.execs.reshape(-1)
        counts += np.bincount(_per_row(head, lengths, step), minlength=counts.size)

        # which (run, iteration, stage, micro-batch) have rows: each run of rows starts with its values,
        # so the first rows of the runs hold every value there is
        run, it, mb, stage = t["run"][cut], t["iteration"][cut], t["micro_batch"][cut], stage[cut]
        if self.whole_seen:
            s = self.seen.shape
            key = _key([(run, 0), (it, s[1]), (stage, s[2]), (mb, s[3])], s[3] + 1, self.seen.size, scratch)
            self.seen.reshape(-1)[key] = True
            return
        # else a set over the batch's own box
        r0, r1, i0, i1 = int(run.min()), int(run.max()), int(it.min()), int(it.max())
        m1 = int(mb.max()) + 2
        self.n_run, self.n_iter, self.n_mb = max(self.n_run, r1 + 1), max(self.n_iter, i1 + 1), max(self.n_mb, m1)
        self.seen = _grown(self.seen, (self.n_run, self.n_iter, self.n_stage, self.n_mb))
        ni = i1 - i0 + 1
        size = (r1 - r0 + 1) * ni * n_stage * m1
        key = _key([(run, 0), (it, ni), (stage, n_stage), (mb, m1)], -((r0 * ni + i0) * n_stage - 1) * m1 + 1,
                   (r1 + 1) * ni * n_stage * m1 + size, scratch)  # before the offset, the keys run up to r1's
        box = np.zeros(size, bool)
        box[key] = True
        self.seen[r0: r1 + 1, i0: i1 + 1, :n_stage, :m1] |= box.reshape(r1 - r0 + 1, ni, n_stage, m1)

    def _rows_of(self, codes: np.ndarray) -> np.ndarray:
        """Each (ipu, stage) pair code's row of ``cells``, a row added for each pair not seen before."""
        known = self.pairs[self.by_code]
        seen = np.unique(codes)  # a batch's runs' pairs: a few
        at = np.minimum(np.searchsorted(known, seen), max(len(known) - 1, 0))
        new = seen[known[at] != seen] if len(known) else seen
        if len(new):
            self.pairs = np.concatenate([self.pairs, new])
            self.cells = np.concatenate([self.cells, np.zeros((len(new), N_PASS, N_PHASE), np.int64)])
            self.by_code = np.argsort(self.pairs, kind="stable")
            known = self.pairs[self.by_code]
        return self.by_code[np.searchsorted(known, codes)]

    def merge(self, other: _Fold) -> None:
        """Fold ``other`` (another part of the same trace, with the same bounds) into this one:
        sums, counts, extremes and set unions, so the result is that of one fold over both parts."""
        if other.rows == 0:
            return
        self.n_ipu, self.n_stage, self.width = (max(self.n_ipu, other.n_ipu), max(self.n_stage, other.n_stage),
                                                max(self.width, other.width))
        self.n_run, self.n_iter, self.n_mb = (max(self.n_run, other.n_run), max(self.n_iter, other.n_iter),
                                              max(self.n_mb, other.n_mb))
        self.start, self.end = min(self.start, other.start), max(self.end, other.end)
        self.rows += other.rows
        self.cycles_sum += other.cycles_sum
        mine, theirs = self.execs, other.execs
        mine = _grown(mine, tuple(max(a, b) for a, b in zip(mine.shape, theirs.shape)))
        mine[tuple(slice(0, m) for m in theirs.shape)] += theirs
        self.execs = mine
        if len(other.pairs):
            rows = self._rows_of(other.pairs)  # first: it may grow ``cells``
            self.cells[rows] += other.cells  # a pair once
        if other.seen is not self.seen:
            shape = tuple(max(a, b) for a, b in zip(self.seen.shape, other.seen.shape))
            self.seen = _grown(self.seen, shape)
            self.seen[tuple(slice(0, m) for m in other.seen.shape)] |= other.seen
        self.slots.parts += other.slots.parts

    def result(self) -> Aggregates:
        if self.cycles_sum >= SUM_LIMIT:
            raise ValueRangeError(
                f"The trace's durations sum to {self.cycles_sum:.3g} cycles, beyond what 64-bit integers hold."
            )
        if self.rows == 0:
            return Aggregates(Cube.from_dense(np.zeros((0, 1, N_PASS, N_PHASE), np.int64)), np.zeros((0, 0), np.int64),
                              np.zeros(0, np.int64), 0, 0, 0, rows=0, iterations_per_run=0, micro_batch_slots=0,
                              run_slots=0, slots=self.slots.result(), ipu_rows=np.zeros(0, np.int64))
        order = self.by_code[(self.pairs[self.by_code] >> 32) < self.n_ipu]
        ipu, stage = self.pairs[order] >> 32, self.pairs[order] & 0xFFFFFFFF
        inside = stage < self.n_stage
        cube = Cube((self.n_ipu, self.n_stage, N_PASS, N_PHASE), ipu[inside], stage[inside], self.cells[order][inside])
        execs = self.execs[: self.n_ipu, 1: self.width]
        seen = self.seen[: self.n_run, : self.n_iter, : self.n_stage, : self.n_mb]
        iterations = int(seen.any(axis=(2, 3)).sum())
        micro_batches = seen[:, :, 1:, 1:].sum(axis=(0, 1, 3)).astype(np.int64)  # per stage >= 0, micro-batch >= 0
        return Aggregates(cube, np.ascontiguousarray(execs), micro_batches, iterations,
                          self.start, self.end, rows=self.rows, iterations_per_run=self.n_iter,
                          micro_batch_slots=self.n_mb - 1, run_slots=self.n_run, slots=self.slots.result(),
                          ipu_rows=self.execs[: self.n_ipu, : self.width].sum(axis=1))


def summarise(batches: Iterable[pa.RecordBatch | pa.Table],
              bounds: dict[str, tuple[int, int]] | None = None) -> Aggregates:
    """The trace's aggregates (``tables.Aggregates``) from its batches, one batch in memory at a time.

    Folding batch by batch gives exactly what one pass over the whole trace gives: every figure
    is a sum, a count, a minimum, a maximum or a set union. ``bounds``: see ``_Fold``.
    """
    fold = _Fold(bounds)
    for batch in batches:
        fold.add(arrays(batch, SUMMARY_COLUMNS))
    return fold.result()


def summarise_arrays(columns: dict[str, np.ndarray]) -> Aggregates:
    """``summarise`` of a trace already in memory as arrays (``TraceArrays.columns()``)."""
    fold = _Fold()
    fold.add(columns)
    return fold.result()




def gantt_bars(agg: Aggregates) -> dict[str, np.ndarray]:
    """One bar per (ipu, stage, pass, iteration, micro_batch): its first start and last end, as columns.

    A bar is the rows of stage >= 0 and micro_batch >= 0 that are not idle; the summary's runs of
    rows (``Aggregates.slots``) never mix a counted row with another, nor two bars (a run has one
    stage, micro-batch, pass, run and iteration, and idle rows are runs of their own), so the bars
    are the counted runs merged by bar. ``iteration`` is the global one: run x iterations per run + iteration.
    """
    names = ("ipu", "stage", "pass", "iteration", "micro_batch", "start_cycle", "end_cycle")
    slots = agg.slots if agg.slots is not None else {}
    if not len(slots.get("ipu", ())):
        empty = np.zeros(0, np.int64)
        return {c: empty for c in names}
    counted = (slots["stage"] >= 0) & (slots["micro_batch"] >= 0) & (slots["kind"] != SLOT["idle"])
    runs = {c: slots[c][counted] for c in (*_BAR_COLUMNS, "start_cycle", "end_cycle")}
    per_run = max(agg.iterations_per_run, 1)
    n_stage = max(agg.cube.shape[1] - 1, 1)
    # a bar as one int64: (ipu, stage, pass) high, the global iteration, the micro-batch low
    mb_bits = max(agg.micro_batch_slots, 1).bit_length()
    g_bits = max(agg.run_slots * per_run, 1).bit_length()
    g = runs["run"].astype(np.int64) * per_run + runs["iteration"]
    head = (runs["ipu"].astype(np.int64) * n_stage + runs["stage"]) * N_PASS + runs["pass"]
    key = (((head << g_bits) | g) << mb_bits) | runs["micro_batch"]
    bars, which = np.unique(key, return_inverse=True)
    first = np.full(len(bars), np.iinfo(np.int64).max)
    last = np.full(len(bars), np.iinfo(np.int64).min)
    np.minimum.at(first, which, runs["start_cycle"])
    np.maximum.at(last, which, runs["end_cycle"])
    mb = bars & ((1 << mb_bits) - 1)
    g = (bars >> mb_bits) & ((1 << g_bits) - 1)
    ipu_stage, pass_ = np.divmod(bars >> (mb_bits + g_bits), N_PASS)
    ipu, stage = np.divmod(ipu_stage, n_stage)
    return {"ipu": ipu, "stage": stage, "pass": pass_, "iteration": g, "micro_batch": mb,
            "start_cycle": first, "end_cycle": last}


def aggregates(trace: TraceArrays | Aggregates) -> Aggregates:
    """The trace's aggregates: given as is, or folded from in-memory arrays (the same code as streaming)."""
    if isinstance(trace, Aggregates):
        return trace
    cached = trace._cache.get("aggregates")
    if cached is None:
        cached = trace._cache["aggregates"] = summarise_arrays(trace.columns())
    return cached


def iterations_traced(trace: TraceArrays | Aggregates, run: dict) -> int:
    """Iterations the trace covers: distinct (run, iteration) pairs, else the manifest's runs x device_iterations."""
    if len(trace):
        return aggregates(trace).iterations
    return int(run.get("runs", 1) or 1) * int(run.get("device_iterations", 1) or 1)


def executions(trace: TraceArrays | Aggregates) -> pd.DataFrame:
    """How many times each program step ran: ``[ipu, step, executions]``, sorted by ipu, step."""
    import pandas as pd

    counts = aggregates(trace).executions
    ipu, step = np.nonzero(counts)
    return pd.DataFrame({"ipu": ipu.astype(np.int64), "step": step.astype(np.int64),
                         "executions": counts[ipu, step].astype(np.int64)})
