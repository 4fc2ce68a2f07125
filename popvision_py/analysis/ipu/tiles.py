"""Tiles: how evenly each compute set spreads over its tiles, the busiest tiles, and chosen tiles in time.

A tile's time line follows from the tables (docs/reports.md "Tiles"): in an execution of a compute
set the tile computes for ``c = min(tile_cycles, programs.cycles)`` cycles from the execution's
start (0 if it has no ``tile_cycles`` row: it takes no part) and then waits at the sync for the
slowest tile to the execution's end (``wait``); sync, exchange and stream executions hold every tile
for their whole length (the profile records how many tiles an exchange involves, ``programs.tiles``,
not which, and a BSP superstep ends for all tiles together); idle rows are idle.

The report's answers (``balance``, ``busiest``, ``by_ipu``) read ``tile_cycles``, ``programs`` and
``Aggregates.executions`` only, never the trace. The time line of chosen tiles (``tile_timeline``)
joins the trace rows in a window with ``tile_cycles`` by (ipu, step) through the timeline's index:
each compute row's step is turned into a code (its compute set's row in a dense ``[set, tile]``
matrix), and the counts of each code among the first ``b × block`` compute rows are kept
(``TileTimeIndex``), so the compute cycles of a tile before any time are those counts, plus the few
rows after the last whole block, times the matrix, whatever the number of rows in the window.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from popvision_py.analysis.common.tables import PHASE, PHASES, Columns, StepIndex, Table, bin_edges, category, lookup
from popvision_py.analysis.trace.timeline import TimelineIndex, _IpuIndex, phase_bins
from popvision_py.errors import OutOfRangeError

# The phases of a tile's row: the IPU's, with a compute set's time split into the tile's compute and its wait.
TILE_PHASES = ("compute", "wait", "sync", "exchange", "stream", "idle")
TIMELINE_COLUMNS = ["tile", "start_cycle", "end_cycle", "phase", "cycles", "events", "step"]
BALANCE_COLUMNS = ["ipu", "step", "name", "executions", "tiles", "min_tile_cycles", "mean_tile_cycles",
                   "max_tile_cycles", "step_cycles", "imbalance", "idle_pct", "run_pct"]
BUSIEST_COLUMNS = ["ipu", "tile", "compute_cycles", "busy_pct", "compute_sets"]
BY_IPU_COLUMNS = ["ipu", "tiles_used", "compute_set_cycles", "tile_busy_pct", "busiest_tile", "busiest_tile_cycles",
                  "mean_tile_cycles", "imbalance"]
MAX_TILES = 64  # rows of the tile view
NO_TILES = ("A rank has no tiles: an imported trace's compute is per rank (its time line is in the trace and "
            "stages sections).")
_COMPUTE = PHASE["compute"]


@dataclass(frozen=True)
class TileArrays:
    """``tile_cycles`` as arrays: ``cycles`` clipped to the step's ``programs.cycles`` (a tile never
    outlasts its step; the format makes a compute set's cycles the maximum of its tiles'). ``key``:
    each row's ``(ipu, step)`` as one dense integer ``ipu × width + step``, ``width`` = the largest
    step + 1, so sums per compute set are bincounts (no sort); ``ipus``: the target's."""

    ipu: np.ndarray
    step: np.ndarray
    tile: np.ndarray
    cycles: np.ndarray
    key: np.ndarray
    width: int
    ipus: int

    def per_set(self, grid: np.ndarray) -> np.ndarray:
        """A ``[ipu, step]`` array (``Aggregates.executions``, say) as one value per ``key`` (0 outside it)."""
        out = np.zeros((self.ipus, self.width), grid.dtype)
        rows, cols = min(self.ipus, grid.shape[0]), min(self.width, grid.shape[1]) if grid.ndim == 2 else 0
        out[:rows, :cols] = grid[:rows, :cols]
        return out.reshape(-1)


