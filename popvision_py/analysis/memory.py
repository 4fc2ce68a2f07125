"""Memory: per IPU and tile, by category, always-live vs not, distribution, out-of-memory tiles, variables.

Inputs: ``tile_memory`` (each tile's rows sum to its peak), ``variables`` and the manifest's target
(``tiles_per_ipu``, ``bytes_per_tile``). Formulas in docs/reports.md, "Memory".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from popvision_py.analysis.tables import Columns, Table, alphabetical, frame_of, present, sum_by
from popvision_py.errors import OutOfRangeError

BY_IPU_COLUMNS = ["ipu", "always_live_bytes", "not_always_live_bytes", "total_bytes", "capacity_bytes",
                  "headroom_bytes", "used_pct", "max_tile_bytes", "oom_tiles"]
BY_CATEGORY_COLUMNS = ["ipu", "category", "always_live", "bytes"]
BY_TILE_COLUMNS = ["ipu", "tile", "always_live_bytes", "not_always_live_bytes", "total_bytes", "excess_bytes", "oom"]
DISTRIBUTION_COLUMNS = ["ipu", "min_bytes", "median_bytes", "p99_bytes", "max_bytes", "mean_bytes"]
OOM_COLUMNS = ["ipu", "tile", "total_bytes", "excess_bytes"]
VARIABLE_COLUMNS = ["var_id", "name", "ipu", "category", "always_live", "bytes", "tiles", "live_from_step",
                    "live_to_step"]
TILE_BREAKDOWN_COLUMNS = ["category", "always_live", "bytes"]
TILE_VARIABLE_COLUMNS = ["var_id", "name", "category", "always_live", "bytes_on_tile", "live_from_step",
                         "live_to_step"]


def ipus_of(target: dict[str, Any], *tables: Any) -> np.ndarray:
    """Every IPU of the run: 0..num_ipus-1 plus any other IPU a table mentions."""
    seen = [np.arange(int(target.get("num_ipus", 0)))]
    seen += [present(np.asarray(t["ipu"])) for t in tables if len(t)]
    return np.unique(np.concatenate(seen)).astype(np.int64)


class TileTotals:
    """Every tile's totals as NumPy arrays (``by_tile``'s columns, row for row), without a DataFrame.

    ``by_ipu``, ``distribution``, ``out_of_memory`` and ``summary.figures`` read these arrays;
    the 5,888-row (bert-large) ``by_tile`` frame is built from them only when asked for.
    """

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns["ipu"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def frame(self) -> pd.DataFrame:
        return frame_of(self.columns, BY_TILE_COLUMNS)


def tile_totals(tile_memory: Columns, target: dict[str, Any]) -> TileTotals:
    """``by_tile``'s columns as arrays: one bincount over tile_memory's rows."""
    tiles = int(target["tiles_per_ipu"])
    capacity = int(target["bytes_per_tile"])
    ipus = ipus_of(target, tile_memory)
    n = len(ipus)
    # dense (ipu position, tile, always_live) grid filled with bincount: no groupby over rows.
    ipu_col = tile_memory["ipu"]
    dense = n and ipus[0] == 0 and ipus[-1] == n - 1  # IPUs 0..n-1: an IPU is its own position
    tile = tile_memory["tile"]
    width = max(tiles, int(tile.max()) + 1 if len(tile) else 0)
    if dense and n * width * 2 < 2**31:  # 32-bit keys: half the memory traffic of int64
        key = (ipu_col.astype(np.int32) * np.int32(width) + tile.astype(np.int32)) * np.int32(2) + tile_memory["always_live"]
    else:
        pos = ipu_col.astype(np.int64) if dense else np.searchsorted(ipus, ipu_col)
        key = (pos * width + tile.astype(np.int64)) * 2 + tile_memory["always_live"]
    sums = sum_by(key, tile_memory["bytes"], n * width * 2).reshape(n * width, 2)
    always, not_always = sums[:, 1], sums[:, 0]
    total = always + not_always
    return TileTotals({
        "ipu": np.repeat(ipus, width),
        "tile": np.tile(np.arange(width, dtype=np.int64), n),
        "always_live_bytes": always,
        "not_always_live_bytes": not_always,
        "total_bytes": total,
        "excess_bytes": np.maximum(total - capacity, 0),
        "oom": total > capacity,
    })


def _per_ipu(tiles: pd.DataFrame | TileTotals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(IPUs, order of the rows grouped by IPU, where each IPU's rows start in that order)."""
    if isinstance(tiles, TileTotals):  # already grouped: each IPU's ``width`` tiles, one after another
        ipus = np.unique(tiles["ipu"]) if len(tiles) else np.zeros(0, np.int64)
        width = len(tiles) // len(ipus) if len(ipus) else 0
        return ipus, np.arange(len(tiles)), np.arange(len(ipus)) * width
    ipu = np.asarray(tiles["ipu"])
    order = np.argsort(ipu, kind="stable")
    ipus, starts = np.unique(ipu[order], return_index=True)
    return ipus, order, starts


