"""The execution trace: extent, level-of-detail timeline, program steps and per-tile cycles.

``timeline`` answers a zoom window in time independent of the number of trace rows inside it: a
``TimelineIndex`` (built once per profile) keeps each IPU's rows sorted by start as NumPy arrays,
and for each phase the positions of its rows with the running sum of their cycles. The cycles of a
phase before any time ``x`` are then ``cum[#rows of that phase before x] + the part of the row
containing x``, found with ``np.searchsorted``; a bin's cycles are the difference at its edges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from popvision_py.analysis.tables import PHASES, TraceArrays, category, empty, executions, finish
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
    cumulative: tuple[np.ndarray, ...]  # per phase: 0, then running sum of its rows' cycles


class TimelineIndex:
    """Each IPU's trace rows sorted by start, with per-phase running sums (see the module docstring)."""

    def __init__(self, trace: TraceArrays) -> None:
        ipu, start = trace.ipu, trace.start
        if len(ipu) > 1:
            d_ipu, d_start = np.diff(ipu), np.diff(start)
            ordered = bool(np.all((d_ipu > 0) | ((d_ipu == 0) & (d_start >= 0))))
        else:
            ordered = True
        order = None if ordered else np.lexsort((start, ipu))

        def take(a: np.ndarray) -> np.ndarray:
            return a if order is None else a[order]

        ipu_s, start_s, end_s, phase_s = take(ipu), take(start), take(trace.end), take(trace.phase)
        self.ipus: list[int] = [int(i) for i in np.unique(ipu_s)] if len(ipu_s) else []
        bounds = np.searchsorted(ipu_s, np.array(self.ipus + [np.iinfo(np.int64).max]), "left")
        self._by_ipu: dict[int, _IpuIndex] = {}
        for k, i in enumerate(self.ipus):
            lo, hi = bounds[k], bounds[k + 1]
            st, en, ph = start_s[lo:hi], end_s[lo:hi], phase_s[lo:hi]
            dur = en - st
            positions, cumulative = [], []
            for p in range(len(PHASES)):
                pos = np.flatnonzero(ph == p)
                positions.append(pos)
                cumulative.append(np.concatenate(([0], np.cumsum(dur[pos]))))
            self._by_ipu[i] = _IpuIndex(st, en, ph, tuple(positions), tuple(cumulative))
        self.start_cycle = int(start.min()) if len(start) else 0
        self.end_cycle = int(trace.end.max()) if len(start) else 0

    def ipu(self, ipu: int) -> _IpuIndex:
        return self._by_ipu[ipu]


def extent(trace: TraceArrays) -> tuple[int, int]:
    """(first start, last end) cycle of the whole trace; (0, 0) for an empty trace."""
    if not len(trace):
        return (0, 0)
    return (int(trace.start.min()), int(trace.end.max()))


def _phase_time_before(ix: _IpuIndex, p: int, x: np.ndarray) -> np.ndarray:
    """Cycles of phase ``p`` on this IPU before each time in ``x``."""
    k = np.searchsorted(ix.start, x, "right") - 1  # the row starting at or before x
    before = np.searchsorted(ix.positions[p], k, "left")  # phase-p rows entirely before row k
    total = ix.cumulative[p][before]
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
            parts.append(pd.DataFrame({
                "ipu": np.full(hi - lo, i, np.int64), "start_cycle": st.astype(np.int64),
                "end_cycle": en.astype(np.int64), "phase": np.asarray(PHASES, dtype=object)[np.minimum(ix.phase[lo:hi], len(PHASES) - 1)],
                "cycles": (en - st).astype(np.int64), "events": np.ones(hi - lo, np.int64),
            }))
        frame = pd.concat(parts, ignore_index=True) if parts else _empty_timeline()
        frame["phase"] = category(frame["phase"], PHASES)
        return Timeline("events", finish(frame, TIMELINE_COLUMNS), a, b)
    bins = min(max_bins, b - a)
    edges = a + ((b - a) * np.arange(bins + 1, dtype=np.int64)) // bins
    parts = []
    for i in windows:
        ix = index.ipu(i)
        k_start = np.searchsorted(ix.start, edges[1:], "left")  # rows starting before each bin's end
        k_end = np.searchsorted(ix.end, edges[:-1], "right")  # rows ending at or before each bin's start
        for p, name in enumerate(PHASES):
            if len(ix.positions[p]) == 0:
                continue
            before = _phase_time_before(ix, p, edges)
            cycles = np.diff(before)
            events = (np.searchsorted(ix.positions[p], k_start, "left")
                      - np.searchsorted(ix.positions[p], k_end, "left"))
            keep = cycles > 0
            n = int(keep.sum())
            if n:
                parts.append(pd.DataFrame({
                    "ipu": np.full(n, i, np.int64), "start_cycle": edges[:-1][keep], "end_cycle": edges[1:][keep],
                    "phase": np.full(n, name, dtype=object), "cycles": cycles[keep].astype(np.int64),
                    "events": events[keep].astype(np.int64),
                }))
    frame = pd.concat(parts, ignore_index=True) if parts else _empty_timeline()
    frame["phase"] = category(frame["phase"], PHASES)
    return Timeline("bins", finish(frame, TIMELINE_COLUMNS, ["ipu", "start_cycle", "phase"]), a, b)


def _empty_timeline() -> pd.DataFrame:
    return empty({"ipu": "int64", "start_cycle": "int64", "end_cycle": "int64", "phase": "object",
                  "cycles": "int64", "events": "int64"})


def steps(programs: pd.DataFrame, trace: TraceArrays, ipu: int | None = None) -> pd.DataFrame:
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