def tile_arrays(table: Columns, programs: Columns, ipus: int) -> TileArrays:
    """The ``tile_cycles`` table as arrays, each row's cycles clipped to its step's (0 for a step the program lacks)."""
    ipu, step, tile = table["ipu"], table["step"], table["tile"]
    width = int(step.max()) + 1 if len(step) else 1
    key = ipu.astype(np.int64 if ipus * width >= 2**31 else np.int32) * width + step
    p_ipu, p_step = programs["ipu"].astype(np.int64), programs["step"].astype(np.int64)
    inside = p_step < width
    step_cycles = np.zeros(ipus * width, np.int64)
    step_cycles[p_ipu[inside] * width + p_step[inside]] = programs["cycles"][inside]
    cycles = np.minimum(table["cycles"], step_cycles[key])
    return TileArrays(ipu, step, tile, cycles, key, width, ipus)


# -- the report's answers ---------------------------------------------------------------------------


def balance(tiles: TileArrays, index: StepIndex, executions: np.ndarray, run_cycles: int) -> Table:
    """Per compute set with tile cycles: the spread of its tiles' cycles, the worst balance first.

    ``imbalance`` = max / mean tile cycles; ``idle_pct`` = the share of its tiles' time in one
    execution spent waiting for the slowest, ``100 × (1 − mean / step_cycles)``; ``run_pct`` = its
    executions × step cycles over the run's length. BALANCE_COLUMNS.
    """
    size = tiles.ipus * tiles.width
    count = np.bincount(tiles.key, minlength=size)
    sets = np.flatnonzero(count)
    total = np.bincount(tiles.key, weights=tiles.cycles, minlength=size)[sets]
    low = np.full(size, np.iinfo(np.int64).max)
    high = np.zeros(size, np.int64)
    np.minimum.at(low, tiles.key, tiles.cycles)
    np.maximum.at(high, tiles.key, tiles.cycles)
    count, low, high = count[sets].astype(np.int64), low[sets], high[sets]
    ipu, step = np.divmod(sets.astype(np.int64), tiles.width)
    rows = index.rows(ipu, step)
    step_cycles = np.zeros(len(sets), np.int64)
    step_cycles[rows >= 0] = index.programs["cycles"][rows[rows >= 0]]
    mean = total / np.maximum(count, 1)
    done = tiles.per_set(executions)[sets].astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        imbalance = np.where(mean > 0, high / np.where(mean > 0, mean, 1), 1.0)
        idle = np.where(step_cycles > 0, 100.0 * (1 - mean / np.maximum(step_cycles, 1)), 0.0)
    run = 100.0 * done * step_cycles / run_cycles if run_cycles > 0 else np.zeros(len(sets))
    order = np.lexsort((step, ipu, -run, -imbalance))
    return Table({
        "ipu": ipu[order], "step": step[order], "name": index.names(rows[order]), "executions": done[order],
        "tiles": count[order], "min_tile_cycles": low[order], "mean_tile_cycles": mean[order],
        "max_tile_cycles": high[order], "step_cycles": step_cycles[order], "imbalance": imbalance[order],
        "idle_pct": idle[order], "run_pct": run[order],
    })


def tile_totals(tiles: TileArrays, executions: np.ndarray, tiles_per_ipu: int) -> np.ndarray:
    """Compute cycles of every tile over the run: ``[ipu, tile]``, the sum of its cycles × executions."""
    weights = tiles.cycles * tiles.per_set(executions)[tiles.key]
    key = tiles.ipu.astype(np.int64) * tiles_per_ipu + tiles.tile
    size = tiles.ipus * tiles_per_ipu
    summed = np.rint(np.bincount(key, weights=weights, minlength=size)).astype(np.int64)
    return summed.reshape(tiles.ipus, tiles_per_ipu)


