"""The trace reduced in one streaming pass over its record batches, with memory bounded by a batch.

A trace may hold tens of millions of rows: decoded whole it would be 44 bytes a row (2.2 GB at 50M
rows), and concatenating its row groups into single arrays costs as much again. So no report
holds it: ``summarise`` reads the batches (a row group, about 1 Mi rows, each) one after another
and folds each into small dense arrays (``tables.Aggregates``) with ``np.bincount`` /
``np.add.at`` on integer keys; ``gantt_bars`` and ``timeline_arrays`` are separate passes made
only when a figure asks for them (the dashboard), reading only their own columns.

``prefetched`` decodes the next batch in a thread while the current one is folded: pyarrow and
NumPy both release the GIL, so on two cores the fold costs little beyond the decoding itself.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from popvision_py.analysis.tables import PASSES, PHASE, PHASES, TRACE_COLUMNS, Aggregates, codes

# The columns each pass reads (the summary reads every column the reports use).
SUMMARY_COLUMNS: tuple[str, ...] = TRACE_COLUMNS
GANTT_COLUMNS: tuple[str, ...] = ("run", "iteration", "micro_batch", "ipu", "stage", "pass", "phase",
                                  "start_cycle", "end_cycle")
TIMELINE_COLUMNS: tuple[str, ...] = ("ipu", "phase", "start_cycle", "end_cycle")

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
        out[name] = _codes(column, PASSES if name == "pass" else PHASES) if name in ("pass", "phase") else _numbers(column)
    return out


def _grown(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``array`` padded with zeros to at least ``shape`` (each axis at least doubled when it grows)."""
    if all(n <= m for n, m in zip(shape, array.shape)):
        return array
    new = tuple(m if n <= m else max(n, 2 * m) for n, m in zip(shape, array.shape))
    out = np.zeros(new, array.dtype)
    out[tuple(slice(0, m) for m in array.shape)] = array
    return out


class _Fold:
    """The running sums of ``summarise``: dense arrays that grow as batches show larger ids."""

    def __init__(self) -> None:
        self.cube = np.zeros((1, 1, N_PASS, N_PHASE), np.int64)  # [ipu, stage + 1, pass, phase] cycles
        self.execs = np.zeros((1, 1), np.int64)  # [ipu, step + 1] rows
        self.seen = np.zeros((1, 1, 1, 1), bool)  # [run, iteration, stage + 1, micro_batch + 1] has rows
        self.n_ipu = self.n_stage = self.width = self.n_run = self.n_iter = self.n_mb = 0
        self.rows = 0
        self.start = np.iinfo(np.int64).max
        self.end = np.iinfo(np.int64).min

    def add(self, t: dict[str, np.ndarray]) -> None:
        n = len(t["ipu"])
        if n == 0:
            return
        self.rows += n
        ipu, stage, step = t["ipu"], t["stage"], t["step"]
        n_ipu, n_stage, width = int(ipu.max()) + 1, int(stage.max()) + 2, int(step.max()) + 2
        self.n_ipu, self.n_stage, self.width = max(self.n_ipu, n_ipu), max(self.n_stage, n_stage), max(self.width, width)
        self.cube = _grown(self.cube, (self.n_ipu, self.n_stage, N_PASS, N_PHASE))
        self.execs = _grown(self.execs, (self.n_ipu, self.width))
        start, end = t["start_cycle"], t["end_cycle"]
        self.start, self.end = min(self.start, int(start.min())), max(self.end, int(end.max()))

        # cycles per (ipu, stage, pass, phase): np.add.at on int64 is exact and faster than a weighted bincount
        i32 = ipu.astype(np.int32)
        s_cube = self.cube.shape
        key = ((i32 * s_cube[1] + (stage + 1)) * N_PASS + t["pass"]) * N_PHASE + t["phase"]
        np.add.at(self.cube.reshape(-1), key, end - start)
        # executions per (ipu, step)
        key = i32 * self.execs.shape[1] + (step + 1)
        self.execs.reshape(-1)[: self.execs.size] += np.bincount(key, minlength=self.execs.size)

        # which (run, iteration, stage, micro-batch) have rows: a bincount over the batch's own box
        run, it, mb = t["run"], t["iteration"], t["micro_batch"]
        r0, r1, i0, i1 = int(run.min()), int(run.max()), int(it.min()), int(it.max())
        m1 = int(mb.max()) + 2
        self.n_run, self.n_iter, self.n_mb = max(self.n_run, r1 + 1), max(self.n_iter, i1 + 1), max(self.n_mb, m1)
        self.seen = _grown(self.seen, (self.n_run, self.n_iter, self.n_stage, self.n_mb))
        ni = i1 - i0 + 1
        if (r1 - r0 + 1) * ni * n_stage * m1 >= 2**31:  # 32-bit keys are faster; wider only when they would overflow
            run = run.astype(np.int64)
        key = (((run - r0) * ni + (it - i0)) * n_stage + (stage + 1)) * m1 + (mb + 1)
        box = np.bincount(key, minlength=(r1 - r0 + 1) * ni * n_stage * m1).reshape(r1 - r0 + 1, ni, n_stage, m1)
        self.seen[r0: r1 + 1, i0: i1 + 1, :n_stage, :m1] |= box > 0

    def result(self) -> Aggregates:
        if self.rows == 0:
            return Aggregates(np.zeros((0, 1, N_PASS, N_PHASE), np.int64), np.zeros((0, 0), np.int64),
                              np.zeros(0, np.int64), 0, 0, 0, rows=0, iterations_per_run=0, micro_batch_slots=0,
                              run_slots=0)
        cube = self.cube[: self.n_ipu, : self.n_stage]
        execs = self.execs[: self.n_ipu, 1: self.width]
        seen = self.seen[: self.n_run, : self.n_iter, : self.n_stage, : self.n_mb]
        iterations = int(seen.any(axis=(2, 3)).sum())
        micro_batches = seen[:, :, 1:, 1:].sum(axis=(0, 1, 3)).astype(np.int64)  # per stage >= 0, micro-batch >= 0
        return Aggregates(np.ascontiguousarray(cube), np.ascontiguousarray(execs), micro_batches, iterations,
                          self.start, self.end, rows=self.rows, iterations_per_run=self.n_iter,
                          micro_batch_slots=self.n_mb - 1, run_slots=self.n_run)


