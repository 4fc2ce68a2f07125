"""Memory in depth: the tile map by dominant category, a variable's bytes on each tile, one tile's
compute sets, vertices, exchanges and variables, and the fullest tiles' memory over program steps.

Inputs: ``tile_memory``, ``variables``, ``programs``, ``exchanges``, ``tile_cycles`` (its ``vertices``
from schema 2 on) and the manifest's target. Formulas in docs/reports.md, "Memory in depth".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popvision_py.analysis.ipu.memory import TileTotals, _check_tile, bytes_on_tile, share
from popvision_py.analysis.common.tables import Columns, Table, alphabetical, sum_by
from popvision_py.format.schema import MEMORY_CATEGORIES

DOMINANT_COLUMNS = ["tile", "category", "category_bytes", "total_bytes", "category_pct"]
FOOTPRINT_COLUMNS = ["tile", "bytes"]
CHOICE_COLUMNS = ["var_id", "name", "category", "always_live", "bytes", "start_tile", "tiles"]
COMPUTE_SET_COLUMNS = ["step", "name", "pass", "cycles", "step_cycles", "busy_pct", "vertices"]
VERTEX_COLUMNS = ["kind", "pass", "compute_sets", "vertices", "max_vertices"]
EXCHANGE_COLUMNS = ["step", "name", "kind", "src_ipu", "dst_ipu", "tiles", "bytes", "cycles"]
OVER_STEPS_COLUMNS = ["tile", "step", "always_live_bytes", "not_always_live_bytes", "total_bytes"]
WORST_COLUMNS = ["ipu", "tile", "always_live_bytes", "peak_step", "peak_step_name", "peak_bytes"]
FULLEST_COLUMNS = ["ipu", "tile", "total_bytes", "excess_bytes", "category", "category_pct", "second_category",
                   "second_pct"]
NOT_RECORDED = "vertices: not recorded (schema 1 profile)"


def category_order(words: np.ndarray) -> np.ndarray:
    """Positions of ``words`` in the schema's category order (unknown words after, alphabetically):
    ties for the dominant category go to the category listed first."""
    known = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}
    rank = np.array([known.get(w, len(known)) for w in words] or [0], np.int64)[:len(words)]
    return np.lexsort((alphabetical(words), rank)) if len(words) else np.zeros(0, np.int64)


def category_grid(tile_memory: Columns, target: dict[str, Any], ipu: int) -> tuple[np.ndarray, np.ndarray]:
    """(categories in schema order, bytes grid of shape (tiles, categories)) of one IPU: one bincount."""
    tiles = int(target["tiles_per_ipu"])
    words = tile_memory.words("category")
    order = category_order(words)
    column = np.empty(len(words), np.int64)
    column[order] = np.arange(len(words))
    rows = np.flatnonzero(tile_memory["ipu"] == ipu)
    tile = tile_memory["tile"][rows].astype(np.int64)
    key = tile * len(words) + column[tile_memory.codes("category")[rows]]
    grid = sum_by(key, tile_memory["bytes"][rows], tiles * len(words)).reshape(tiles, len(words))
    return words[order], grid


def dominant_category(tile_memory: Columns, target: dict[str, Any], ipu: int) -> Table:
    """Each tile's category with the most bytes (always-live and not together): DOMINANT_COLUMNS."""
    categories, grid = category_grid(tile_memory, target, ipu)
    tiles = np.arange(grid.shape[0], dtype=np.int64)
    total = grid.sum(axis=1)
    if not len(categories):
        return Table({"tile": tiles, "category": np.full(len(tiles), "", object), "category_bytes": total,
                      "total_bytes": total, "category_pct": np.zeros(len(tiles))})
    top = grid.argmax(axis=1)
    top_bytes = grid[tiles, top]
    return Table({
        "tile": tiles, "category": np.where(total > 0, categories[top], ""), "category_bytes": top_bytes,
        "total_bytes": total, "category_pct": 100.0 * top_bytes / np.maximum(total, 1),
    })