def busiest(tiles: TileArrays, totals: np.ndarray, run_cycles: int, n: int = 10, ipu: int | None = None) -> Table:
    """The ``n`` tiles with the most compute cycles over the run (``totals``: ``tile_totals``; of one IPU if
    given): BUSIEST_COLUMNS. ``busy_pct``: those cycles over the run's length; ``compute_sets``: the compute
    sets it takes part in."""
    ipus, tiles_per_ipu = totals.shape
    sets = np.bincount(tiles.ipu.astype(np.int64) * tiles_per_ipu + tiles.tile,
                       minlength=ipus * tiles_per_ipu).reshape(ipus, tiles_per_ipu)
    if ipu is not None:
        totals, sets = totals[ipu: ipu + 1], sets[ipu: ipu + 1]
    flat = totals.reshape(-1)
    chosen = np.lexsort((np.arange(len(flat)), -flat))[: max(int(n), 0)]
    which_ipu, tile = np.divmod(chosen, tiles_per_ipu)
    return Table({"ipu": which_ipu + (ipu or 0), "tile": tile, "compute_cycles": flat[chosen],
                  "busy_pct": 100.0 * flat[chosen] / run_cycles if run_cycles > 0 else np.zeros(len(chosen)),
                  "compute_sets": sets.reshape(-1)[chosen].astype(np.int64)})


