"""Three insights Graph Analyser gives beside the summary: FP32 variables that could be FP16, the
fullest tiles with what fills them, and memory over tiles as a histogram.

Inputs: ``variables`` (with ``dtype`` from schema 2 on; a schema-1 profile's types are inferred
from its run configuration), ``tile_memory`` through ``memory.TileTotals``, the manifest's run and
target. Formulas in docs/reports.md, "Insights: precision, fullest tiles, memory over tiles".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from popvision_py.analysis.findings import fixes as F
from popvision_py.analysis.ipu.memory import TileTotals, bytes_on_tile
from popvision_py.analysis.common.tables import Columns, Table, sum_by

FP32_COLUMNS = ["ipu", "kind", "dtype", "variables", "bytes", "saved_bytes", "option"]
FULLEST_COLUMNS = ["rank", "ipu", "tile", "total_bytes", "used_pct", "excess_bytes", "peak_step", "top_category",
                   "top_category_bytes"]
FULLEST_CATEGORY_COLUMNS = ["rank", "ipu", "tile", "category", "always_live", "bytes"]
FULLEST_VARIABLE_COLUMNS = ["rank", "ipu", "tile", "var_id", "name", "category", "dtype", "always_live",
                            "bytes_on_tile", "live_from_step", "live_to_step"]
HISTOGRAM_COLUMNS = ["low_bytes", "high_bytes", "tiles", "tiles_pct", "over_capacity"]
FULLEST_TILES = 5
VARIABLES_PER_TILE = 5
HISTOGRAM_BINS = 20
ACCUMULATOR = "/grad_accumulator"  # the emulator's name for a gradient accumulator (engine/variables.py)

# What halving a type saves: FP32 -> FP16 half its bytes; a mixed optimiser state (one FP16 and one
# FP32 moment, as many elements each) a third (6 -> 4 bytes per parameter).
SAVED_SHARE = {"fp32": 0.5, "mixed": 1.0 / 3.0}


@dataclass(frozen=True)
class Option:
    """A ``popvision run`` option that makes a kind of variable FP16: its changes and how it reads."""

    changes: dict[str, str]
    words: str  # "--precision fp16"
    holds: str  # what it halves, in words


def variable_kinds(variables: Columns) -> np.ndarray:
    """Each variable's kind: its category, with gradient accumulators (``*/grad_accumulator``) apart."""
    kind = variables["category"].astype(object).copy()
    if len(variables):
        names = variables["name"].astype(str)
        kind[np.char.endswith(names, ACCUMULATOR)] = "gradient_accumulators"
    return kind


def inferred_dtypes(variables: Columns, run: Mapping[str, Any]) -> np.ndarray:
    """A schema-1 profile's element types, from its run configuration: the precision for weights,
    gradients, activations and buffers, the accumulators' and the optimiser state's own types.
    (The loss's FP32 output and token ids are not told apart: they take the precision.)"""
    precision = str(run.get("precision") or "fp16")
    state = str(run.get("optimiser_state_type") or "fp32")
    first = run.get("first_moment_type")
    two_moments = str(run.get("optimiser", "")) in ("adam", "adamw", "lamb")
    state_type = "mixed" if two_moments and first and first != state else state
    out = np.full(len(variables), precision, dtype=object)
    kind = variable_kinds(variables)
    out[kind == "optimiser_state"] = state_type
    out[kind == "gradient_accumulators"] = str(run.get("accum_type") or precision)
    return out