def footprint(variables: Columns, var_id: int) -> Table:
    """One variable's bytes on each tile of its range: FOOTPRINT_COLUMNS, by tile."""
    row = np.flatnonzero(variables["var_id"] == var_id)
    if not len(row):
        return Table.empty({"tile": np.int64, "bytes": np.int64})
    row = int(row[0])
    start, ntiles = int(variables["start_tile"][row]), int(variables["tiles"][row])
    offset = np.arange(ntiles, dtype=np.int64)
    return Table({"tile": start + offset, "bytes": share(np.full(ntiles, variables["bytes"][row]), ntiles, offset)})


def variable_choices(variables: Columns, ipu: int) -> Table:
    """The variables of one IPU, largest first (then var_id): CHOICE_COLUMNS, for a picker."""
    rows = np.flatnonzero(variables["ipu"] == ipu)
    rows = rows[np.lexsort((variables["var_id"][rows], -variables["bytes"][rows]))]
    return Table({c: variables.strings(c, rows) if c in ("name", "category") else variables[c][rows]
                  for c in CHOICE_COLUMNS})


def tile_compute_sets(tile_cycles: Columns, programs: Columns, ipu: int, tile: int) -> Table:
    """The compute sets ``tile`` runs, in program order: COMPUTE_SET_COLUMNS. ``step_cycles`` is the
    step's own length (its slowest tile), ``busy_pct`` the tile's share of it; ``vertices`` is -1
    where the profile does not record them (schema 1)."""
    rows = np.flatnonzero((tile_cycles["ipu"] == ipu) & (tile_cycles["tile"] == tile))
    steps = tile_cycles["step"][rows].astype(np.int64)
    order = np.argsort(steps, kind="stable")
    rows, steps = rows[order], steps[order]
    prog = _program_rows(programs, ipu, steps)
    cycles = tile_cycles["cycles"][rows].astype(np.int64)
    step_cycles = np.where(prog >= 0, programs["cycles"][np.maximum(prog, 0)], 0).astype(np.int64)
    vertices = (tile_cycles["vertices"][rows].astype(np.int64) if "vertices" in tile_cycles
                else np.full(len(rows), -1, np.int64))
    return Table({
        "step": steps, "name": programs.strings("name", np.maximum(prog, 0)),
        "pass": programs.strings("pass", np.maximum(prog, 0)), "cycles": cycles, "step_cycles": step_cycles,
        "busy_pct": 100.0 * cycles / np.maximum(step_cycles, 1), "vertices": vertices,
    })


def _program_rows(programs: Columns, ipu: int, steps: np.ndarray) -> np.ndarray:
    """programs' row of each of ``ipu``'s ``steps``, -1 where there is none."""
    mine = np.flatnonzero(programs["ipu"] == ipu)
    by_step = np.full(int(programs["step"][mine].max()) + 1 if len(mine) else 0, -1, np.int64)
    by_step[programs["step"][mine]] = mine
    inside = (steps >= 0) & (steps < len(by_step))
    return np.where(inside, by_step[np.clip(steps, 0, max(len(by_step) - 1, 0))] if len(by_step) else -1, -1)