def by_ipu(tiles: TileArrays, totals: np.ndarray, programs: Columns, executions: np.ndarray) -> Table:
    """Per IPU: its time in compute sets, the share of its tiles' time there spent computing, the busiest tile.

    ``compute_set_cycles`` = Σ executions × programs.cycles over its compute sets; ``tile_busy_pct`` =
    Σ over tiles of their compute cycles (``totals``) / (tiles_per_ipu × compute_set_cycles);
    ``imbalance`` = the busiest tile's cycles / the mean over all tiles. BY_IPU_COLUMNS.
    """
    ipus, tiles_per_ipu = totals.shape
    compute = programs.codes_in("type", ("compute_set",)) == 0
    p_ipu, p_step = programs["ipu"].astype(np.int64)[compute], programs["step"].astype(np.int64)[compute]
    weights = programs["cycles"].astype(np.int64)[compute] * lookup(executions, p_ipu, p_step, 0)
    set_cycles = np.rint(np.bincount(p_ipu, weights=weights, minlength=ipus)).astype(np.int64)[:ipus]
    used = np.zeros((ipus, tiles_per_ipu), bool)
    used[tiles.ipu, tiles.tile] = True
    spent = totals.sum(axis=1)
    mean = spent / max(tiles_per_ipu, 1)
    top = np.argmax(totals, axis=1) if tiles_per_ipu else np.zeros(ipus, np.int64)
    top_cycles = totals[np.arange(ipus), top] if tiles_per_ipu else np.zeros(ipus, np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        busy = np.where(set_cycles > 0, 100.0 * spent / np.maximum(set_cycles * tiles_per_ipu, 1), 0.0)
        imbalance = np.where(mean > 0, top_cycles / np.where(mean > 0, mean, 1), 1.0)
    return Table({"ipu": np.arange(ipus, dtype=np.int64), "tiles_used": used.sum(axis=1).astype(np.int64),
                  "compute_set_cycles": set_cycles, "tile_busy_pct": busy, "busiest_tile": top.astype(np.int64),
                  "busiest_tile_cycles": top_cycles, "mean_tile_cycles": mean, "imbalance": imbalance})


def step_balance(tiles: TileArrays, ipu: int, step: int, step_cycles: int, tiles_per_ipu: int) -> pd.DataFrame:
    """Every tile of one IPU in one compute set: ``[tile, cycles, busy_pct]`` (cycles / the step's cycles; 0
    for tiles that take no part), sorted by tile."""
    cycles = np.zeros(tiles_per_ipu, np.int64)
    rows = tiles.key == ipu * tiles.width + step if step < tiles.width else np.zeros(len(tiles.key), bool)
    np.add.at(cycles, tiles.tile[rows], tiles.cycles[rows])
    busy = 100.0 * cycles / step_cycles if step_cycles > 0 else np.zeros(tiles_per_ipu)
    return pd.DataFrame({"tile": np.arange(tiles_per_ipu, dtype=np.int64), "cycles": cycles, "busy_pct": busy})


# -- choosing tiles ---------------------------------------------------------------------------------

_WORST = re.compile(r"^(?:worst|busiest)\s*(\d+)$")
_PART = re.compile(r"^(\d+)(?:\s*-\s*(\d+))?$")


def choose(spec: str, tiles_per_ipu: int, busiest_first: Callable[[int], np.ndarray]) -> list[int]:
    """The tiles ``spec`` names: numbers and ranges (``"0,5,17"``, ``"100-131"``, ``"0-3, 9"``) or the
    busiest (``"worst 8"``: ``busiest_first(8)``, the tiles with the most compute cycles over the run).

    In the order given, each once; at most MAX_TILES. A tile past the IPU's or a word it does not
    know is one sentence (``OutOfRangeError``).
    """
    text = " ".join(str(spec or "").lower().split())
    worst = _WORST.match(text)
    if worst:
        n = int(worst.group(1))
        if not 1 <= n <= MAX_TILES:
            raise OutOfRangeError(f"Choose between 1 and {MAX_TILES} tiles; 'worst {n}' asks for {n}.")
        return [int(t) for t in busiest_first(n)]
    chosen: list[int] = []
    for part in filter(None, re.split(r"[,\s]+", re.sub(r"\s*-\s*", "-", text))):
        found = _PART.match(part)
        if not found:
            raise OutOfRangeError(f"'{part}' is not a tile, a range like 100-131 or 'worst N'.")
        low = int(found.group(1))
        high = int(found.group(2)) if found.group(2) is not None else low
        if high < low:
            raise OutOfRangeError(f"The range {part} ends before it starts.")
        if high >= tiles_per_ipu:
            raise OutOfRangeError(f"Tile {high} is not on the IPU: it has tiles 0 to {tiles_per_ipu - 1}.")
        if high - low + 1 > MAX_TILES or len(chosen) + high - low + 1 > MAX_TILES * 4:
            raise OutOfRangeError(f"Choose at most {MAX_TILES} tiles.")
        chosen.extend(range(low, high + 1))
    unique = list(dict.fromkeys(chosen))
    if not unique:
        raise OutOfRangeError("Name tiles: numbers (0,5,17), a range (100-131) or 'worst 8'.")
    if len(unique) > MAX_TILES:
        raise OutOfRangeError(f"Choose at most {MAX_TILES} tiles; {len(unique)} are named.")
    return unique


# -- chosen tiles in time ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TileTimeline:
    """One zoom window of chosen tiles: ``level`` ``"events"`` (each execution) or ``"bins"``; ``frame``
    has TIMELINE_COLUMNS (``tile`` is the tile's number; ``step`` the compute set, -1 for other rows)."""

    level: str
    frame: pd.DataFrame
    start_cycle: int
    end_cycle: int


class TileTimeIndex:
    """One IPU's compute rows as codes of their compute sets, with running counts every ``block`` rows.

    ``codes[j]``: the compute set of the IPU's ``j``-th compute row (in start order), as its row in
    ``steps`` (the IPU's compute sets with tile cycles; ``len(steps)`` for one without).
    ``prefix[b, s]``: how many of the first ``b × block`` compute rows run set ``s``. The block grows
    with the number of sets so that ``prefix`` never holds more than about one count per row.
    """

    def __init__(self, ix: _IpuIndex, steps: np.ndarray, block: int = 1024) -> None:
        self.ix = ix
        self.steps = np.asarray(steps, np.int64)
        self.positions = ix.positions[_COMPUTE]
        n_sets = len(self.steps) + 1
        top = int(max(self.steps.max(initial=-1), ix.compute_step.max(initial=-1))) + 1
        lut = np.full(top + 1, n_sets - 1, np.int32)
        lut[self.steps] = np.arange(len(self.steps), dtype=np.int32)
        self.codes = lut[np.where(ix.compute_step >= 0, ix.compute_step, top)]
        self.block = max(int(block), 1 << int(n_sets - 1).bit_length())
        whole = len(self.codes) // self.block
        keys = self.codes[: whole * self.block].reshape(whole, self.block).astype(np.int64)
        keys += (np.arange(whole, dtype=np.int64) * n_sets)[:, None]
        counts = np.bincount(keys.reshape(-1), minlength=whole * n_sets).reshape(whole, n_sets)
        self.prefix = np.zeros((whole + 1, n_sets), np.int64)
        np.cumsum(counts, axis=0, out=self.prefix[1:])

    def counts_before(self, m: np.ndarray) -> np.ndarray:
        """``[len(m), sets + 1]``: how many of the first ``m`` compute rows run each set."""
        m = np.asarray(m, np.int64)
        b = m // self.block
        out = self.prefix[b].copy()
        lengths = m - b * self.block
        total = int(lengths.sum())
        if total:
            row = np.repeat(np.arange(len(m)), lengths)
            first = np.repeat(b * self.block - (np.cumsum(lengths) - lengths), lengths)
            out += np.bincount(row * out.shape[1] + self.codes[first + np.arange(total)],
                               minlength=out.size).reshape(out.shape)
        return out

    def row_codes(self, rows: np.ndarray) -> np.ndarray:
        """The set code of each of ``rows`` (row numbers of compute rows of the IPU)."""
        return self.codes[np.searchsorted(self.positions, rows)]

    def compute_before(self, x: np.ndarray, matrix: np.ndarray) -> np.ndarray:
        """``[len(x), tiles]``: each tile's compute cycles before each time in ``x`` (``matrix[set, tile]``:
        its cycles in one execution of each set, a last row of zeros)."""
        ix = self.ix
        x = np.asarray(x, np.int64)
        k = np.searchsorted(ix.start, x, "right") - 1  # the row at or before x
        m = np.searchsorted(self.positions, k, "left")  # compute rows wholly before row k
        done = self.counts_before(m) @ matrix
        kk = np.maximum(k, 0)
        inside = (k >= 0) & (ix.phase[kk] == _COMPUTE)
        if inside.any():
            rows = kk[inside]
            elapsed = np.clip(x[inside] - ix.start[rows], 0, ix.end[rows] - ix.start[rows])
            done[inside] += np.minimum(matrix[self.codes[m[inside]]], elapsed[:, None])
        return done


def tile_matrix(tiles: TileArrays, ipu: int, steps: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """``[set + 1, tile]``: the cycles of each ``chosen`` tile in one execution of each of ``steps`` (0 where it
    takes no part; the last row, sets without tile cycles, all 0)."""
    out = np.zeros((len(steps) + 1, len(chosen)), np.int64)
    column = np.full(int(max(tiles.tile.max(initial=0), max(chosen, default=0))) + 1, -1, np.int64)
    column[chosen] = np.arange(len(chosen))
    rows = tiles.ipu == ipu
    col = column[tiles.tile[rows]]
    keep = col >= 0
    np.add.at(out, (np.searchsorted(steps, tiles.step[rows][keep]), col[keep]), tiles.cycles[rows][keep])
    return out


def compute_steps(tiles: TileArrays, ipu: int) -> np.ndarray:
    """The compute sets of one IPU that have tile cycles, sorted."""
    return np.unique(tiles.step[tiles.ipu == ipu])


def tile_timeline(index: TimelineIndex, time: TileTimeIndex, tiles: TileArrays, ipu: int, chosen: list[int],
                  start_cycle: int | None = None, end_cycle: int | None = None, max_bins: int = 800) -> TileTimeline:
    """Chosen tiles of one IPU between two cycles, at the trace's level of detail (``trace.timeline``'s rule:
    each execution while the IPU has at most ``max_bins`` rows in the window, else ``max_bins`` bins)."""
    a = index.start_cycle if start_cycle is None else int(start_cycle)
    b = index.end_cycle if end_cycle is None else int(end_cycle)
    b = max(b, a + 1)
    if ipu not in index.ipus or not chosen:
        return TileTimeline("events", _frame({c: np.zeros(0, np.int64) for c in TIMELINE_COLUMNS}), a, b)
    ix = index.ipu(ipu)
    tile_ids = np.asarray(chosen, np.int64)
    matrix = tile_matrix(tiles, ipu, time.steps, tile_ids)
    lo, hi = int(np.searchsorted(ix.end, a, "right")), int(np.searchsorted(ix.start, b, "left"))
    hi = max(hi, lo)
    if hi - lo <= max(int(max_bins), 1):
        return TileTimeline("events", _events(ix, time, matrix, tile_ids, lo, hi), a, b)
    return TileTimeline("bins", _bins(ix, time, matrix, tile_ids, bin_edges(a, b, max_bins)), a, b)


def _events(ix: _IpuIndex, time: TileTimeIndex, matrix: np.ndarray, tile_ids: np.ndarray, lo: int, hi: int
            ) -> pd.DataFrame:
    """Each execution in rows ``lo:hi`` on each tile: a compute row split into the tile's compute and its wait."""
    rows = np.arange(lo, hi)
    st, en = ix.start[lo:hi].astype(np.int64), ix.end[lo:hi].astype(np.int64)
    phase = np.minimum(ix.phase[lo:hi], len(PHASES) - 1).astype(np.int64)
    is_compute = phase == _COMPUTE
    n, t = hi - lo, len(tile_ids)
    busy = np.zeros((t, n), np.int64)
    step = np.full(n, -1, np.int64)
    if is_compute.any():
        codes = time.row_codes(rows[is_compute])
        busy[:, is_compute] = np.minimum(matrix[codes].T, (en - st)[is_compute])
        step[is_compute] = np.append(time.steps, -1)[codes]
    # three kinds of bar per (tile, row): the row's own phase (not compute), the tile's compute, its wait
    own = np.broadcast_to(~is_compute, (t, n))
    parts = {
        "own": (own, np.broadcast_to(st, (t, n)), np.broadcast_to(en, (t, n)),
                np.broadcast_to(np.array(PHASES, object)[phase], (t, n))),
        "compute": (is_compute & (busy > 0), np.broadcast_to(st, (t, n)), st + busy, "compute"),
        "wait": (is_compute & (st + busy < en), st + busy, np.broadcast_to(en, (t, n)), "wait"),
    }
    columns: dict[str, list[np.ndarray]] = {c: [] for c in TIMELINE_COLUMNS}
    tile_grid = np.broadcast_to(tile_ids[:, None], (t, n))
    step_grid = np.broadcast_to(step, (t, n))
    for keep, begin, end, name in parts.values():
        columns["tile"].append(tile_grid[keep])
        columns["start_cycle"].append(begin[keep])
        columns["end_cycle"].append(end[keep])
        columns["phase"].append(name[keep] if isinstance(name, np.ndarray) else np.full(int(keep.sum()), name, object))
        columns["step"].append(step_grid[keep])
    out = {c: np.concatenate(v) for c, v in columns.items() if v}
    out["cycles"] = out["end_cycle"] - out["start_cycle"]
    out["events"] = np.ones(len(out["tile"]), np.int64)
    order = np.lexsort((out["start_cycle"], out["tile"]))
    return _frame({c: out[c][order] for c in TIMELINE_COLUMNS})


def _bins(ix: _IpuIndex, time: TileTimeIndex, matrix: np.ndarray, tile_ids: np.ndarray, edges: np.ndarray
          ) -> pd.DataFrame:
    """Each tile's cycles per phase in each bin: the IPU's for sync, exchange, stream and idle; its compute
    set time split into the tile's compute (``compute_before`` at the edges) and its wait."""
    n_bins, t = len(edges) - 1, len(tile_ids)
    tile_compute = np.diff(time.compute_before(edges, matrix), axis=0).T  # [tile, bin]
    cycles = np.zeros((len(TILE_PHASES), t, n_bins), np.int64)
    events = np.zeros((len(TILE_PHASES), t, n_bins), np.int64)
    for p, name in enumerate(PHASES):
        if not len(ix.positions[p]):
            continue
        ipu_cycles, ipu_events = phase_bins(ix, p, edges)
        if p == _COMPUTE:
            busy = np.minimum(tile_compute, ipu_cycles)
            cycles[TILE_PHASES.index("compute")] = busy
            cycles[TILE_PHASES.index("wait")] = ipu_cycles - busy
            events[TILE_PHASES.index("compute")] = events[TILE_PHASES.index("wait")] = ipu_events
        else:
            cycles[TILE_PHASES.index(name)] = ipu_cycles
            events[TILE_PHASES.index(name)] = ipu_events
    # [tile, bin, phase]: nonzero then gives the rows in (tile, start, phase) order, as the frame is kept
    cycles, events = cycles.transpose(1, 2, 0), events.transpose(1, 2, 0)
    keep = cycles > 0
    tile_at, bin_at, phase_at = np.nonzero(keep)
    return _frame({
        "tile": tile_ids[tile_at], "start_cycle": edges[:-1][bin_at], "end_cycle": edges[1:][bin_at],
        "phase": np.array(TILE_PHASES, object)[phase_at], "cycles": cycles[keep], "events": events[keep],
        "step": np.full(len(bin_at), -1, np.int64),
    })


def _frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """TIMELINE_COLUMNS as int64, the phase a categorical in TILE_PHASES' order."""
    return pd.DataFrame({c: category(columns[c], TILE_PHASES) if c == "phase" else np.asarray(columns[c], np.int64)
                         for c in TIMELINE_COLUMNS})


def window_balance(index: TimelineIndex, time: TileTimeIndex, tiles: TileArrays, ipu: int, tiles_per_ipu: int,
                   start_cycle: int, end_cycle: int) -> tuple[pd.DataFrame, int]:
    """Every tile of one IPU over the compute sets in a window: ``[tile, cycles, busy_pct]`` (its compute
    cycles in the window over the IPU's compute-set cycles there), and those compute-set cycles."""
    ix = index.ipu(ipu)
    edges = np.array([int(start_cycle), max(int(end_cycle), int(start_cycle) + 1)], np.int64)
    rows = tiles.ipu == ipu
    codes = np.searchsorted(time.steps, tiles.step[rows])
    # the counts of each set at both ends, then every tile_cycles row weighted by its set's executions between
    k = np.searchsorted(ix.start, edges, "right") - 1
    m = np.searchsorted(time.positions, k, "left")
    counts = time.counts_before(m)
    between = counts[1] - counts[0]
    cycles = np.bincount(tiles.tile[rows], weights=tiles.cycles[rows] * between[codes], minlength=tiles_per_ipu)
    kk = np.maximum(k, 0)
    for e, sign in ((0, -1), (1, 1)):  # the part of the row at each end that lies before it
        if k[e] >= 0 and ix.phase[kk[e]] == _COMPUTE:
            code = time.codes[m[e]]
            elapsed = int(np.clip(edges[e] - ix.start[kk[e]], 0, ix.end[kk[e]] - ix.start[kk[e]]))
            part = codes == code
            cycles += sign * np.bincount(tiles.tile[rows][part], weights=np.minimum(tiles.cycles[rows][part], elapsed),
                                         minlength=tiles_per_ipu)
    cycles = np.rint(cycles).astype(np.int64)
    set_cycles = int(phase_bins(ix, _COMPUTE, edges)[0][0]) if len(ix.positions[_COMPUTE]) else 0
    busy = 100.0 * cycles / set_cycles if set_cycles > 0 else np.zeros(tiles_per_ipu)
    frame = pd.DataFrame({"tile": np.arange(tiles_per_ipu, dtype=np.int64), "cycles": cycles, "busy_pct": busy})
    return frame, set_cycles


# -- the Report's view ------------------------------------------------------------------------------


class TilesReport:
    """``report.tiles``: tile balance per compute set and IPU, the busiest tiles, chosen tiles in time.

    Wired to a ``Report`` (its ``memo``, tables, trace summary and timeline index) like the other views;
    kept here so that the facade only names it.
    """

    def __init__(self, report: Any) -> None:
        self._r = report

    def _memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        return self._r.memo(("TilesReport", key), compute)

    @property
    def _shape(self) -> tuple[int, int]:
        return int(self._r.target["tiles_per_ipu"]), int(self._r.target["num_ipus"])

    def _run_cycles(self) -> int:
        agg = self._r.trace_summary()
        return int(agg.end_cycle - agg.start_cycle)

    def arrays(self) -> TileArrays:
        """``tile_cycles`` as arrays, each row clipped to its step's cycles (read once)."""
        return self._memo("arrays", lambda: tile_arrays(self._r.columns("tile_cycles"), self._r.columns("programs"),
                                                          self._shape[1]))

    def _totals(self) -> np.ndarray:
        """Every tile's compute cycles over the run, ``[ipu, tile]`` (``tile_totals``)."""
        return self._memo("totals", lambda: tile_totals(self.arrays(), self._r.trace_summary().executions,
                                                        self._shape[0]))

    def balance(self) -> pd.DataFrame:
        """Per compute set: min / mean / max tile cycles, imbalance, idle share; the worst balance first."""
        return self._balance().frame()

    def _balance(self) -> Table:
        r = self._r
        return self._memo("balance", lambda: balance(self.arrays(), r.step_index(), r.trace_summary().executions,
                                                     self._run_cycles()))

    def busiest(self, n: int = 10, ipu: int | None = None) -> pd.DataFrame:
        """The ``n`` tiles with the most compute cycles over the run (of ``ipu`` if given)."""
        return self._busiest(n, ipu).frame()

    def _busiest(self, n: int = 10, ipu: int | None = None) -> Table:
        tiles_per_ipu, ipus = self._shape
        if ipu is not None and not 0 <= ipu < ipus:
            raise OutOfRangeError(f"IPU {ipu} is not in the profile: it has IPUs 0 to {ipus - 1}.")
        return self._memo(("busiest", n, ipu), lambda: busiest(self.arrays(), self._totals(), self._run_cycles(), n,
                                                               ipu))

    def by_ipu(self) -> pd.DataFrame:
        """Per IPU: time in compute sets, its tiles' busy share there, the busiest tile and the imbalance."""
        return self._by_ipu().frame()

    def _by_ipu(self) -> Table:
        return self._memo("by_ipu", lambda: by_ipu(self.arrays(), self._totals(), self._r.columns("programs"),
                                                   self._r.trace_summary().executions))

    def choose(self, ipu: int, spec: str) -> list[int]:
        """The tiles of ``ipu`` that ``spec`` names (``choose``): "0,5,17", "100-131" or "worst 8"."""
        return choose(spec, self._shape[0], lambda n: self._busiest(n, ipu)["tile"])

    def step_balance(self, ipu: int, step: int) -> pd.DataFrame:
        """Every tile of ``ipu`` in one compute set: its cycles and its share of the step's cycles."""
        rows = self._r.step_index().rows(np.array([ipu]), np.array([step]))
        cycles = int(self._r.columns("programs")["cycles"][rows[0]]) if rows[0] >= 0 else 0
        return step_balance(self.arrays(), ipu, step, cycles, self._shape[0])

    def _window(self, start_cycle: int | None, end_cycle: int | None, what: str) -> tuple[TimelineIndex, int, int]:
        """The trace's rows of a window (the whole run by default), indexed (``trace.window_index``: a
        ``WindowTooWideError`` when they are too many to read), and the window."""
        first, last = self._r.trace.extent()
        a = first if start_cycle is None else int(start_cycle)
        b = last if end_cycle is None else int(end_cycle)
        return self._r.trace.window_index(a, b, what), a, b

    def _time(self, index: TimelineIndex, ipu: int) -> TileTimeIndex:
        """The tile index of ``ipu`` over a window's rows, kept with them (the window's rows are kept a while)."""
        if ipu not in index.ipus:
            raise OutOfRangeError(f"IPU {ipu} has no trace rows.")
        kept = index.__dict__.setdefault("tile_time", {})
        if ipu not in kept:
            kept[ipu] = TileTimeIndex(index.ipu(ipu), compute_steps(self.arrays(), ipu))
        return kept[ipu]

    def timeline(self, ipu: int, tiles: list[int], start_cycle: int | None = None, end_cycle: int | None = None,
                 max_bins: int = 800) -> TileTimeline:
        """Chosen tiles of ``ipu`` between two cycles as BSP rows (``tile_timeline``)."""
        index, a, b = self._window(start_cycle, end_cycle, "Tiles in time")
        return tile_timeline(index, self._time(index, ipu), self.arrays(), ipu, tiles, a, b, max_bins)

    def window_balance(self, ipu: int, start_cycle: int | None = None,
                       end_cycle: int | None = None) -> tuple[pd.DataFrame, int]:
        """Every tile of ``ipu`` over the compute sets between two cycles (``window_balance``)."""
        index, a, b = self._window(start_cycle, end_cycle, "The tile balance in view")
        return window_balance(index, self._time(index, ipu), self.arrays(), ipu, self._shape[0], a, b)
