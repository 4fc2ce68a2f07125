"""The execution trace: extent, level-of-detail timeline, program steps and per-tile cycles.

``timeline`` answers a zoom window in time independent of the number of trace rows inside it: a
``TimelineIndex`` (built once per profile) keeps each IPU's rows sorted by start as NumPy arrays,
and for each phase the positions of its rows with the running sum of their cycles at every 16th
of them. The cycles of a phase before any time ``x`` are then the running sum at the block before
``#rows of that phase before x``, plus the at most 15 rows after it, plus the part of the row
containing x, found with ``np.searchsorted``; a bin's cycles are the difference at its edges.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from popvision_py.analysis.common.tables import PHASES, TraceArrays, bin_edges, category, empty, finish
from popvision_py.analysis.trace.scan import Aggregates, aggregates, executions
from popvision_py.errors import OutOfRangeError

TIMELINE_COLUMNS = ["ipu", "start_cycle", "end_cycle", "phase", "cycles", "events"]
STEPS_COLUMNS = ["ipu", "step", "type", "name", "stage", "pass", "tiles", "bytes", "cycles", "executions"]


@dataclass(frozen=True)
class Timeline:
    """One zoom window: ``level`` is ``"events"`` (raw rows) or ``"bins"``; ``frame`` has TIMELINE_COLUMNS."""

    level: str
    frame: pd.DataFrame
    start_cycle: int
    end_cycle: int


@dataclass(frozen=True)
class _IpuIndex:
    start: np.ndarray
    end: np.ndarray
    phase: np.ndarray
    positions: tuple[np.ndarray, ...]  # per phase: indexes of its rows
    cumulative: tuple[np.ndarray, ...]  # per phase: cycles of its first 0, BLOCK, 2 x BLOCK... rows (``cycles_before``)
    compute_step: np.ndarray  # the program step of each compute row, in the order of positions[compute]


class TimelineIndex:
    """Each IPU's trace rows sorted by start, with per-phase running sums (see the module docstring).

    Built from a ``TraceArrays`` (in memory) or, for a profile, ``from_ipus`` on the per-IPU arrays
    ``trace.rows.timeline_arrays`` gathers in one pass over five columns, when the first timeline
    is asked for. Each compute row's step is kept too (4 bytes a compute row): the tile view
    (``analysis.ipu.tiles``) joins it with ``tile_cycles``.
    """

    def __init__(self, trace: TraceArrays | None = None) -> None:
        self.ipus: list[int] = []
        self._by_ipu: dict[int, _IpuIndex] = {}
        self.start_cycle = self.end_cycle = 0
        if trace is not None and len(trace):
            from popvision_py.analysis.trace.rows import timeline_arrays

            self._index(timeline_arrays([trace.columns()]))

    @classmethod
    def from_ipus(cls, by_ipu: dict[int, tuple[np.ndarray, ...]]) -> TimelineIndex:
        """From each IPU's (start, end, phase code, step) arrays, sorted by start."""
        index = cls()
        index._index(by_ipu)
        return index

    def _index(self, by_ipu: dict[int, tuple[np.ndarray, ...]]) -> None:
        self.ipus = sorted(by_ipu)
        # Each IPU's index is independent, and NumPy lets go of the GIL in every step: one thread per
        # IPU, as many at once as there are cores.
        workers = min(len(self.ipus), os.cpu_count() or 1)
        if workers > 1 and sum(len(by_ipu[i][0]) for i in self.ipus) > 1_000_000:
            with ThreadPoolExecutor(workers, thread_name_prefix="popvision-index") as pool:
                built = list(pool.map(lambda i: _ipu_index(*by_ipu[i]), self.ipus))
        else:
            built = [_ipu_index(*by_ipu[i]) for i in self.ipus]
        self._by_ipu = dict(zip(self.ipus, built))
        if self.ipus:
            self.start_cycle = min(int(self._by_ipu[i].start[0]) for i in self.ipus)
            self.end_cycle = max(int(self._by_ipu[i].end.max()) for i in self.ipus)

    def ipu(self, ipu: int) -> _IpuIndex:
        return self._by_ipu[ipu]


INDEX_CHUNK = 1 << 20  # rows of an IPU indexed at a time: every temporary is a chunk's, not the IPU's
BLOCK = 16  # a phase's running sum of cycles is kept at every BLOCK-th of its rows (64: timelines 10-25% slower)