def tile_vertices(compute_sets: Table, programs: Columns, ops: Columns, ipu: int) -> Table:
    """The tile's vertices by codelet (the op kind and pass of each compute set): VERTEX_COLUMNS, most
    vertices first. Empty where the profile does not record vertices."""
    vertices = np.asarray(compute_sets["vertices"])
    if not len(vertices) or (vertices < 0).any():
        return Table.empty({"kind": object, "pass": object, "compute_sets": np.int64, "vertices": np.int64,
                            "max_vertices": np.int64})
    prog = _program_rows(programs, ipu, np.asarray(compute_sets["step"]))
    words, kind = _op_kinds(ops, programs["op_id"][prog].astype(np.int64))
    key = kind * len(PASS_CODES) + programs.codes_in("pass", PASS_CODES)[prog]
    keys, group = np.unique(key, return_inverse=True)
    total = sum_by(group, vertices, len(keys))
    most = np.zeros(len(keys), np.int64)
    np.maximum.at(most, group, vertices)
    kinds, passes = words[keys // len(PASS_CODES)], np.array(PASS_CODES + ("?",), object)[keys % len(PASS_CODES)]
    order = np.lexsort((passes.astype(str), kinds.astype(str), -total))
    return Table({"kind": kinds[order], "pass": passes[order], "compute_sets": sum_by(group, None, len(keys))[order],
                  "vertices": total[order], "max_vertices": most[order]})


def _op_kinds(ops: Columns, op_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kind words, each op's code into them); ``-`` (the last word) for -1 or an op the table lacks."""
    words = np.append(ops.words("kind"), "-")
    size = int(max(ops["op_id"].max(initial=-1), op_id.max(initial=-1))) + 1
    code = np.full(size + 1, len(words) - 1, np.int64)
    code[ops["op_id"].astype(np.int64)] = ops.codes("kind")
    return words, code[np.where(op_id >= 0, op_id, size)]


def tile_exchanges(exchanges: Columns, programs: Columns, compute_sets: Table, ipu: int,
                   tiles_per_ipu: int) -> Table:
    """The exchange steps ``tile`` takes part in, as far as the profile says: EXCHANGE_COLUMNS.

    The profile records an exchange's op and how many tiles take part, not which: a step counts
    when every tile takes part, or when it belongs to the op and pass of a compute set the tile runs
    (the emulator's exchange feeds the compute set after it, on the same tiles)."""
    rows = np.flatnonzero(exchanges["ipu"] == ipu)
    steps = exchanges["step"][rows].astype(np.int64)
    prog = _program_rows(programs, ipu, steps)
    keep = prog >= 0
    rows, steps, prog = rows[keep], steps[keep], prog[keep]
    cs_prog = _program_rows(programs, ipu, np.asarray(compute_sets["step"]))
    cs_ops = programs["op_id"][cs_prog].astype(np.int64) * 4 + programs.codes_in("pass", PASS_CODES)[cs_prog]
    ex_ops = programs["op_id"][prog].astype(np.int64) * 4 + programs.codes_in("pass", PASS_CODES)[prog]
    tiles = programs["tiles"][prog].astype(np.int64)
    mine = (tiles >= tiles_per_ipu) | ((programs["op_id"][prog] >= 0) & np.isin(ex_ops, cs_ops))
    rows, steps, prog = rows[mine], steps[mine], prog[mine]
    order = np.argsort(steps, kind="stable")
    rows, steps, prog = rows[order], steps[order], prog[order]
    return Table({
        "step": steps, "name": programs.strings("name", prog), "kind": exchanges.strings("kind", rows),
        "src_ipu": exchanges["src_ipu"][rows].astype(np.int64), "dst_ipu": exchanges["dst_ipu"][rows].astype(np.int64),
        "tiles": programs["tiles"][prog].astype(np.int64), "bytes": exchanges["bytes"][rows].astype(np.int64),
        "cycles": exchanges["cycles"][rows].astype(np.int64),
    })


PASS_CODES = ("forward", "backward", "update", "none")


def fullest(tiles: TileTotals, ipu: int, n: int) -> np.ndarray:
    """The ``n`` fullest tiles of one IPU (peak bytes, largest first, then by tile)."""
    rows = np.flatnonzero(np.asarray(tiles["ipu"]) == ipu)
    total, tile = np.asarray(tiles["total_bytes"])[rows], np.asarray(tiles["tile"])[rows]
    return tile[np.lexsort((tile, -total))][:n].astype(np.int64)


def over_steps(tile_memory: Columns, variables: Columns, programs: Columns, ipu: int, tiles: np.ndarray) -> Table:
    """Memory of ``tiles`` at every program step of ``ipu``: OVER_STEPS_COLUMNS, by tile then step.

    Each tile's always-live bytes (its ``tile_memory`` always-live rows) plus, at each step, the
    bytes on it (``share``) of the not-always-live variables live there (live_from <= step <= live_to).
    """
    steps = _steps(programs, ipu)
    tiles = np.asarray(tiles, np.int64)
    on = (tile_memory["ipu"] == ipu) & tile_memory["always_live"]
    own = tile_memory["tile"][on].astype(np.int64)
    width = int(max(own.max(initial=-1), tiles.max(initial=-1))) + 1
    always = sum_by(own, tile_memory["bytes"][on], width)[tiles]
    nal = np.flatnonzero((variables["ipu"] == ipu) & ~variables["always_live"])
    sub = {c: variables[c][nal] for c in ("bytes", "start_tile", "tiles")}
    held = bytes_on_tile(sub, tiles)  # (tiles, variables)
    first = np.clip(variables["live_from_step"][nal].astype(np.int64), 0, steps)
    after = np.clip(variables["live_to_step"][nal].astype(np.int64) + 1, 0, steps)
    k = np.arange(len(tiles), dtype=np.int64)[:, None] * (steps + 1)
    delta = sum_by(np.concatenate([(k + first).ravel(), (k + after).ravel()]),
                   np.concatenate([held.ravel(), -held.ravel()]), len(tiles) * (steps + 1))
    live = np.cumsum(delta.reshape(len(tiles), steps + 1), axis=1)[:, :steps]
    total = live + always[:, None]
    return Table({
        "tile": np.repeat(tiles, steps), "step": np.tile(np.arange(steps, dtype=np.int64), len(tiles)),
        "always_live_bytes": np.repeat(always, steps), "not_always_live_bytes": live.ravel(),
        "total_bytes": total.ravel(),
    })


def _steps(programs: Columns, ipu: int) -> int:
    """Program steps of one IPU (its largest step + 1)."""
    mine = programs["ipu"] == ipu
    return int(programs["step"][mine].max()) + 1 if mine.any() else 0


def worst_tiles(over: Table, programs: Columns, ipu: int) -> Table:
    """Each tile of ``over`` (``over_steps``, in its order) summarised: its peak step (the first, if
    several) and its bytes there: WORST_COLUMNS."""
    steps = _steps(programs, ipu)
    count = len(over) // steps if steps else 0
    grid = np.asarray(over["total_bytes"]).reshape(count, steps)
    peak = grid.argmax(axis=1) if steps else np.zeros(count, np.int64)
    first = np.arange(count) * steps
    return Table({
        "ipu": np.full(count, ipu, np.int64), "tile": np.asarray(over["tile"])[first],
        "always_live_bytes": np.asarray(over["always_live_bytes"])[first], "peak_step": peak.astype(np.int64),
        "peak_step_name": programs.strings("name", np.maximum(_program_rows(programs, ipu, peak), 0)),
        "peak_bytes": grid[np.arange(count), peak] if steps else np.zeros(count, np.int64),
    })


def fullest_tiles(tiles: TileTotals, tile_memory: Columns, target: dict[str, Any], n: int = 5) -> Table:
    """The ``n`` fullest tiles of each IPU with the two categories that fill them most: FULLEST_COLUMNS."""
    parts = []
    for ipu in tiles.ipus.tolist():  # a few IPUs; each IPU's tiles are columnar
        chosen = fullest(tiles, ipu, n)
        categories, grid = category_grid(tile_memory, target, ipu)
        rows = grid[chosen]
        total = np.maximum(rows.sum(axis=1), 1)
        ranked = (np.argsort(-rows, axis=1, kind="stable")[:, :2] if len(categories)
                  else np.zeros((len(chosen), 0), np.int64))
        first = ranked[:, 0] if ranked.shape[1] else np.zeros(len(chosen), np.int64)
        second = ranked[:, 1] if ranked.shape[1] > 1 else first
        k = np.arange(len(chosen))
        at = np.searchsorted(np.asarray(tiles["tile"])[np.asarray(tiles["ipu"]) == ipu], chosen)
        mine = np.flatnonzero(np.asarray(tiles["ipu"]) == ipu)[at]
        parts.append({
            "ipu": np.full(len(chosen), ipu, np.int64), "tile": chosen,
            "total_bytes": np.asarray(tiles["total_bytes"])[mine],
            "excess_bytes": np.asarray(tiles["excess_bytes"])[mine],
            "category": categories[first] if len(categories) else np.full(len(chosen), "", object),
            "category_pct": 100.0 * (rows[k, first] if len(categories) else 0) / total,
            "second_category": np.where(rows[k, second] > 0, categories[second], "") if ranked.shape[1] > 1
            else np.full(len(chosen), "", object),
            "second_pct": 100.0 * (rows[k, second] if ranked.shape[1] > 1 else 0) / total,
        })
    if not parts:
        return Table.empty({c: object if "category" in c else np.float64 if c.endswith("_pct") else np.int64
                            for c in FULLEST_COLUMNS})
    return Table({c: np.concatenate([p[c] for p in parts]) for c in FULLEST_COLUMNS})


def check_tile(target: dict[str, Any], ipu: int, tile: int) -> None:
    """One sentence if ``tile`` is not a tile of the target (``memory._check_tile``)."""
    _check_tile(target, ipu, tile)


class MemoryDepth:
    """The memory in depth of one Report (``report.memory.depth``): each answer computed once.

    ``report`` gives ``memo``, ``columns``, ``target``, ``manifest`` and ``profile`` (a ``Report``).
    """

    def __init__(self, report: Any) -> None:
        self._r = report

    def _memo(self, key: Any, compute: Any) -> Any:
        return self._r.memo(("MemoryDepth", key), compute)

    @property
    def vertices_recorded(self) -> bool:
        """Whether ``tile_cycles`` records vertices (schema 2 on)."""
        return self._r.profile.has_column("tile_cycles", "vertices")

    def _tile_cycles(self) -> Columns:
        return self._r.columns("tile_cycles")  # the one decode the tiles section and the trace page share

    def _ops(self) -> Columns:
        return self._r.columns("ops")

    def dominant(self, ipu: int) -> Table:
        """``dominant_category`` of one IPU."""
        return self._memo(("dominant", ipu),
                          lambda: dominant_category(self._r.columns("tile_memory"), self._r.target, ipu))

    def categories(self, ipu: int) -> tuple[np.ndarray, np.ndarray]:
        """``category_grid`` of one IPU: (categories, bytes per tile and category)."""
        return self._memo(("grid", ipu), lambda: category_grid(self._r.columns("tile_memory"), self._r.target, ipu))

    def choices(self, ipu: int) -> Table:
        """``variable_choices`` of one IPU."""
        return self._memo(("choices", ipu), lambda: variable_choices(self._r.columns("variables"), ipu))

    def footprint(self, var_id: int) -> Table:
        """``footprint`` of one variable."""
        return footprint(self._r.columns("variables"), var_id)

    def compute_sets(self, ipu: int, tile: int) -> Table:
        check_tile(self._r.target, ipu, tile)
        return self._memo(("compute_sets", ipu, tile),
                          lambda: tile_compute_sets(self._tile_cycles(), self._r.columns("programs"), ipu, tile))

    def vertices(self, ipu: int, tile: int) -> Table:
        return tile_vertices(self.compute_sets(ipu, tile), self._r.columns("programs"), self._ops(), ipu)

    def exchanges(self, ipu: int, tile: int) -> Table:
        return tile_exchanges(self._r.columns("exchanges"), self._r.columns("programs"), self.compute_sets(ipu, tile),
                              ipu, int(self._r.target["tiles_per_ipu"]))

    def over_steps(self, ipu: int, n: int = 5) -> Table:
        """``over_steps`` of the ``n`` fullest tiles of one IPU."""
        r = self._r
        return self._memo(("over_steps", ipu, n), lambda: over_steps(
            r.columns("tile_memory"), r.columns("variables"), r.columns("programs"), ipu,
            fullest(r.memory._tiles(), ipu, n)))

    def worst(self, n: int = 5) -> Table:
        """``worst_tiles`` of every IPU's ``n`` fullest tiles, one IPU after another."""
        def compute() -> Table:
            parts = [worst_tiles(self.over_steps(ipu, n), self._r.columns("programs"), ipu)
                     for ipu in self._r.memory._tiles().ipus.tolist()]
            return Table({c: np.concatenate([p[c] for p in parts]) for c in WORST_COLUMNS}) if parts else \
                Table.empty({c: object if c == "peak_step_name" else np.int64 for c in WORST_COLUMNS})
        return self._memo(("worst", n), compute)

    def fullest(self, n: int = 5) -> Table:
        """``fullest_tiles`` of every IPU."""
        return self._memo(("fullest", n), lambda: fullest_tiles(self._r.memory._tiles(), self._r.columns("tile_memory"),
                                                               self._r.target, n))