def options_for(run: Mapping[str, Any], target: Mapping[str, Any]) -> dict[str, Option]:
    """The option that halves each kind of variable in this run (kinds no option changes are left out)."""
    _, given = F.request(run, target)
    out: dict[str, Option] = {}
    if str(run.get("precision") or "fp16") == "fp32":
        follows = Option({"precision": "fp16"}, "--precision fp16", "weights, gradients, activations and buffers")
        for kind in ("weights", "gradients", "activations", "stash", "exchange_buffers"):
            out[kind] = follows
        if not given.get("accum_type") and not run.get("accum_type"):  # accumulators follow the precision
            out["gradient_accumulators"] = follows
    if "gradient_accumulators" not in out:
        out["gradient_accumulators"] = Option({"accum_type": "fp16"}, "--accum-type fp16", "gradient accumulators")
    state = {"optimiser_state_type": "fp16"}
    if given.get("first_moment_type") not in (None, "fp16"):
        state["first_moment_type"] = "fp16"
    out["optimiser_state"] = Option(state, " ".join(F.flag(k, v)[0] + " fp16" for k, v in state.items()),
                                    "optimiser state")
    return out


def fp32_variables(variables: Columns, dtypes: np.ndarray, run: Mapping[str, Any],
                   target: Mapping[str, Any]) -> Table:
    """FP32 (and mixed) variables by IPU and kind: FP32_COLUMNS, the largest saving first.

    ``saved_bytes``: their bytes times the share a change to FP16 saves (``SAVED_SHARE``) where an
    option changes them (``option``), else 0 (the model's own FP32, such as the loss).
    """
    rows = np.flatnonzero(np.isin(dtypes, list(SAVED_SHARE)))
    empty = Table.empty({"ipu": np.int64, "kind": object, "dtype": object, "variables": np.int64, "bytes": np.int64,
                         "saved_bytes": np.int64, "option": object})
    if not len(rows):
        return empty
    options = options_for(run, target)
    kind = variable_kinds(variables)[rows]
    dtype = dtypes[rows].astype(str)
    ipu = variables["ipu"][rows].astype(np.int64)
    # group by (ipu, kind, dtype): codes of the few distinct kinds and types
    kinds, kind_code = np.unique(kind.astype(str), return_inverse=True)
    types, type_code = np.unique(dtype, return_inverse=True)
    ipus, ipu_code = np.unique(ipu, return_inverse=True)
    key = (ipu_code * len(kinds) + kind_code) * len(types) + type_code
    cells = len(ipus) * len(kinds) * len(types)
    nbytes = sum_by(key, variables["bytes"][rows], cells)
    count = np.bincount(key, minlength=cells)
    used = np.flatnonzero(count)
    cell_ipu, rest = np.divmod(used, len(kinds) * len(types))
    cell_kind, cell_type = np.divmod(rest, len(types))
    option = np.array([options[k].words if k in options else "" for k in kinds[cell_kind]], dtype=object)
    share = np.array([SAVED_SHARE[t] for t in types[cell_type]])
    # a mixed type outside the optimiser state (a gradient of inputs of two types) has no known share
    known = (option != "") & ((types[cell_type] == "fp32") | (kinds[cell_kind] == "optimiser_state"))
    saved = np.where(known, np.floor(nbytes[used] * share), 0).astype(np.int64)
    option = np.where(known, option, "")
    order = np.lexsort((kinds[cell_kind], ipus[cell_ipu], -nbytes[used], -saved))
    return Table({
        "ipu": ipus[cell_ipu][order], "kind": kinds[cell_kind][order].astype(object),
        "dtype": types[cell_type][order].astype(object), "variables": count[used][order].astype(np.int64),
        "bytes": nbytes[used][order].astype(np.int64), "saved_bytes": saved[order], "option": option[order],
    })