def _ipu_index(st: np.ndarray, en: np.ndarray, ph: np.ndarray, step: np.ndarray | None = None) -> _IpuIndex:
    """One IPU's rows (sorted by start) with, per phase, its rows' positions and their running sum of
    cycles at every ``BLOCK``-th of them, and the step of each compute row (-1 each without ``step``).

    Each output is made once at its length (the phases' rows counted first) and filled chunk by
    chunk, so the only fresh memory is what the index keeps: at tens of millions of rows, first
    touching memory costs more than the arithmetic. The running sum kept at every 16th row of a
    phase (``cycles_before`` adds the rest) is 0.5 bytes a row instead of 8: at 50M rows the index
    is built in 0.36-0.59 s instead of 0.99-1.61 s, and a whole-run timeline costs 3-6% more
    (docs/performance.md, "Issue 26: the last three rows").
    """
    n, n_phase = len(st), len(PHASES)
    chunks = range(0, n, INDEX_CHUNK)
    counts = np.zeros(n_phase + 1, np.int64)
    for a in chunks:
        counts += np.bincount(ph[a: a + INDEX_CHUNK], minlength=n_phase + 1)[: n_phase + 1]
    # int32 positions: half the memory, and an IPU never has 2**31 rows in one profile
    position_type = np.int32 if n < 2**31 else np.int64
    positions = [np.empty(int(counts[p]), position_type) for p in range(n_phase)]
    cumulative = [np.zeros(int(counts[p]) // BLOCK + 1, np.int64) for p in range(n_phase)]
    compute = PHASES.index("compute")
    n_compute = int(counts[compute])
    compute_step = np.full(n_compute, -1, np.int32) if step is None else np.empty(n_compute, np.int32)
    filled, carried = [0] * n_phase, [0] * n_phase  # per phase: rows indexed so far, and their cycles
    for a in chunks:
        b = min(a + INDEX_CHUNK, n)
        phases, dur = ph[a:b], en[a:b] - st[a:b]
        for p in range(n_phase):
            rows = np.flatnonzero(phases == p)
            f, k = filled[p], len(rows)
            if not k:
                continue
            np.add(rows, a, out=positions[p][f: f + k], casting="unsafe")
            running = np.cumsum(dur[rows])  # cycles of the phase's rows f+1, f+2 ... f+k, less those before f
            running += carried[p]
            blocks = np.arange(f // BLOCK + 1, (f + k) // BLOCK + 1)  # the block ends among rows f+1 ... f+k
            cumulative[p][blocks] = running[blocks * BLOCK - f - 1]
            if p == compute and step is not None:
                compute_step[f: f + k] = step[a:b][rows]
            filled[p], carried[p] = f + k, int(running[-1])
    return _IpuIndex(st, en, ph, tuple(positions), tuple(cumulative), compute_step)


def cycles_before(ix: _IpuIndex, p: int, j: np.ndarray) -> np.ndarray:
    """Cycles of phase ``p``'s first ``j`` rows on this IPU (each ``0 <= j <= its rows``): the running sum
    kept at the block before, plus the at most ``BLOCK - 1`` rows after it, summed from their start and end."""
    shape = np.shape(j)
    j = np.asarray(j, np.int64).reshape(-1)
    block = j // BLOCK
    total = ix.cumulative[p][block]
    rest = block[:, None] * BLOCK + np.arange(BLOCK - 1)  # the rows after the block's start, up to j - 1
    counted = rest < j[:, None]
    if counted.any():
        rows = ix.positions[p][np.where(counted, rest, 0)]
        total = total + np.where(counted, ix.end[rows] - ix.start[rows], 0).sum(axis=1)
    return total.reshape(shape)


def extent(trace: TraceArrays | Aggregates) -> tuple[int, int]:
    """(first start, last end) cycle of the whole trace; (0, 0) for an empty trace."""
    if not len(trace):
        return (0, 0)
    agg = aggregates(trace)
    return (agg.start_cycle, agg.end_cycle)


def phase_time_before(ix: _IpuIndex, p: int, x: np.ndarray) -> np.ndarray:
    """Cycles of phase ``p`` on this IPU before each time in ``x``."""
    k = np.searchsorted(ix.start, x, "right") - 1  # the row starting at or before x
    before = np.searchsorted(ix.positions[p], k, "left")  # phase-p rows entirely before row k
    total = cycles_before(ix, p, before)
    inside = k >= 0
    kk = np.where(inside, k, 0)
    partial = np.clip(x - ix.start[kk], 0, ix.end[kk] - ix.start[kk])
    return total + np.where(inside & (ix.phase[kk] == p), partial, 0)


def timeline(index: TimelineIndex, start_cycle: int | None = None, end_cycle: int | None = None,
             max_bins: int = 2000, ipus: list[int] | None = None) -> Timeline:
    """The trace between two cycles at a level of detail a figure can draw (see docs/api.md)."""
    a = index.start_cycle if start_cycle is None else int(start_cycle)
    b = index.end_cycle if end_cycle is None else int(end_cycle)
    if b <= a:
        b = a + 1
    max_bins = max(int(max_bins), 1)
    chosen = index.ipus if ipus is None else [int(i) for i in ipus if int(i) in index._by_ipu]
    windows = {}
    for i in chosen:
        ix = index.ipu(i)
        lo = int(np.searchsorted(ix.end, a, "right"))  # first row ending after a
        hi = int(np.searchsorted(ix.start, b, "left"))  # rows starting before b
        windows[i] = (lo, max(hi, lo))
    if all(hi - lo <= max_bins for lo, hi in windows.values()):
        parts = []
        for i, (lo, hi) in windows.items():
            ix = index.ipu(i)
            st, en = ix.start[lo:hi], ix.end[lo:hi]
            parts.append({
                "ipu": np.full(hi - lo, i, np.int64), "start_cycle": st.astype(np.int64),
                "end_cycle": en.astype(np.int64),
                "phase": np.asarray(PHASES, dtype=object)[np.minimum(ix.phase[lo:hi], len(PHASES) - 1)],
                "cycles": (en - st).astype(np.int64), "events": np.ones(hi - lo, np.int64),
            })
        frame = _joined(parts)
        frame["phase"] = category(frame["phase"], PHASES)
        return Timeline("events", finish(frame, TIMELINE_COLUMNS), a, b)
    edges = bin_edges(a, b, max_bins)
    parts = []
    for i in windows:
        ix = index.ipu(i)
        for p, name in enumerate(PHASES):
            if len(ix.positions[p]) == 0:
                continue
            cycles, events = phase_bins(ix, p, edges)
            keep = cycles > 0
            n = int(keep.sum())
            if n:
                parts.append({
                    "ipu": np.full(n, i, np.int64), "start_cycle": edges[:-1][keep], "end_cycle": edges[1:][keep],
                    "phase": np.full(n, name, dtype=object), "cycles": cycles[keep].astype(np.int64),
                    "events": events[keep].astype(np.int64),
                })
    frame = _joined(parts)
    frame["phase"] = category(frame["phase"], PHASES)
    return Timeline("bins", finish(frame, TIMELINE_COLUMNS, ["ipu", "start_cycle", "phase"]), a, b)


def phase_bins(ix: _IpuIndex, p: int, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cycles of phase ``p`` on this IPU in each bin between ``edges``, and the rows of that phase overlapping it."""
    k_start = np.searchsorted(ix.start, edges[1:], "left")  # rows starting before each bin's end
    k_end = np.searchsorted(ix.end, edges[:-1], "right")  # rows ending at or before each bin's start
    cycles = np.diff(phase_time_before(ix, p, edges))
    events = np.searchsorted(ix.positions[p], k_start, "left") - np.searchsorted(ix.positions[p], k_end, "left")
    return cycles, events


def _joined(parts: list[dict[str, np.ndarray]]) -> pd.DataFrame:
    """The IPUs' columns one after the other, as one frame (one frame an IPU, joined, cost 2 ms an IPU: 8 s at
    4,096 ranks)."""
    if not parts:
        return _empty_timeline()
    return pd.DataFrame({c: np.concatenate([part[c] for part in parts]) for c in parts[0]})


def _empty_timeline() -> pd.DataFrame:
    return empty({"ipu": "int64", "start_cycle": "int64", "end_cycle": "int64", "phase": "object",
                  "cycles": "int64", "events": "int64"})


def steps(programs: pd.DataFrame, trace: Aggregates, ipu: int | None = None) -> pd.DataFrame:
    """Program steps with how often each ran: STEPS_COLUMNS, sorted by ipu, step."""
    frame = programs.merge(executions(trace), on=["ipu", "step"], how="left")
    frame["executions"] = frame["executions"].fillna(0).astype(np.int64)
    if ipu is not None:
        frame = frame[frame["ipu"] == ipu]
    return finish(frame, STEPS_COLUMNS, ["ipu", "step"])


def tile_cycles(table: pd.DataFrame, ipu: int, step: int) -> pd.DataFrame:
    """Cycles of each tile in one compute set: ``[tile, cycles]`` sorted by tile."""
    rows = table[(table["ipu"] == ipu) & (table["step"] == step)]
    if rows.empty and not ((table["ipu"] == ipu).any()):
        raise OutOfRangeError(f"The profile has no tile cycles for IPU {ipu}.")
    return finish(rows, ["tile", "cycles"], ["tile"])
