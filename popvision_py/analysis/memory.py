"""Memory: per IPU and tile, by category, always-live vs not, distribution, out-of-memory tiles, variables.

Inputs: ``tile_memory`` (each tile's rows sum to its peak), ``variables`` and the manifest's target
(``tiles_per_ipu``, ``bytes_per_tile``). Formulas in docs/reports.md, "Memory".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from popvision_py.analysis.tables import as_str, finish
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


def ipus_of(target: dict[str, Any], *frames: pd.DataFrame) -> np.ndarray:
    """Every IPU of the run: 0..num_ipus-1 plus any other IPU a table mentions."""
    seen = [np.arange(int(target.get("num_ipus", 0)))]
    seen += [f["ipu"].to_numpy() for f in frames if len(f)]
    return np.unique(np.concatenate(seen)).astype(np.int64)


def by_tile(tile_memory: pd.DataFrame, target: dict[str, Any], ipu: int | None = None) -> pd.DataFrame:
    """Every tile of every IPU (tiles without memory rows count as 0 bytes): BY_TILE_COLUMNS."""
    tiles = int(target["tiles_per_ipu"])
    capacity = int(target["bytes_per_tile"])
    ipus = ipus_of(target, tile_memory)
    n = len(ipus)
    # dense (ipu position, tile, always_live) grid filled with bincount: no groupby over rows.
    pos = np.searchsorted(ipus, tile_memory["ipu"].to_numpy())
    tile = tile_memory["tile"].to_numpy().astype(np.int64)
    width = max(tiles, int(tile.max()) + 1 if len(tile) else 0)
    key = (pos * width + tile) * 2 + tile_memory["always_live"].to_numpy().astype(np.int64)
    sums = np.bincount(key, weights=tile_memory["bytes"].to_numpy().astype(np.float64), minlength=n * width * 2)
    sums = np.rint(sums).astype(np.int64).reshape(n * width, 2)
    frame = pd.DataFrame({
        "ipu": np.repeat(ipus, width),
        "tile": np.tile(np.arange(width, dtype=np.int64), n),
        "always_live_bytes": sums[:, 1],
        "not_always_live_bytes": sums[:, 0],
    })
    frame["total_bytes"] = frame["always_live_bytes"] + frame["not_always_live_bytes"]
    frame["excess_bytes"] = np.maximum(frame["total_bytes"].to_numpy() - capacity, 0)
    frame["oom"] = frame["total_bytes"].to_numpy() > capacity
    if ipu is not None:
        frame = frame[frame["ipu"] == ipu]
    return finish(frame, BY_TILE_COLUMNS)


def by_ipu(tiles: pd.DataFrame, target: dict[str, Any]) -> pd.DataFrame:
    """Per IPU totals from ``by_tile``: BY_IPU_COLUMNS."""
    capacity = int(target["tiles_per_ipu"]) * int(target["bytes_per_tile"])
    g = tiles.groupby("ipu", sort=True)
    frame = pd.DataFrame({
        "always_live_bytes": g["always_live_bytes"].sum(),
        "not_always_live_bytes": g["not_always_live_bytes"].sum(),
        "total_bytes": g["total_bytes"].sum(),
        "max_tile_bytes": g["total_bytes"].max(),
        "oom_tiles": g["oom"].sum().astype(np.int64),
    }).reset_index()
    frame["capacity_bytes"] = capacity
    frame["headroom_bytes"] = capacity - frame["total_bytes"]
    frame["used_pct"] = 100.0 * frame["total_bytes"] / capacity if capacity else np.nan
    return finish(frame, BY_IPU_COLUMNS, ["ipu"])


def by_category(tile_memory: pd.DataFrame, ipu: int | None = None) -> pd.DataFrame:
    """Bytes per IPU, category and always-live: BY_CATEGORY_COLUMNS, sorted by ipu then bytes (largest first)."""
    frame = tile_memory if ipu is None else tile_memory[tile_memory["ipu"] == ipu]
    frame = frame.groupby(["ipu", "category", "always_live"], observed=True, as_index=False)["bytes"].sum()
    frame = as_str(frame, "category")
    frame = frame[frame["bytes"] > 0]
    return finish(frame, BY_CATEGORY_COLUMNS, ["ipu", "bytes", "category"], [True, False, True])


def distribution(tiles: pd.DataFrame) -> pd.DataFrame:
    """Tile totals per IPU: min, median, 99th percentile (linear interpolation), max, mean: DISTRIBUTION_COLUMNS."""
    g = tiles.groupby("ipu", sort=True)["total_bytes"]
    frame = pd.DataFrame({
        "min_bytes": g.min(), "median_bytes": g.median(), "p99_bytes": g.quantile(0.99),
        "max_bytes": g.max(), "mean_bytes": g.mean(),
    }).reset_index()
    return finish(frame, DISTRIBUTION_COLUMNS, ["ipu"])


def out_of_memory(tiles: pd.DataFrame) -> pd.DataFrame:
    """Tiles over capacity, largest excess first (then ipu, tile): OOM_COLUMNS."""
    frame = tiles[tiles["oom"]]
    return finish(frame, OOM_COLUMNS, ["excess_bytes", "ipu", "tile"], [False, True, True])


def largest_variables(variables: pd.DataFrame, n: int = 20, ipu: int | None = None) -> pd.DataFrame:
    """The ``n`` largest variables (on one IPU or all), largest first: VARIABLE_COLUMNS."""
    frame = variables if ipu is None else variables[variables["ipu"] == ipu]
    frame = frame.sort_values(["bytes", "var_id"], ascending=[False, True], kind="stable").head(n)
    return finish(as_str(frame.copy(), "name", "category"), VARIABLE_COLUMNS)


def tile_breakdown(tile_memory: pd.DataFrame, target: dict[str, Any], ipu: int, tile: int) -> pd.DataFrame:
    """One tile's bytes by category and always-live, largest first: TILE_BREAKDOWN_COLUMNS."""
    _check_tile(target, ipu, tile)
    frame = tile_memory[(tile_memory["ipu"] == ipu) & (tile_memory["tile"] == tile)]
    frame = frame.groupby(["category", "always_live"], observed=True, as_index=False)["bytes"].sum()
    return finish(as_str(frame, "category"), TILE_BREAKDOWN_COLUMNS, ["bytes", "category"], [False, True])


