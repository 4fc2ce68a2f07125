"""The trace's rows gathered per IPU in one streaming pass: what the execution trace's index is built from.

``timeline_arrays`` reads five columns (``TIMELINE_COLUMNS``) batch by batch into each IPU's
(start, end, phase, step) arrays sorted by start. It is a pass of its own, made only when a figure
asks for it (the dashboard's execution trace, the operations' timeline); the report's summary is the
other pass (``trace.scan.summarise``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from popvision_py.analysis.trace.scan import arrays

TIMELINE_COLUMNS: tuple[str, ...] = ("ipu", "phase", "step", "start_cycle", "end_cycle")


class _Rows:
    """The running state of ``timeline_arrays``: each IPU's (start, end, phase, step) rows, batch by batch.

    The engine writes IPU by IPU (an iteration's rows of IPU 0, then IPU 1...), so a batch is a few
    long runs of one IPU each: it is cut where the IPU changes. A batch that interleaves IPUs row
    by row is grouped with one stable sort instead. With ``ipu_rows`` (each IPU's row count, from
    the summary: ``Aggregates.ipu_rows``) each run is copied straight into its IPU's arrays, made
    once at their full length: no batch is held and nothing is joined at the end. Fresh memory is
    what a large trace's index costs most (the kernel zeroes every page a process first touches),
    so this touches each row's 21 bytes once. Without counts, or past them, the runs are kept as
    slices of the batches and joined at the end.
    """

    def __init__(self, ipu_rows: dict[int, int] | None = None) -> None:
        self.reserved = dict(ipu_rows or {})
        self.filled: dict[int, tuple[list[np.ndarray], int]] = {}  # ipu -> (its four arrays, rows in them)
        self.parts: dict[int, list[tuple[np.ndarray, ...]]] = {}  # ipu -> slices of batches, past its arrays
        self.ordered: dict[int, bool] = {}  # whether the IPU's rows came in order of start so far
        self.last: dict[int, int] = {}  # the IPU's last start so far

    def add(self, t: dict[str, np.ndarray]) -> None:
        ipu = t["ipu"]
        n = len(ipu)
        if not n:
            return
        start, end, phase = t["start_cycle"], t["end_cycle"], t["phase"].astype(np.int8, copy=False)
        step = t["step"].astype(np.int32, copy=False)
        cut = np.flatnonzero(ipu[1:] != ipu[:-1]) + 1
        if len(cut) <= n // 64:  # long runs of one IPU: slices
            bounds = [0, *cut.tolist(), n]
            for a, b in zip(bounds[:-1], bounds[1:]):
                self._put(int(ipu[a]), (start[a:b], end[a:b], phase[a:b], step[a:b]))
            return
        order = np.argsort(ipu, kind="stable")  # radix sort: IPU ids are 16-bit
        lo, hi = int(ipu[order[0]]), int(ipu[order[-1]])
        bounds = np.searchsorted(ipu[order], np.arange(lo, hi + 2))
        for k, i in enumerate(range(lo, hi + 1)):
            rows = order[bounds[k]: bounds[k + 1]]
            if len(rows):
                self._put(i, (start[rows], end[rows], phase[rows], step[rows]))

    def _put(self, ipu: int, run: tuple[np.ndarray, ...]) -> None:
        start = run[0]
        n = len(start)
        self.ordered[ipu] = (self.ordered.get(ipu, True) and int(start[0]) >= self.last.get(ipu, int(start[0]))
                             and bool(np.all(start[1:] >= start[:-1])))
        self.last[ipu] = int(start[-1])
        arrays, at = self.filled.get(ipu, (None, 0))
        if arrays is None and self.reserved.get(ipu, 0) >= n:
            size = self.reserved[ipu]
            arrays = [np.empty(size, column.dtype) for column in run]
        if arrays is not None and at + n <= len(arrays[0]) and ipu not in self.parts:
            for out, column in zip(arrays, run):
                out[at: at + n] = column
            self.filled[ipu] = (arrays, at + n)
        else:  # more rows than the summary counted (or no count): kept as they came, joined at the end
            self.parts.setdefault(ipu, []).append(run)

    def result(self) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Each IPU's (start, end, phase, step) sorted by start (sorted only if they did not come in order)."""
        out = {}
        for i in sorted(set(self.filled) | set(self.parts)):
            arrays, at = self.filled.pop(i, (None, 0))
            chunks = ([tuple(a[:at] for a in arrays)] if arrays is not None else []) + self.parts.pop(i, [])
            start, end, phase, step = (np.concatenate([c[k] for c in chunks]) if len(chunks) > 1 else chunks[0][k]
                                       for k in range(4))
            del chunks, arrays
            if not self.ordered[i]:
                order = np.argsort(start, kind="stable")
                start, end, phase, step = start[order], end[order], phase[order], step[order]
            out[i] = (start, end, phase, step)
        return out


def timeline_arrays(batches: Iterable[pa.RecordBatch | pa.Table], ipu_rows: dict[int, int] | None = None
                    ) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Each IPU's rows as (start, end, phase code, step) arrays sorted by start, gathered batch by batch
    (``_Rows``; ``ipu_rows``: each IPU's row count when known, ``Aggregates.ipu_rows``)."""
    rows = _Rows(ipu_rows)
    for batch in batches:
        rows.add(arrays(batch, TIMELINE_COLUMNS))
    return rows.result()