def precision_fixes(fp32: Table, variables: Columns, tile_memory: Columns, run: Mapping[str, Any],
                    target: Mapping[str, Any], worst_tile_bytes: int, inferred: bool) -> list[tuple[str, F.Fix]]:
    """One finding per option that halves FP32 variables: ``(finding, Fix)``, the largest saving first.

    The worst tile after is estimated as the other memory fixes are (``fixes.worst_tile_after``): each
    IPU's category scaled on every tile by the share of its variables' bytes the option saves."""
    if not len(fp32):
        return []
    capacity = int(target["bytes_per_tile"])
    option = np.asarray(fp32["option"], object)
    var_ipu = variables["ipu"].astype(np.int64)
    category = variables["category"]
    out = []
    for words in dict.fromkeys(o for o in option.tolist() if o):
        mine = np.flatnonzero(option == words)
        per_ipu: dict[int, int] = {}
        keep: dict[tuple[int, str], float] = {}
        for row in mine:
            ipu, kind, saved = int(fp32["ipu"][row]), str(fp32["kind"][row]), int(fp32["saved_bytes"][row])
            per_ipu[ipu] = per_ipu.get(ipu, 0) + saved
            cat = "gradients" if kind == "gradient_accumulators" else kind
            of_cat = variables["bytes"][(var_ipu == ipu) & (category == cat)].sum()
            keep[(ipu, cat)] = keep.get((ipu, cat), 1.0) - saved / of_cat if of_cat else 1.0
        est = F.worst_tile_after(tile_memory, target, keep).bytes
        top = max(per_ipu, key=lambda i: (per_ipu[i], -i))
        held = int(np.asarray(fp32["bytes"])[mine].sum())
        changes = next(o.changes for o in options_for(run, target).values() if o.words == words)
        what = ", ".join(dict.fromkeys(str(k).replace("_", " ") for k in np.asarray(fp32["kind"])[mine]))
        note = (" (types inferred from the run configuration: a schema-1 profile does not record them)"
                if inferred else "")
        finding = (f"FP32 variables ({what}) hold {F.bytes_text(held)} over {len(per_ipu)} IPU(s){note}; in FP16 "
                   f"they would take {F.bytes_text(held - sum(per_ipu.values()))}.")
        tag = "fp16-" + "-".join(k.replace("_", "-").removesuffix("-type") for k in changes)
        effect = (f"Saves {F.bytes_text(per_ipu[top])} of variables on IPU {top} (the most); "
                  f"{F.tile_change(worst_tile_bytes, est, capacity)}.")
        out.append((finding, F.Fix(f"Keep the {what} in FP16 ({words}).", effect, dict(changes), tag,
                                   F.Predicted(worst_tile_bytes=est))))
    return out


def peak_step(held: np.ndarray, live_from: np.ndarray, live_to: np.ndarray, steps: int) -> int:
    """The first program step at which not-always-live variables of ``held`` bytes hold the most."""
    if not len(held) or steps <= 0:
        return 0
    change = np.zeros(steps + 1, np.int64)
    np.add.at(change, np.clip(live_from, 0, steps), held)
    np.add.at(change, np.clip(live_to + 1, 0, steps), -held)
    return int(np.argmax(np.cumsum(change[:steps])))