def bytes_on_tile(variables: pd.DataFrame, tile: int) -> np.ndarray:
    """Each variable's bytes on ``tile``: spread evenly over its tiles, the remainder one byte each on the first."""
    nbytes = variables["bytes"].to_numpy()
    ntiles = np.maximum(variables["tiles"].to_numpy().astype(np.int64), 1)
    offset = tile - variables["start_tile"].to_numpy()
    inside = (offset >= 0) & (offset < ntiles)
    share = nbytes // ntiles + (offset < nbytes % ntiles)
    return np.where(inside, share, 0)


def tile_variables(variables: pd.DataFrame, target: dict[str, Any], ipu: int, tile: int, n: int = 20) -> pd.DataFrame:
    """The ``n`` variables with most bytes on one tile, largest first: TILE_VARIABLE_COLUMNS."""
    _check_tile(target, ipu, tile)
    frame = variables[variables["ipu"] == ipu].copy()
    frame["bytes_on_tile"] = bytes_on_tile(frame, tile)
    frame = frame[frame["bytes_on_tile"] > 0]
    frame = frame.sort_values(["bytes_on_tile", "var_id"], ascending=[False, True], kind="stable").head(n)
    return finish(as_str(frame, "name", "category"), TILE_VARIABLE_COLUMNS)


def _check_tile(target: dict[str, Any], ipu: int, tile: int) -> None:
    if not 0 <= tile < int(target["tiles_per_ipu"]):
        raise OutOfRangeError(f"Tile {tile} is not on the IPU: tiles run from 0 to {int(target['tiles_per_ipu']) - 1}.")
    if ipu < 0:
        raise OutOfRangeError(f"IPU {ipu} is not in the profile.")
