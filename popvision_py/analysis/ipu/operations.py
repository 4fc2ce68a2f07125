"""Operations: every op with its cycles, FLOPs and memory over the run, and the same by block and by layer.

Inputs: ``ops``, ``programs``, ``variables``, the trace's fold (``Aggregates.executions``: how often
each program step ran; the trace is never read again) and the target. A row of ``by_op`` is a row
of ``ops``: one op in one pass (forward, backward, update). Formulas in docs/reports.md,
"Operations".

A profile imported from PyTorch traces has no ``ops``: its rows are the program steps the import
names (``importer.profile``: a module's forward or backward of a micro-batch, the thread's
operators, a send or receive), grouped by name, rank and pass; it records no FLOPs and no named
variables (NaN).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from popvision_py.analysis.common.tables import (
    PASSES, PHASE, Columns, StepPieces, Table, WordNumbers, lookup, sorted_words, sum_by)
from popvision_py.analysis.trace.scan import Aggregates, aggregates
from popvision_py.format.schema import PROGRAM_TYPES

# The trace phase each program step type runs as (the emulator's ``scheduler.PHASE_OF_TYPE``).
PHASE_OF_TYPE = {"compute_set": "compute", "exchange": "exchange", "global_exchange": "exchange",
                 "all_reduce": "exchange", "sync": "sync", "stream_copy": "stream", "remote_buffer_copy": "stream"}
CYCLE_COLUMNS = ["compute_cycles", "exchange_cycles", "sync_cycles", "stream_cycles"]
_PHASE_COLUMN = [CYCLE_COLUMNS.index(PHASE_OF_TYPE[t] + "_cycles") for t in PROGRAM_TYPES]
FIGURE_COLUMNS = ["total_cycles", "step_pct", "flops", "flops_per_s", "peak_pct", "variables", "variable_bytes",
                  "always_live_bytes"]
OP_COLUMNS = ["op_id", "name", "kind", "block", "layer", "stage", "ipu", "pass", "steps", "executions",
              *CYCLE_COLUMNS, *FIGURE_COLUMNS]
GROUPINGS = ("op", "block", "layer")
IMPORTED_STEPS = 1 << 16  # an import's program steps grouped at a time (``_imported_ops``)
IMPORTED_COLUMNS = ("ipu", "step", "type", "name", "stage", "pass", "cycles")  # what ``_imported_ops`` reads
GROUP_COLUMNS = {g: [g, "stage", "ipu", "ops", "steps", *CYCLE_COLUMNS, *FIGURE_COLUMNS] for g in GROUPINGS[1:]}
VARIABLE_COLUMNS = ["var_id", "name", "ipu", "category", "always_live", "bytes", "tiles", "live_from_step",
                    "live_to_step"]
NOT_RECORDED = ("Code and vertex-state bytes are recorded per tile (tile_memory), not per op: see the memory "
                "section.")
IMPORTED_NO_BLOCKS = "The traces name no blocks: the by-layer table groups the steps by name over the ranks."
IMPORTED_NOT_RECORDED = ("The traces record no FLOPs and no named tensors: there are no FLOP or variable figures "
                         "(their columns are empty in JSON and CSV).")


def layer_of(names: np.ndarray) -> np.ndarray:
    """The model layer of each op name: its prefix before the last '/' ('layer3/linear' -> 'layer3';
    'enc/attn/qkv' -> 'enc/attn'), the whole name when it has no '/'."""
    return np.array([n.rpartition("/")[0] or n for n in names.tolist()], dtype=object)


@dataclass(frozen=True)
class OpCosts:
    """The per-op table and how the raw rows map to it.

    ``by_op``: OP_COLUMNS, one row per op pass, costliest first. ``step_row[k]``: the ``by_op`` row
    of programs row k (-1: a step of no op). ``traced_cycles``: the trace's last end less its first
    start (``step_pct``'s denominator). ``op_cycles`` and ``other_cycles``: the cycles over the run of the
    steps of an op and of none (``figures``'), summed as the rows are joined, not joined again.
    """

    by_op: Table
    step_row: np.ndarray
    imported: bool
    peak_flops_per_s: float
    precision: str
    traced_cycles: int
    op_cycles: int = 0
    other_cycles: int = 0


def peak_flops_per_s(target: dict[str, Any], run: dict[str, Any]) -> tuple[float, str]:
    """One IPU's peak: ``flops_per_cycle_per_tile[precision] x tiles_per_ipu x clock_hz`` for the run's
    precision (fp16 unless stated); NaN where the target does not say."""
    precision = str(run.get("precision", "fp16"))
    table = target.get("flops_per_cycle_per_tile")
    per_tile = table.get(precision) if isinstance(table, dict) else None
    if not isinstance(per_tile, (int, float)) or isinstance(per_tile, bool) or per_tile <= 0:
        return float("nan"), precision
    return float(per_tile) * float(target.get("tiles_per_ipu", 0)) * float(target.get("clock_hz", 0)), precision


def _step_cycles(programs: Columns, trace: Aggregates) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per programs row: its executions, its cycles over the run (cycles x executions) and its phase column."""
    ex = np.asarray(lookup(aggregates(trace).executions, programs["ipu"], programs["step"]), np.int64)
    total = np.multiply(ex, programs["cycles"], dtype=np.int64)  # (no copy of either made first)
    type_code = programs.codes_in("type", PROGRAM_TYPES)
    phase = np.append(np.array(_PHASE_COLUMN, np.int64), -1)[type_code]  # -1: a type the schema does not know
    return ex, total, phase


def _sums(row: np.ndarray, total: np.ndarray, phase: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Cycles of each phase summed per output row (``row`` -1 and unknown types left out)."""
    inside = (row >= 0) & (phase >= 0)
    out = {}
    for k, column in enumerate(CYCLE_COLUMNS):
        chosen = inside & (phase == k)
        out[column] = sum_by(row[chosen], total[chosen], n) if n else np.zeros(0, np.int64)
    return out


def _products(flops: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """``flops x runs`` as int64 where every product fits, else as float64."""
    approx = flops.astype(np.float64) * runs
    if not len(approx) or approx.max() < 2.0**62:
        return flops.astype(np.int64) * runs.astype(np.int64)
    return approx


def _figures(columns: dict[str, Any], flops: np.ndarray, clock: float, peak: float, traced: int) -> None:
    """Adds total_cycles, step_pct, flops, flops_per_s and peak_pct to ``columns`` (cycle columns in it)."""
    total = sum(columns[c] for c in CYCLE_COLUMNS)
    columns["total_cycles"] = total
    with np.errstate(divide="ignore", invalid="ignore"):
        columns["step_pct"] = 100.0 * total / traced if traced > 0 else np.full(len(total), np.nan)
        columns["flops"] = flops
        seconds = columns["compute_cycles"] / clock if clock > 0 else np.full(len(total), np.nan)
        rate = np.where(seconds > 0, flops / np.where(seconds > 0, seconds, 1.0), np.nan)
        columns["flops_per_s"] = rate
        columns["peak_pct"] = 100.0 * rate / peak


def costs(ops: Columns, programs: Columns | StepPieces, variables: Columns, trace: Aggregates,
          target: dict[str, Any], run: dict[str, Any], imported: bool = False) -> OpCosts:
    """The per-op table (``OpCosts``): each op pass's cycles by phase over the run, FLOPs, rate and memory.
    ``programs`` may be ``StepPieces`` where the profile is imported (its steps are read a piece at a time)."""
    agg = aggregates(trace)
    traced = int(agg.end_cycle - agg.start_cycle)
    clock = float(target.get("clock_hz") or 0.0)
    peak, precision = peak_flops_per_s(target, run)
    if imported or not len(ops):
        steps = programs if isinstance(programs, StepPieces) else StepPieces.of(programs, IMPORTED_STEPS)
        by_op, step_row, known = _imported_ops(steps, trace, clock, traced)
        return OpCosts(by_op, step_row, True, peak, str(run.get("precision", "-")), traced, known, 0)
    assert isinstance(programs, Columns), "an IPU profile's ops are joined to its whole programs table"
    ex, total, phase = _step_cycles(programs, trace)

    op_id = ops["op_id"].astype(np.int64)
    n = len(op_id)
    n_pass = len(PASSES) + 1
    step_op = programs["op_id"].astype(np.int64)
    width = int(max(op_id.max(initial=-1), step_op.max(initial=-1))) + 1
    # the ops row of each (op_id, pass): a dense grid, -1 where ops has none
    grid = np.full(width * n_pass, -1, np.int64)
    grid[op_id * n_pass + ops.codes_in("pass", PASSES)] = np.arange(n)
    keys = np.maximum(step_op, 0) * n_pass + programs.codes_in("pass", PASSES)
    step_row = np.where(step_op >= 0, grid[keys], -1)
    inside = step_row >= 0

    columns: dict[str, Any] = {"op_id": op_id, "name": ops.strings("name"), "kind": ops.strings("kind"),
                               "block": ops.strings("block")}
    columns["layer"] = layer_of(columns["name"])
    columns["stage"] = ops["stage"].astype(np.int64)
    columns["ipu"] = ops["ipu"].astype(np.int64)
    columns["pass"] = ops.strings("pass")
    columns["steps"] = sum_by(step_row[inside], None, n)
    runs = np.zeros(n, np.int64)  # an op pass ran as often as the most-run of its steps (summary.total_flops)
    np.maximum.at(runs, step_row[inside], ex[inside])
    columns["executions"] = runs
    columns.update(_sums(step_row, total, phase, n))
    _figures(columns, _products(ops["flops"].astype(np.int64), runs), clock, peak, traced)
    count, nbytes, always = _variable_sums(variables, width)
    columns.update(variables=count[op_id], variable_bytes=nbytes[op_id], always_live_bytes=always[op_id])
    order = np.lexsort((ops.codes_in("pass", PASSES), op_id, -columns["total_cycles"]))
    by_op = Table({c: np.asarray(columns[c])[order] for c in OP_COLUMNS})
    where = np.empty(n, np.int64)
    where[order] = np.arange(n)
    step_row = np.where(inside, where[np.maximum(step_row, 0)], -1)
    return OpCosts(by_op, step_row, False, peak, precision, traced, *_op_and_other(step_row, total, phase))


def _op_and_other(step_row: np.ndarray, total: np.ndarray, phase: np.ndarray) -> tuple[int, int]:
    """The cycles over the run of the program steps of an op (``step_row`` >= 0) and of none, of a known type."""
    known = phase >= 0
    return int(total[known & (step_row >= 0)].sum()), int(total[known & (step_row < 0)].sum())


def _variable_sums(variables: Columns, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per op_id (``width`` of them): its variables, their bytes and their always-live bytes."""
    owner = variables["op_id"].astype(np.int64)
    mine = (owner >= 0) & (owner < width)
    owner, nbytes = owner[mine], variables["bytes"].astype(np.int64)[mine]
    always = variables["always_live"].astype(bool)[mine]
    return (sum_by(owner, None, width), sum_by(owner, nbytes, width),
            sum_by(owner[always], nbytes[always], width))


def _imported_ops(programs: StepPieces, trace: Aggregates, clock: float,
                  traced: int) -> tuple[Table, np.ndarray, int]:
    """An imported profile's rows: its program steps grouped by (name, rank, pass); also each step's row and the
    cycles over the run of its steps of a known type (each is a step of a row). A piece at a time (``StepPieces``),
    in two passes, the first for the groups' keys: what grouping holds is a piece, the groups' figures and each
    step's row, not a column of every step for each figure nor the whole table (a 10 GB import's 835,200 steps:
    about 70 MiB of figures, 35 MiB of table)."""
    n_ipu, n_pass, whole = max(programs.ipus, 1), len(PASSES) + 1, programs.rows

    # each step's (name, ipu, pass) as one number, made in place, in the first pass (a name's number: ``WordNumbers``,
    # over every piece); its row among the groups (their keys sorted) in the second
    step_row = np.empty(whole, np.int64)
    names = WordNumbers()
    distinct = [np.zeros(0, np.int64)]
    for a, part in programs.pieces():
        key = step_row[a:a + len(part)]
        np.take(names.of(part, "name"), part.codes("name"), out=key)
        key *= n_ipu
        key += part["ipu"]
        key *= n_pass
        key += part.codes_in("pass", PASSES)
        distinct.append(np.unique(key))
    groups = np.unique(np.concatenate(distinct))
    del distinct, names
    n = len(groups)
    first = np.full(n, whole, np.int64)
    lo, hi = np.full(n, np.iinfo(np.int64).max), np.full(n, np.iinfo(np.int64).min)
    runs, steps = np.zeros(n, np.int64), np.zeros(n, np.int64)
    sums = {column: np.zeros(n, np.int64) for column in CYCLE_COLUMNS}
    shown = {column: np.empty(n, dtype=object) for column in ("name", "type", "pass")}
    ipu = np.zeros(n, np.int64)
    known = 0
    for a, part in programs.pieces():
        b = a + len(part)
        row = step_row[a:b]
        row[:] = np.searchsorted(groups, row)
        np.minimum.at(first, row, np.arange(a, b))
        np.minimum.at(lo, row, part["stage"])
        np.maximum.at(hi, row, part["stage"])
        ex, total, phase = _step_cycles(part, trace)
        runs += sum_by(row, ex, n)  # each imported step is one span of the trace: the group ran once per execution
        steps += sum_by(row, None, n)
        for column, cycles in _sums(row, total, phase, n).items():
            sums[column] += cycles
        known += int(total[phase >= 0].sum())
        # a group's words are its first step's: the groups first met in this piece (pieces come in row order)
        met = np.flatnonzero((first >= a) & (first < b))
        for column, values in shown.items():
            values[met] = part.strings(column, first[met] - a)
        ipu[met] = part["ipu"][first[met] - a]
    columns: dict[str, Any] = {"op_id": np.full(n, -1, np.int64), "name": shown["name"], "kind": shown["type"],
                               "block": np.full(n, "", dtype=object)}
    columns["layer"] = layer_of(columns["name"])
    columns.update(stage=np.where(lo == hi, lo, -1), ipu=ipu, **{"pass": shown["pass"]})
    columns.update(steps=steps, executions=runs, **sums)
    nan = np.full(n, np.nan)
    _figures(columns, nan, clock, np.nan, traced)
    columns.update(variables=nan, variable_bytes=nan, always_live_bytes=nan)
    order = np.lexsort((first, -columns["total_cycles"]))
    where = np.empty(n, np.int64)
    where[order] = np.arange(n)
    np.take(where, step_row, out=step_row)
    return Table({c: np.asarray(columns[c])[order] for c in OP_COLUMNS}), step_row, known


def group(c: OpCosts, variables: Columns, by: str, clock_hz: float) -> Table:
    """``by_op`` summed per block or per layer (GROUP_COLUMNS[by]), costliest first.

    ``stage`` and ``ipu`` are the group's when all its ops share one, else -1; ``ops`` counts distinct
    op_ids (imported: distinct names); the variables of each op count once, not once per pass.
    """
    t = c.by_op
    words, code = sorted_words(t[by])
    n = len(words)
    columns: dict[str, Any] = {by: words.astype(object)}
    for name in ("stage", "ipu"):
        values = np.asarray(t[name], np.int64)
        lo, hi = np.full(n, np.iinfo(np.int64).max), np.full(n, np.iinfo(np.int64).min)
        np.minimum.at(lo, code, values)
        np.maximum.at(hi, code, values)
        columns[name] = np.where(lo == hi, lo, -1)
    op_key = np.asarray(t["op_id"], np.int64) if not c.imported else sorted_words(t["name"])[1]
    distinct = np.unique(code * (int(op_key.max(initial=0)) + 1) + op_key)
    columns["ops"] = sum_by(distinct // (int(op_key.max(initial=0)) + 1), None, n)
    columns["steps"] = sum_by(code, np.asarray(t["steps"]), n)
    for name in CYCLE_COLUMNS:
        columns[name] = sum_by(code, np.asarray(t[name]), n)
    flops = np.asarray(t["flops"])
    summed = np.bincount(code, weights=flops.astype(np.float64), minlength=n)
    if c.imported:
        flops_sum = np.full(n, np.nan)
    elif flops.dtype.kind == "i" and summed.max(initial=0) < 2.0**62:
        flops_sum = np.zeros(n, np.int64)
        np.add.at(flops_sum, code, flops)
    else:
        flops_sum = summed
    _figures(columns, flops_sum, clock_hz, c.peak_flops_per_s, c.traced_cycles)
    if c.imported:
        nan = np.full(n, np.nan)
        columns.update(variables=nan, variable_bytes=nan, always_live_bytes=nan)
    else:
        # each op's variables once: the group of its first row
        op_id = np.asarray(t["op_id"], np.int64)
        width = int(op_id.max(initial=-1)) + 1
        op_group = np.full(width, -1, np.int64)
        op_group[op_id[::-1]] = code[::-1]
        count, nbytes, always = _variable_sums(variables, width)
        has = op_group >= 0
        columns["variables"] = sum_by(op_group[has], count[has], n)
        columns["variable_bytes"] = sum_by(op_group[has], nbytes[has], n)
        columns["always_live_bytes"] = sum_by(op_group[has], always[has], n)
    order = np.lexsort((np.arange(n), -columns["total_cycles"]))
    return Table({name: np.asarray(columns[name])[order] for name in GROUP_COLUMNS[by]})


@dataclass(frozen=True)
class OperationFigures:
    """The section's key figures: IPU-cycles in ops, in steps of no op and idle; FLOPs against the peak."""

    op_passes: int
    traced_cycles: int
    ipu_cycles: int
    op_cycles: int
    op_pct: float
    other_cycles: int
    idle_cycles: int
    total_flops: float
    precision: str
    peak_flops_per_s_per_ipu: float
    not_recorded: str


def figures(c: OpCosts, trace: Aggregates) -> OperationFigures:
    """``ipu_cycles``: the trace's cycles summed over IPUs (idle included); ``op_pct`` = 100 x op_cycles / ipu_cycles;
    ``other_cycles``: steps of no op (host calls, stage-to-stage copies, pipeline syncs)."""
    agg = aggregates(trace)
    ipu_cycles = int(agg.cube.cells.sum())
    op_cycles, other = c.op_cycles, c.other_cycles
    idle = int(agg.cube.cells[..., PHASE["idle"]].sum())
    flops = np.asarray(c.by_op["flops"])
    total_flops = float("nan") if c.imported else _int_sum(flops)
    return OperationFigures(
        op_passes=len(c.by_op), traced_cycles=c.traced_cycles, ipu_cycles=ipu_cycles, op_cycles=op_cycles,
        op_pct=100.0 * op_cycles / ipu_cycles if ipu_cycles else float("nan"), other_cycles=other, idle_cycles=idle,
        total_flops=total_flops, precision=c.precision, peak_flops_per_s_per_ipu=c.peak_flops_per_s,
        not_recorded=IMPORTED_NOT_RECORDED if c.imported else NOT_RECORDED)


def _int_sum(values: np.ndarray) -> float | int:
    """An exact sum of int64 values (as a Python int), a float sum of floats."""
    if values.dtype.kind == "f":
        return float(values.sum())
    high, low = values >> 32, values & 0xFFFFFFFF
    return (int(high.sum()) << 32) + int(low.sum())


def variables_of(c: OpCosts, variables: Columns, row: int) -> Table:
    """The variables of ``by_op`` row ``row`` (``variables.op_id``), largest first: VARIABLE_COLUMNS."""
    op = int(c.by_op["op_id"][row]) if 0 <= row < len(c.by_op) else -1
    rows = np.flatnonzero(variables["op_id"].astype(np.int64) == op) if op >= 0 else np.zeros(0, np.int64)
    return _variable_rows(variables, rows)


def _variable_rows(variables: Columns, rows: np.ndarray) -> Table:
    """``variables`` rows ``rows``, largest first (VARIABLE_COLUMNS)."""
    rows = rows[np.lexsort((rows, -variables["bytes"][rows].astype(np.int64)))]
    out: dict[str, Any] = {}
    for name in VARIABLE_COLUMNS:
        out[name] = variables.strings(name, rows) if name in ("name", "category") else variables[name][rows]
    return Table(out)


def steps_of(c: OpCosts, by: str, value: Any) -> np.ndarray:
    """The programs rows of one ``by_op`` row (``by`` "op", ``value`` its row) or of a block or layer (its name)."""
    if by == "op":
        return np.flatnonzero(c.step_row == int(value))
    members = np.flatnonzero(np.asarray(c.by_op[by], dtype=object).astype(str) == str(value))
    return np.flatnonzero(np.isin(c.step_row, members))


WINDOW_COLUMNS = ("run", "iteration", "ipu", "step", "phase", "start_cycle", "end_cycle")


def iteration_rows(profile: Any, agg: Aggregates) -> dict[str, np.ndarray]:
    """The trace rows of one iteration, the middle one of the first run traced: ``WINDOW_COLUMNS`` as arrays
    (phase as codes into PHASES), read from the row groups whose footer statistics can hold it.

    Every iteration runs the same program steps, so one shows where an op runs; only the row
    groups of that iteration are decoded (a row group or two of a 50M-row trace).
    """
    from popvision_py.analysis.trace.scan import arrays
    from popvision_py.format.values import statistics

    metadata = profile.metadata("trace")
    groups = list(range(metadata.num_row_groups))
    stated = [[statistics(metadata, g, c) for c in ("run", "iteration")] for g in groups]
    trusted = profile.footer_verified("trace") and all(s is not None for row in stated for s in row)
    run = min(s[0][0] for s in stated) if trusted and stated else None
    if trusted and run is not None:
        iteration = max(agg.iterations_per_run, 1) // 2
        groups = [g for g, (r, i) in zip(groups, stated) if r[0] <= run <= r[1] and i[0] <= iteration <= i[1]]
    parts = []
    for batch in profile.iter_batches("trace", WINDOW_COLUMNS, row_groups=groups):
        t = arrays(batch, WINDOW_COLUMNS)
        if run is None:  # statistics not to be trusted: the first run and its middle iteration from the rows
            run, iteration = int(t["run"].min()), max(agg.iterations_per_run, 1) // 2
        keep = (t["run"] == run) & (t["iteration"] == iteration)
        parts.append({c: t[c][keep] for c in WINDOW_COLUMNS})
    if not parts:
        return {c: np.zeros(0, np.int64) for c in WINDOW_COLUMNS}
    return {c: np.concatenate([p[c] for p in parts]) for c in WINDOW_COLUMNS}


def marked(rows: dict[str, np.ndarray], programs: Columns, chosen: np.ndarray) -> np.ndarray:
    """Which of ``rows`` (``iteration_rows``) execute one of the programs rows ``chosen``."""
    ipu, step = programs["ipu"].astype(np.int64), programs["step"].astype(np.int64)
    if not len(rows["ipu"]) or not len(ipu):
        return np.zeros(len(rows["ipu"]), bool)
    grid = np.zeros((int(max(ipu.max(), rows["ipu"].max())) + 1, int(max(step.max(), rows["step"].max())) + 2), bool)
    grid[ipu[chosen], step[chosen] + 1] = True
    return grid[rows["ipu"].astype(np.int64), rows["step"].astype(np.int64) + 1]  # idle rows (step -1): column 0


class OperationsReport:
    """``Report.operations``: the Operations section (``by_op``, ``by_block``, ``by_layer``, ``figures``),
    an op's variables and its program steps. ``report`` is the ``analysis.report.Report`` (its tables
    and its trace fold, each read once)."""

    def __init__(self, report: Any) -> None:
        self._r = report

    def _memo(self, key: Any, compute: Any) -> Any:
        return self._r.memo(("operations", key), compute)

    def costs(self) -> OpCosts:
        r = self._r
        # an import's steps are read a piece at a time unless the whole table is (being) decoded for another section
        return self._memo("costs", lambda: costs(
            r.columns("ops"), r.step_pieces(IMPORTED_COLUMNS, IMPORTED_STEPS) if r.imported
            else r.columns("programs"), r.columns("variables"), r.trace_summary(), r.target, r.run, r.imported))

    def by_op(self) -> Any:
        """OP_COLUMNS, one row per op pass, costliest first (a DataFrame)."""
        return self._by_op().frame()

    def _by_op(self) -> Table:
        return self.costs().by_op

    def by_block(self) -> Any:
        return self._by_block().frame()

    def _by_block(self) -> Table:
        return self._memo("block", lambda: group(self.costs(), self._r.columns("variables"), "block",
                                                 float(self._r.target.get("clock_hz") or 0.0)))

    def by_layer(self) -> Any:
        return self._by_layer().frame()

    def _by_layer(self) -> Table:
        return self._memo("layer", lambda: group(self.costs(), self._r.columns("variables"), "layer",
                                                 float(self._r.target.get("clock_hz") or 0.0)))

    def figures(self) -> OperationFigures:
        r = self._r
        return self._memo("figures", lambda: figures(self.costs(), r.trace_summary()))

    def variables(self, row: int) -> Any:
        """The variables of ``by_op()`` row ``row``, largest first (VARIABLE_COLUMNS)."""
        return variables_of(self.costs(), self._r.columns("variables"), row).frame()

    def window(self) -> dict[str, np.ndarray]:
        """The trace rows of one iteration (``iteration_rows``), read once."""
        return self._memo("window", lambda: iteration_rows(self._r.profile, self._r.trace_summary()))

    def window_index(self) -> Any:
        """``window()`` as a ``trace.TimelineIndex``, for the execution trace's levels of detail."""
        def compute() -> Any:
            from popvision_py.analysis.trace.timeline import TimelineIndex
            from popvision_py.analysis.trace.rows import timeline_arrays

            rows = self.window()
            columns = {"ipu": rows["ipu"], "phase": rows["phase"], "start_cycle": rows["start_cycle"],
                       "end_cycle": rows["end_cycle"], "step": rows["step"]}
            return TimelineIndex.from_ipus(timeline_arrays([columns]))

        return self._memo("window_index", compute)

    def executions_in_window(self, by: str, value: Any) -> Any:
        """``[ipu, step, start_cycle, end_cycle]`` of the window's rows that run a ``by_op`` row (``by="op"``)
        or a block or layer (its name), in trace order."""
        rows = self.window()
        keep = marked(rows, self._r.columns("programs"), steps_of(self.costs(), by, value))
        return Table({c: rows[c][keep].astype(np.int64) for c in ("ipu", "step", "start_cycle", "end_cycle")}).frame()

    def group_variables(self, by: str, value: Any) -> Any:
        """The variables of a block's or layer's ops (``by`` "block" or "layer"), largest first (VARIABLE_COLUMNS)."""
        c = self.costs()
        members = np.asarray(c.by_op[by], dtype=object).astype(str) == str(value)
        ops = np.unique(np.asarray(c.by_op["op_id"], np.int64)[members])
        variables = self._r.columns("variables")
        rows = np.flatnonzero(np.isin(variables["op_id"].astype(np.int64), ops[ops >= 0]))
        return _variable_rows(variables, rows).frame()

    def steps(self, by: str, value: Any) -> Any:
        """``[ipu, step]`` of the program steps of a ``by_op`` row (``by="op"``) or a block or layer (its name)."""
        rows = steps_of(self.costs(), by, value)
        programs = self._r.columns("programs")
        return Table({"ipu": programs["ipu"][rows].astype(np.int64),
                      "step": programs["step"][rows].astype(np.int64)}).frame()