def fullest_tiles(tiles: TileTotals, tile_memory: Columns, variables: Columns, dtypes: np.ndarray | None,
                  capacity: int, n: int = FULLEST_TILES,
                  per_tile: int = VARIABLES_PER_TILE) -> tuple[Table, Table, Table]:
    """The ``n`` fullest tiles (FULLEST_COLUMNS), their bytes by category (FULLEST_CATEGORY_COLUMNS) and
    the ``per_tile`` variables with most bytes on each at its peak step (FULLEST_VARIABLE_COLUMNS).

    A tile's peak step is the first where its not-always-live variables (bytes on the tile by
    ``memory.bytes_on_tile``) hold the most; a variable fills it if always-live or live at that step."""
    total = np.asarray(tiles["total_bytes"])
    order = np.lexsort((np.asarray(tiles["tile"]), np.asarray(tiles["ipu"]), -total))[:n]
    words = tile_memory.words("category")
    mem_key = tile_memory["ipu"].astype(np.int64) * (1 << 32) + tile_memory["tile"].astype(np.int64)
    var_ipu = variables["ipu"].astype(np.int64) if len(variables) else np.zeros(0, np.int64)
    steps = int(variables["live_to_step"].max()) + 1 if len(variables) else 0
    heads: dict[str, list] = {c: [] for c in FULLEST_COLUMNS}
    cats: dict[str, list] = {c: [] for c in FULLEST_CATEGORY_COLUMNS}
    chosen: list[tuple[int, int, int, np.ndarray, np.ndarray]] = []
    for rank, row in enumerate(order.tolist(), start=1):
        ipu, tile = int(tiles["ipu"][row]), int(tiles["tile"][row])
        rows = np.flatnonzero(mem_key == ipu * (1 << 32) + tile)
        key = tile_memory.codes("category")[rows] * 2 + tile_memory["always_live"][rows].astype(np.int64)
        sums = sum_by(key, tile_memory["bytes"][rows], len(words) * 2)
        cell = np.unique(key)
        cell = cell[np.lexsort((words[cell // 2].astype(str), -sums[cell]))]
        by_cat = sum_by(cell // 2, sums[cell], len(words))
        top = int(np.argmax(by_cat)) if len(cell) else 0
        on = np.flatnonzero(var_ipu == ipu)
        share = bytes_on_tile({c: variables[c][on] for c in ("bytes", "start_tile", "tiles")}, tile)
        on, share = on[share > 0], share[share > 0]
        always = variables["always_live"][on].astype(bool)
        frm, to = variables["live_from_step"][on].astype(np.int64), variables["live_to_step"][on].astype(np.int64)
        step = peak_step(share[~always], frm[~always], to[~always], steps)
        fills = always | ((frm <= step) & (step <= to))
        on, share = on[fills], share[fills]
        pick = np.lexsort((variables["var_id"][on], -share))[:per_tile]
        chosen.append((rank, ipu, tile, on[pick], share[pick]))
        for c, v in zip(FULLEST_COLUMNS,
                        (rank, ipu, tile, int(total[row]), 100.0 * total[row] / capacity if capacity else np.nan,
                         max(int(total[row]) - capacity, 0), step,
                         str(words[top]) if len(cell) else "", int(by_cat[top]) if len(cell) else 0)):
            heads[c].append(v)
        for c, v in (("rank", [rank] * len(cell)), ("ipu", [ipu] * len(cell)), ("tile", [tile] * len(cell)),
                     ("category", words[cell // 2].tolist()), ("always_live", (cell % 2).astype(bool).tolist()),
                     ("bytes", sums[cell].tolist())):
            cats[c].extend(v)
    picked = np.concatenate([c[3] for c in chosen]) if chosen else np.zeros(0, np.int64)
    sizes = [len(c[3]) for c in chosen]
    tile_vars = Table({
        "rank": np.repeat([c[0] for c in chosen], sizes).astype(np.int64),
        "ipu": np.repeat([c[1] for c in chosen], sizes).astype(np.int64),
        "tile": np.repeat([c[2] for c in chosen], sizes).astype(np.int64),
        "var_id": variables["var_id"][picked].astype(np.int64) if len(picked) else np.zeros(0, np.int64),
        "name": variables.strings("name", picked) if len(picked) else np.zeros(0, object),
        "category": variables.strings("category", picked) if len(picked) else np.zeros(0, object),
        "dtype": (dtypes[picked] if dtypes is not None else np.full(len(picked), "", object)) if len(picked)
        else np.zeros(0, object),
        "always_live": variables["always_live"][picked].astype(bool) if len(picked) else np.zeros(0, bool),
        "bytes_on_tile": np.concatenate([c[4] for c in chosen]).astype(np.int64) if chosen else np.zeros(0, np.int64),
        "live_from_step": (variables["live_from_step"][picked].astype(np.int64) if len(picked)
                           else np.zeros(0, np.int64)),
        "live_to_step": variables["live_to_step"][picked].astype(np.int64) if len(picked) else np.zeros(0, np.int64),
    })
    head = Table({c: np.asarray(v, dtype=object if c == "top_category" else float if c == "used_pct" else np.int64)
                  for c, v in heads.items()})
    by_category = Table({c: np.asarray(v, dtype=object if c == "category" else bool if c == "always_live" else np.int64)
                         for c, v in cats.items()})
    return head, by_category, tile_vars


def histogram(tiles: TileTotals, capacity: int, bins: int = HISTOGRAM_BINS) -> Table:
    """Tiles' peak bytes (every IPU's tiles together) in ``bins`` bins of equal width from 0 to the
    fullest tile, the width rounded up to whole KiB: HISTOGRAM_COLUMNS (``over_capacity``: the bin
    starts above the tile memory, ``capacity`` bytes)."""
    total = np.asarray(tiles["total_bytes"], np.int64)
    if not len(total):
        return Table.empty({"low_bytes": np.int64, "high_bytes": np.int64, "tiles": np.int64, "tiles_pct": float,
                            "over_capacity": bool})
    per_bin = -(-(int(total.max()) + 1) // bins)  # ceil((max + 1) / bins): the fullest tile in the last bin
    width = max(1024, -(-per_bin // 1024) * 1024)
    edges = np.arange(bins + 1, dtype=np.int64) * width
    count = np.bincount(np.minimum(total // width, bins - 1), minlength=bins)
    return Table({"low_bytes": edges[:-1], "high_bytes": edges[1:], "tiles": count.astype(np.int64),
                  "tiles_pct": 100.0 * count / len(total), "over_capacity": edges[:-1] >= capacity})


class InsightsView:
    """``report.insights``: the three answers, each computed once per Report (``Report.memo``)."""

    def __init__(self, report: Any) -> None:
        self._r = report

    def _memo(self, key: str, compute: Any) -> Any:
        return self._r.memo(("insights", key), compute)

    def dtypes(self) -> tuple[np.ndarray, bool]:
        """Each variable's element type, and whether it was inferred (a schema-1 profile: no ``dtype``)."""
        def compute() -> tuple[np.ndarray, bool]:
            variables = self._r.columns("variables")
            if "dtype" in variables:
                return variables["dtype"], False
            return inferred_dtypes(variables, self._r.run), True

        return self._memo("dtypes", compute)

    def fp32_variables(self) -> Any:
        """FP32 (and mixed) variables by IPU and kind, what halving them saves and the option that does:
        FP32_COLUMNS."""
        return self._fp32_variables().frame()

    def _fp32_variables(self) -> Table:
        r = self._r
        return self._memo("fp32", lambda: fp32_variables(r.columns("variables"), self.dtypes()[0], r.run, r.target))

    def precision_fixes(self, worst_tile_bytes: int) -> list[tuple[str, F.Fix]]:
        """``(finding, Fix)`` per option that keeps FP32 variables in FP16 (``precision_fixes``)."""
        r = self._r
        return precision_fixes(self._fp32_variables(), r.columns("variables"), r.columns("tile_memory"), r.run,
                               r.target, worst_tile_bytes, self.dtypes()[1])

    def _fullest(self) -> tuple[Table, Table, Table]:
        r = self._r
        return self._memo("fullest", lambda: fullest_tiles(
            r.memory._tiles(), r.columns("tile_memory"), r.columns("variables"), self.dtypes()[0],
            int(r.target["bytes_per_tile"])))

    def fullest_tiles(self) -> Any:
        """The five fullest tiles: FULLEST_COLUMNS."""
        return self._fullest_tiles().frame()

    def _fullest_tiles(self) -> Table:
        return self._fullest()[0]

    def fullest_tile_categories(self) -> Any:
        """The fullest tiles' bytes by category: FULLEST_CATEGORY_COLUMNS."""
        return self._fullest_tile_categories().frame()

    def _fullest_tile_categories(self) -> Table:
        return self._fullest()[1]

    def fullest_tile_variables(self) -> Any:
        """The variables with most bytes on each fullest tile at its peak step: FULLEST_VARIABLE_COLUMNS."""
        return self._fullest_tile_variables().frame()

    def _fullest_tile_variables(self) -> Table:
        return self._fullest()[2]

    def histogram(self) -> Any:
        """Tiles' peak bytes in bins: HISTOGRAM_COLUMNS."""
        return self._histogram().frame()

    def _histogram(self) -> Table:
        r = self._r
        return self._memo("histogram", lambda: histogram(r.memory._tiles(), int(r.target["bytes_per_tile"])))
