"""Liveness: not-always-live memory per IPU over program steps, the peak step, what is live at a step.

Inputs: ``liveness``, ``programs`` (step names), ``variables`` and the target. Formulas in
docs/reports.md, "Liveness".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from popvision_py.analysis.common.tables import Columns, StepIndex, StepPieces, Table
from popvision_py.errors import OutOfRangeError
from popvision_py.format.arrays import ascending, numbers

BY_STEP_COLUMNS = ["ipu", "step", "name", "always_live_bytes", "not_always_live_bytes", "total_bytes",
                   "worst_tile", "worst_tile_bytes", "capacity_bytes"]
PEAK_COLUMNS = ["ipu", "peak_step", "name", "not_always_live_bytes", "total_bytes"]
STREAM_ROWS = 1 << 16  # a liveness table of more rows has its peaks read a batch at a time (``streamed_peaks``)
LIVE_AT_COLUMNS = ["var_id", "name", "category", "always_live", "bytes", "live_from_step", "live_to_step"]


def by_step(liveness: Columns, programs: Columns | None, target: dict[str, Any], ipu: int | None = None,
            index: StepIndex | StepPieces | None = None) -> Table:
    """Memory live at every program step: BY_STEP_COLUMNS sorted by ipu, step.

    ``total_bytes`` = always-live + not-always-live bytes on the IPU; ``capacity_bytes`` = the
    IPU's SRAM (tiles x bytes per tile). Step names are joined through ``index`` (dense (ipu, step)
    -> programs row), not a merge, or a piece of the programs at a time (``Report.step_names``), as a pandas
    Categorical (a long run's steps repeat a few names).
    """
    index = index or StepIndex(programs)
    ipus, steps = liveness["ipu"], liveness["step"]
    # in (ipu, step) order as written: the table's own columns, not copies (348,000 steps)
    if ipu is None and ascending([ipus, steps], strict=False):
        rows: slice | np.ndarray = slice(None)
    else:
        rows = np.arange(len(liveness)) if ipu is None else np.flatnonzero(ipus == ipu)
        rows = rows[np.lexsort((steps[rows], ipus[rows]))]
    names = index.categories_at(ipus[rows], steps[rows])
    always, not_always = liveness["always_live_bytes"][rows], liveness["not_always_live_bytes"][rows]
    return Table({
        "ipu": ipus[rows], "step": steps[rows], "name": names,
        "always_live_bytes": always, "not_always_live_bytes": not_always, "total_bytes": always + not_always,
        "worst_tile": liveness["worst_tile"][rows], "worst_tile_bytes": liveness["worst_tile_bytes"][rows],
        "capacity_bytes": np.full(len(always), int(target["tiles_per_ipu"]) * int(target["bytes_per_tile"]),
                                  np.int64),
    })


def peaks(steps: Table) -> Table:
    """Per IPU, the first step where not-always-live memory peaks (``steps``: ``by_step``): PEAK_COLUMNS by ipu."""
    ipu, step, nal = steps["ipu"], steps["step"], steps["not_always_live_bytes"]
    first = _peak_rows(ipu, step, nal)
    names = pd.array(np.asarray(steps["name"].take(first), dtype=object), dtype="str")  # (by_step's are categories)
    return _peak_table(ipu[first], step[first], names, nal[first], steps["total_bytes"][first])


def decoded_peaks(liveness: Columns, index: StepIndex) -> Table:
    """``peaks(by_step(...))`` from the tables decoded whole (``index``: the programs'), the names of the peak steps
    only taken: not every step's name, which a long run's steps would hold (a 10 GB import's 348,000)."""
    ipu, step, nal = liveness["ipu"], liveness["step"], liveness["not_always_live_bytes"]
    first = _peak_rows(ipu, step, nal)
    ipu, step = ipu[first], step[first]
    return _peak_table(ipu, step, index.name_array(index.rows(ipu, step)), nal[first],
                       liveness["always_live_bytes"][first] + nal[first])


def _peak_table(ipu: np.ndarray, step: np.ndarray, name: Any, nal: np.ndarray, total: np.ndarray) -> Table:
    """PEAK_COLUMNS of each IPU's peak, as found (none: an empty table of their types)."""
    if not len(ipu):
        return Table.empty({c: np.int64 if c != "name" else object for c in PEAK_COLUMNS})
    return Table({"ipu": ipu, "peak_step": step, "name": name, "not_always_live_bytes": nal, "total_bytes": total})


def _peak_rows(ipu: np.ndarray, step: np.ndarray, nal: np.ndarray) -> np.ndarray:
    """The row of each IPU's largest not-always-live bytes (``nal``), its earliest step of them, by IPU."""
    order = np.lexsort((step, -nal, ipu))
    return order[np.r_[True, ipu[order][1:] != ipu[order][:-1]]] if len(order) else order


def streamed_peaks(liveness: Iterable[Any], programs: Iterable[Any]) -> Table:
    """``peaks(by_step(...))`` without the steps held: ``liveness``, batches of its ``ipu``, ``step``,
    ``always_live_bytes`` and ``not_always_live_bytes`` (pyarrow RecordBatches), read a batch at a time, each
    IPU's largest not-always-live bytes at its earliest step kept; the names of those steps then found in
    ``programs``, batches of its ``ipu``, ``step`` and ``name`` ("" where the program has no such step). What it
    holds is a batch's rows and a row an IPU, not the steps of a long run (the dashboard's first insights)."""
    best: list[np.ndarray] | None = None  # ipu, step, not-always-live, total: each IPU's so far, as read
    for batch in liveness:
        nal = numbers(batch.column("not_always_live_bytes"))
        found = [numbers(batch.column("ipu")), numbers(batch.column("step")), nal,
                 numbers(batch.column("always_live_bytes")) + nal]
        ipu, step, nal, total = found if best is None else (np.concatenate([b, f]) for b, f in zip(best, found))
        first = _peak_rows(ipu, step, nal)
        best = [ipu[first], step[first], nal[first], total[first]]
    if best is None or not len(best[0]):
        none = np.zeros(0, np.int64)
        return _peak_table(none, none, none, none, none)
    ipu, step, nal, total = best
    width = int(step.max()) + 1
    wanted = ipu.astype(np.int64) * width + step  # each peak's (ipu, step) as one key
    named: dict[int, str] = {}
    for batch in programs:
        steps = numbers(batch.column("step"))
        key = numbers(batch.column("ipu")).astype(np.int64) * width + steps
        hit = np.flatnonzero(np.isin(key, wanted) & (steps < width))
        if len(hit):
            named.update(zip(key[hit].tolist(), batch.column("name").take(hit).to_pylist()))
    names = [named.get(k) for k in wanted.tolist()]
    name = (pd.array(names, dtype="str") if all(n is not None for n in names) else
            np.array(["" if n is None else n for n in names], dtype=object))
    return _peak_table(ipu, step, name, nal, total)


def live_at(variables: Columns, ipu: int, step: int, num_steps: int | None = None, n: int | None = None) -> Table:
    """Variables live on ``ipu`` at ``step`` (always-live ones included), largest first: LIVE_AT_COLUMNS.

    Only the first ``n`` rows if given (names decoded for those rows only).
    """
    if num_steps is not None and not 0 <= step < num_steps:
        raise OutOfRangeError(f"Step {step} is not in the program of IPU {ipu}: steps run from 0 to {num_steps - 1}.")
    live = (variables["ipu"] == ipu) & (variables["always_live"] | (
        (variables["live_from_step"] <= step) & (step <= variables["live_to_step"])))
    rows = np.flatnonzero(live)
    rows = rows[np.lexsort((variables["var_id"][rows], -variables["bytes"][rows]))][:n]
    return Table({c: (variables.strings(c, rows) if c in ("name", "category") else variables[c][rows])
                  for c in LIVE_AT_COLUMNS})


def step_count(liveness: Columns, programs: Columns, ipu: int) -> int:
    """Program steps of one IPU (from programs, else liveness)."""
    steps = programs["step"][programs["ipu"] == ipu]
    if not len(steps):
        steps = liveness["step"][liveness["ipu"] == ipu]
    if not len(steps):
        raise OutOfRangeError(f"IPU {ipu} is not in the profile.")
    return int(np.max(steps)) + 1
