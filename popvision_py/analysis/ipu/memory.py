"""Memory: per IPU and tile, by category, always-live vs not, distribution, out-of-memory tiles, variables.

Inputs: ``tile_memory`` (each tile's rows sum to its peak), ``variables`` and the manifest's target
(``tiles_per_ipu``, ``bytes_per_tile``). Formulas in docs/reports.md, "Memory".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popvision_py.analysis.common.tables import Columns, Table, alphabetical, present, sum_by
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


class TileTotals(Table):
    """Every tile's totals (``by_tile``'s columns), each IPU's tiles one after another, all IPUs alike.

    ``by_ipu``, ``distribution``, ``out_of_memory`` and ``summary.figures`` read these arrays;
    the 5,888-row (bert-large) ``by_tile`` frame is built from them only when asked for.
    """

    def __init__(self, columns: dict[str, np.ndarray], ipus: np.ndarray) -> None:
        super().__init__(columns)
        self.ipus = ipus

    def per_ipu(self, name: str) -> np.ndarray:
        """A column as a grid: one row per IPU (of ``ipus``), one column per tile."""
        return np.asarray(self.columns[name]).reshape(len(self.ipus), -1)


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
        key = ((ipu_col.astype(np.int32) * np.int32(width) + tile.astype(np.int32)) * np.int32(2)
               + tile_memory["always_live"])
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
    }, ipus)


def by_ipu(tiles: TileTotals, target: dict[str, Any]) -> Table:
    """Per IPU totals from ``by_tile``: BY_IPU_COLUMNS."""
    capacity = int(target["tiles_per_ipu"]) * int(target["bytes_per_tile"])
    ipus = tiles.ipus
    if not len(ipus):
        return Table.empty({c: np.float64 if c == "used_pct" else np.int64 for c in BY_IPU_COLUMNS})
    total_bytes = tiles.per_ipu("total_bytes").sum(axis=1)
    return Table({
        "ipu": ipus.astype(np.int64),
        "always_live_bytes": tiles.per_ipu("always_live_bytes").sum(axis=1),
        "not_always_live_bytes": tiles.per_ipu("not_always_live_bytes").sum(axis=1),
        "total_bytes": total_bytes,
        "capacity_bytes": np.full(len(ipus), capacity, np.int64),
        "headroom_bytes": capacity - total_bytes,
        "used_pct": 100.0 * total_bytes / capacity if capacity else np.full(len(ipus), np.nan),
        "max_tile_bytes": tiles.per_ipu("total_bytes").max(axis=1),
        "oom_tiles": tiles.per_ipu("oom").sum(axis=1),
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


def distribution(tiles: TileTotals) -> Table:
    """Tile totals per IPU: min, median, 99th percentile (linear interpolation), max, mean: DISTRIBUTION_COLUMNS."""
    if not len(tiles.ipus):
        return Table.empty({c: np.int64 if c in ("ipu", "min_bytes", "max_bytes") else np.float64
                            for c in DISTRIBUTION_COLUMNS})
    grid = tiles.per_ipu("total_bytes")
    return Table({
        "ipu": tiles.ipus.astype(np.int64), "min_bytes": grid.min(axis=1), "median_bytes": np.median(grid, axis=1),
        "p99_bytes": np.quantile(grid, 0.99, axis=1), "max_bytes": grid.max(axis=1), "mean_bytes": grid.mean(axis=1),
    })


def out_of_memory(tiles: TileTotals) -> Table:
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


def share(nbytes: np.ndarray, tiles: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Bytes at ``offset`` in a range of ``tiles`` tiles holding ``nbytes``: the emulator's split in
    proportion to grains (``Mapping.share``) at one grain per tile, each tile's cumulative share
    rounded down. Exact for a variable on fewer tiles than the IPU has (its op split into as many
    grains as tiles); one over every tile may have split into more grains than tiles, which the
    profile does not record, and reads as even (off by at most a grain's bytes per tile)."""
    nbytes, tiles, offset = (np.asarray(a, np.int64) for a in (nbytes, tiles, offset))
    tiles = np.maximum(tiles, 1)
    q, r = np.divmod(nbytes, tiles)  # floor(bytes x j / tiles) as q j + floor(r j / tiles): no int64 overflow
    return q + (r * (offset + 1)) // tiles - (r * offset) // tiles


def bytes_on_tile(variables: Any, tile: int | np.ndarray) -> np.ndarray:
    """Each variable's bytes on ``tile`` (``share``), 0 outside its range; given an array of tiles,
    one row per tile."""
    tile = np.asarray(tile, np.int64)
    offset = (tile[:, None] if tile.ndim else tile) - np.asarray(variables["start_tile"], np.int64)
    ntiles = np.broadcast_to(np.asarray(variables["tiles"], np.int64), offset.shape)
    nbytes = np.broadcast_to(np.asarray(variables["bytes"], np.int64), offset.shape)
    inside = (offset >= 0) & (offset < ntiles)
    held = np.where(inside, share(nbytes, ntiles, np.clip(offset, 0, None)), 0)
    return held


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