def by_ipu(tiles: pd.DataFrame | TileTotals, target: dict[str, Any]) -> Table:
    """Per IPU totals from ``by_tile``: BY_IPU_COLUMNS."""
    capacity = int(target["tiles_per_ipu"]) * int(target["bytes_per_tile"])
    ipus, order, starts = _per_ipu(tiles)
    if not len(ipus):
        return Table.empty({c: np.float64 if c == "used_pct" else np.int64 for c in BY_IPU_COLUMNS})

    def total(column: str, reduce=np.add) -> np.ndarray:
        return reduce.reduceat(np.asarray(tiles[column]).astype(np.int64)[order], starts)

    total_bytes = total("total_bytes")
    return Table({
        "ipu": ipus.astype(np.int64),
        "always_live_bytes": total("always_live_bytes"),
        "not_always_live_bytes": total("not_always_live_bytes"),
        "total_bytes": total_bytes,
        "capacity_bytes": np.full(len(ipus), capacity, np.int64),
        "headroom_bytes": capacity - total_bytes,
        "used_pct": 100.0 * total_bytes / capacity if capacity else np.full(len(ipus), np.nan),
        "max_tile_bytes": total("total_bytes", np.maximum),
        "oom_tiles": total("oom"),
    })


def by_category(tile_memory: Columns, ipu: int | None = None) -> Table:
    """Bytes per IPU, category and always-live: BY_CATEGORY_COLUMNS, sorted by ipu then bytes (largest first)."""
    ipu_col = tile_memory["ipu"]
    words = tile_memory.words("category")
    n_cat = len(words)
    codes, live_col, nbytes = tile_memory.codes("category"), tile_memory["always_live"], tile_memory["bytes"]
    if ipu is not None:
        keep = np.flatnonzero(ipu_col == ipu)
        ipu_col, codes, live_col, nbytes = ipu_col[keep], codes[keep], live_col[keep], nbytes[keep]
    lo = int(ipu_col.min()) if len(ipu_col) else 0
    if lo >= 0 and (int(ipu_col.max()) + 1 if len(ipu_col) else 0) * n_cat * 2 < 2**31:
        # IPUs are small non-negative ids: the IPU is its own position (one bincount, no searchsorted)
        ipus = np.arange(int(ipu_col.max()) + 1 if len(ipu_col) else 0)
        pos = ipu_col.astype(np.int32)
        key = (pos * np.int32(n_cat) + codes.astype(np.int32)) * np.int32(2) + live_col
    else:
        ipus = present(ipu_col)
        pos = np.searchsorted(ipus, ipu_col)
        key = (pos * n_cat + codes) * 2 + live_col.astype(np.int64)
    sums = sum_by(key, nbytes, len(ipus) * n_cat * 2)
    nz = np.flatnonzero(sums > 0)
    cell, live = np.divmod(nz, 2)
    ipu_pos, cat = np.divmod(cell, n_cat)
    nz = nz[np.lexsort((alphabetical(words)[cat], -sums[nz], ipu_pos))]  # by ipu, largest first, then name
    cell, live = np.divmod(nz, 2)
    ipu_pos, cat = np.divmod(cell, n_cat)
    return Table({
        "ipu": ipus[ipu_pos].astype(ipu_col.dtype), "category": words[cat], "always_live": live.astype(bool),
        "bytes": sums[nz],
    })


def distribution(tiles: pd.DataFrame | TileTotals) -> Table:
    """Tile totals per IPU: min, median, 99th percentile (linear interpolation), max, mean: DISTRIBUTION_COLUMNS."""
    ipus, order, starts = _per_ipu(tiles)
    if isinstance(tiles, TileTotals) and len(ipus):  # every IPU has as many tiles: one row each
        grid = np.asarray(tiles["total_bytes"]).reshape(len(ipus), -1)
        return Table({
            "ipu": ipus.astype(np.int64), "min_bytes": grid.min(axis=1), "median_bytes": np.median(grid, axis=1),
            "p99_bytes": np.quantile(grid, 0.99, axis=1), "max_bytes": grid.max(axis=1),
            "mean_bytes": grid.mean(axis=1),
        })
    values = np.asarray(tiles["total_bytes"])[order]
    parts = np.split(values, starts[1:]) if len(ipus) else []  # one array per IPU (a few), not per tile
    return Table({
        "ipu": ipus.astype(np.int64),
        "min_bytes": np.array([p.min() for p in parts], values.dtype),
        "median_bytes": np.array([np.median(p) for p in parts], float),
        "p99_bytes": np.array([np.quantile(p, 0.99) for p in parts], float),
        "max_bytes": np.array([p.max() for p in parts], values.dtype),
        "mean_bytes": np.array([p.mean() for p in parts], float),
    })