def summarise(batches: Iterable[pa.RecordBatch | pa.Table]) -> Aggregates:
    """The trace's aggregates (``tables.Aggregates``) from its batches, one batch in memory at a time.

    Folding batch by batch gives exactly what one pass over the whole trace gives: every figure
    is a sum, a count, a minimum, a maximum or a set union.
    """
    fold = _Fold()
    for batch in batches:
        fold.add(arrays(batch, SUMMARY_COLUMNS))
    return fold.result()


def summarise_arrays(columns: dict[str, np.ndarray]) -> Aggregates:
    """``summarise`` of a trace already in memory as arrays (``TraceArrays.columns()``)."""
    fold = _Fold()
    fold.add(columns)
    return fold.result()


def gantt_bars(batches: Iterable[pa.RecordBatch | pa.Table], agg: Aggregates) -> dict[str, np.ndarray]:
    """One bar per (ipu, stage, pass, iteration, micro_batch): its first start and last end, as columns.

    Rows of stage >= 0 and micro_batch >= 0 that are not idle. Each batch is first cut into runs
    of consecutive rows with the same bar (a bar's rows follow each other in the trace), reduced
    with ``np.minimum.reduceat``; the few runs of all batches are then merged by bar.
    """
    per_run = max(agg.iterations_per_run, 1)
    n_stage = max(agg.cube.shape[1] - 1, 1)
    # a bar as one int64: (ipu, stage, pass) high, the global iteration, the micro-batch low
    mb_bits = max(agg.micro_batch_slots, 1).bit_length()
    g_bits = max(agg.run_slots * per_run, 1).bit_length()
    keys, starts, ends = [], [], []
    for batch in batches:
        t = arrays(batch, GANTT_COLUMNS)
        keep = (t["stage"] >= 0) & (t["micro_batch"] >= 0) & (t["phase"] != PHASE["idle"])
        if not keep.any():
            continue
        g = t["run"][keep].astype(np.int64) * per_run + t["iteration"][keep]
        head = (t["ipu"][keep].astype(np.int64) * n_stage + t["stage"][keep]) * N_PASS + t["pass"][keep]
        key = (((head << g_bits) | g) << mb_bits) | t["micro_batch"][keep]
        cut = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        keys.append(key[cut])
        starts.append(np.minimum.reduceat(t["start_cycle"][keep], cut))
        ends.append(np.maximum.reduceat(t["end_cycle"][keep], cut))
    if not keys:
        empty = np.zeros(0, np.int64)
        return {c: empty for c in ("ipu", "stage", "pass", "iteration", "micro_batch", "start_cycle", "end_cycle")}
    key, start, end = np.concatenate(keys), np.concatenate(starts), np.concatenate(ends)
    bars, which = np.unique(key, return_inverse=True)
    first = np.full(len(bars), np.iinfo(np.int64).max)
    last = np.full(len(bars), np.iinfo(np.int64).min)
    np.minimum.at(first, which, start)
    np.maximum.at(last, which, end)
    mb = bars & ((1 << mb_bits) - 1)
    g = (bars >> mb_bits) & ((1 << g_bits) - 1)
    ipu_stage, pass_ = np.divmod(bars >> (mb_bits + g_bits), N_PASS)
    ipu, stage = np.divmod(ipu_stage, n_stage)
    return {"ipu": ipu, "stage": stage, "pass": pass_, "iteration": g, "micro_batch": mb,
            "start_cycle": first, "end_cycle": last}


def timeline_arrays(batches: Iterable[pa.RecordBatch | pa.Table]) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each IPU's rows as (start, end, phase code) arrays sorted by start, gathered batch by batch.

    A batch usually holds one IPU's rows in time order (the engine writes IPU by IPU), so it is
    appended as slices; the IPU's arrays are sorted only if they are not in order already.
    """
    parts: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for batch in batches:
        t = arrays(batch, TIMELINE_COLUMNS)
        ipu = t["ipu"]
        if not len(ipu):
            continue
        phase = t["phase"].astype(np.int8)
        lo, hi = int(ipu.min()), int(ipu.max())
        if lo == hi:
            parts.setdefault(lo, []).append((t["start_cycle"], t["end_cycle"], phase))
            continue
        order = np.argsort(ipu, kind="stable")
        bounds = np.searchsorted(ipu[order], np.arange(lo, hi + 2))
        for k, i in enumerate(range(lo, hi + 1)):
            rows = order[bounds[k]: bounds[k + 1]]
            if len(rows):
                parts.setdefault(i, []).append((t["start_cycle"][rows], t["end_cycle"][rows], phase[rows]))
    out = {}
    for i in sorted(parts):
        start, end, phase = (np.concatenate([p[k] for p in parts[i]]) for k in range(3))
        if len(start) > 1 and not np.all(start[1:] >= start[:-1]):
            order = np.argsort(start, kind="stable")
            start, end, phase = start[order], end[order], phase[order]
        out[i] = (start, end, phase)
    return out