def out_of_memory(tiles: pd.DataFrame | TileTotals) -> Table:
    """Tiles over capacity, largest excess first (then ipu, tile): OOM_COLUMNS."""
    oom = np.flatnonzero(np.asarray(tiles["oom"]))
    excess, ipu, tile = (np.asarray(tiles[c])[oom] for c in ("excess_bytes", "ipu", "tile"))
    rows = oom[np.lexsort((tile, ipu, -excess))]
    return Table({c: np.asarray(tiles[c])[rows] for c in OOM_COLUMNS})


def _variable_rows(variables: Columns, rows: np.ndarray, columns: list[str], **extra: np.ndarray) -> Table:
    """A frame of some variables: ``columns`` from the table (names decoded for these rows only)."""
    data = {}
    for c in columns:
        if c in extra:
            data[c] = extra[c]
        elif c in ("name", "category"):
            data[c] = variables.strings(c, rows)
        else:
            data[c] = variables[c][rows]
    return Table(data)


def _largest(sizes: np.ndarray, var_id: np.ndarray, rows: np.ndarray, n: int | None) -> np.ndarray:
    """``rows`` ordered by size (largest first, then var_id), the first ``n``."""
    order = rows[np.lexsort((var_id[rows], -sizes[rows]))]
    return order if n is None else order[:n]


def largest_variables(variables: Columns, n: int = 20, ipu: int | None = None) -> Table:
    """The ``n`` largest variables (on one IPU or all), largest first: VARIABLE_COLUMNS."""
    rows = np.arange(len(variables)) if ipu is None else np.flatnonzero(variables["ipu"] == ipu)
    rows = _largest(variables["bytes"], variables["var_id"], rows, n)
    return _variable_rows(variables, rows, VARIABLE_COLUMNS)


def tile_breakdown(tile_memory: Columns, target: dict[str, Any], ipu: int, tile: int) -> Table:
    """One tile's bytes by category and always-live, largest first: TILE_BREAKDOWN_COLUMNS."""
    _check_tile(target, ipu, tile)
    rows = np.flatnonzero((tile_memory["ipu"] == ipu) & (tile_memory["tile"] == tile))
    words = tile_memory.words("category")
    key = tile_memory.codes("category")[rows] * 2 + tile_memory["always_live"][rows].astype(np.int64)
    sums = sum_by(key, tile_memory["bytes"][rows], len(words) * 2)
    seen = np.zeros(len(sums), bool)
    seen[key] = True  # categories with rows, zero bytes included (as a groupby gives)
    cell = np.flatnonzero(seen)
    cell = cell[np.lexsort((alphabetical(words)[cell // 2], -sums[cell]))]  # largest first, then by name
    return Table({"category": words[cell // 2], "always_live": (cell % 2).astype(bool), "bytes": sums[cell]})


def bytes_on_tile(variables: Any, tile: int) -> np.ndarray:
    """Each variable's bytes on ``tile``: spread evenly over its tiles, the remainder one byte each on the first."""
    nbytes = np.asarray(variables["bytes"])
    ntiles = np.maximum(np.asarray(variables["tiles"]).astype(np.int64), 1)
    offset = tile - np.asarray(variables["start_tile"])
    inside = (offset >= 0) & (offset < ntiles)
    share = nbytes // ntiles + (offset < nbytes % ntiles)
    return np.where(inside, share, 0)


def tile_variables(variables: Columns, target: dict[str, Any], ipu: int, tile: int, n: int = 20) -> Table:
    """The ``n`` variables with most bytes on one tile, largest first: TILE_VARIABLE_COLUMNS."""
    _check_tile(target, ipu, tile)
    on_tile = np.where(variables["ipu"] == ipu, bytes_on_tile(variables, tile), 0)
    rows = _largest(on_tile, variables["var_id"], np.flatnonzero(on_tile > 0), n)
    return _variable_rows(variables, rows, TILE_VARIABLE_COLUMNS, bytes_on_tile=on_tile[rows])


def _check_tile(target: dict[str, Any], ipu: int, tile: int) -> None:
    if not 0 <= tile < int(target["tiles_per_ipu"]):
        raise OutOfRangeError(f"Tile {tile} is not on the IPU: tiles run from 0 to {int(target['tiles_per_ipu']) - 1}.")
    if ipu < 0:
        raise OutOfRangeError(f"IPU {ipu} is not in the profile.")
