"""Pipeline stages: time per stage and pass, busy and idle, imbalance, bubble, balanced time, best split.

Inputs: the trace (its ``Aggregates``, folded by ``trace.scan``; gantt: its bars), ``programs``, ``ops``,
``variables``, the memory per IPU and the manifest. Formulas in docs/reports.md, "Stages". Predicted
times use the synchronous pipeline
model (``pipeline_cycles``) only for the *difference* between two splits, added to the measured
step time, so overheads the model leaves out (syncs, the update, host calls) stay as measured.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from popvision_py.analysis.trace import retime
from popvision_py.analysis.common.tables import PASS, PASSES, PHASE, Columns, Table, frame_of, lookup, sum_by
from popvision_py.analysis.imported.ranks import is_imported
from popvision_py.analysis.trace.scan import Aggregates, aggregates, iterations_traced
from popvision_py.format.schedule import run_schedule

SUMMARY_COLUMNS = ["stage", "ipu", "blocks", "pass", "per", "micro_batches", "cycles_per_micro_batch", "busy_cycles",
                   "idle_cycles", "total_cycles", "utilisation_pct"]
GANTT_COLUMNS = ["ipu", "stage", "pass", "iteration", "micro_batch", "start_cycle", "end_cycle"]
SPLIT_COLUMNS = ["stage", "ipu", "blocks", "cycles_per_micro_batch", "memory_bytes", "worst_tile_bytes", "fits"]
STAGE_PASSES = ("forward", "backward", "update")
PER_STEP_PASSES = ("update",)  # run once per step (iteration), not once per micro-batch


@dataclass(frozen=True)
class StageFigures:
    """Key pipeline figures; see docs/reports.md for each formula."""

    num_stages: int
    micro_batches: int
    bottleneck_stage: int
    imbalance: float
    bubble_pct: float
    ideal_bubble_pct: float
    step_cycles: float
    balanced_step_cycles: float
    balance_gain_pct: float


@dataclass(frozen=True)
class BestSplit:
    """The best contiguous split of the blocks into the same number of stages.

    ``stages`` is the split as a DataFrame (SPLIT_COLUMNS); ``table`` the same as a ``Table``.
    """

    table: Table
    current_step_cycles: float
    predicted_step_cycles: float
    gain_pct: float

    @property
    def stages(self) -> pd.DataFrame:
        return self.table.frame()


class StageList:
    """The run's stages as arrays: ``stage`` and ``ipu`` (int64) and ``blocks`` (a list of names per stage)."""

    def __init__(self, stage: list[int], ipu: list[int], blocks: list[list[str]]) -> None:
        self.columns = {"stage": np.array(stage, np.int64), "ipu": np.array(ipu, np.int64), "blocks": blocks}

    def __len__(self) -> int:
        return len(self.columns["stage"])

    def __getitem__(self, name: str) -> Any:
        return self.columns[name]

    def frame(self) -> pd.DataFrame:
        blocks = np.empty(len(self), object)
        for k, b in enumerate(self.columns["blocks"]):
            blocks[k] = b
        return frame_of({"stage": self["stage"], "ipu": self["ipu"], "blocks": blocks}, ["stage", "ipu", "blocks"])


def stage_rows(run: dict[str, Any], trace: Aggregates | None = None) -> StageList:
    """``stage_list`` as arrays (no DataFrame): sorted by stage."""
    rows = []
    for entry in run.get("stages") or []:
        try:
            rows.append((int(entry["stage"]), int(entry.get("ipu", entry["stage"])),
                         [str(b) for b in entry.get("blocks", [])]))
        except (KeyError, TypeError, ValueError):
            continue
    known = {r[0] for r in rows}
    if trace is not None and len(trace):
        for ipu, stage in zip(*aggregates(trace).cube.present()):
            stage, ipu = int(stage), int(ipu)
            if stage not in known:
                rows.append((stage, ipu, []))
                known.add(stage)
    rows.sort(key=lambda r: r[0])  # stable, as the frame's sort was
    return StageList([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


def stage_list(run: dict[str, Any], trace: Aggregates | None = None) -> pd.DataFrame:
    """The run's stages: ``[stage, ipu, blocks]`` (blocks a list), from the manifest, plus any stage only
    the trace has."""
    return stage_rows(run, trace).frame()


def stage_pass_busy(trace: Aggregates, num_stages: int) -> np.ndarray:
    """Busy cycles per stage and pass: array [stage, pass code] of trace rows with that stage (idle excluded)."""
    busy = aggregates(trace).cube.by_stage()[1:]  # [stage, pass, phase]
    busy = busy.sum(axis=2) - busy[:, :, PHASE["idle"]]
    size = max(num_stages, busy.shape[0])
    out = np.zeros((size, len(PASSES) + 1), np.int64)
    out[: busy.shape[0]] = busy
    return out


def stage_micro_batches(trace: Aggregates, num_stages: int) -> np.ndarray:
    """Micro-batches each stage processed: distinct (run, iteration, micro_batch) among its rows."""
    mbs = aggregates(trace).micro_batches
    out = np.zeros(max(num_stages, len(mbs)), np.int64)
    out[: len(mbs)] = mbs
    return out


def pipeline_cycles(fwd: np.ndarray, bwd: np.ndarray, micro_batches: int, pipelined: bool, training: bool,
                    ipus: Sequence[int] | None = None, positions: Sequence[int] | None = None) -> float:
    """Cycles the synchronous model of the run's schedule takes for ``micro_batches`` with per-stage fwd/bwd cycles.

    Pipelined (the profile records whether the stages ran as a pipeline: ``format.schedule``):
    cycle t runs on pipeline position p the forward of micro-batch t - p and (training) the backward
    of micro-batch t - (2P - 2 - p); each cycle lasts as long as its busiest IPU. ``ipus``, each
    stage's IPU (by default one each), and ``positions``, each stage's pipeline position as the
    profile records it (by default one each): stages sharing a position run one after another in
    its cycle, and positions on one IPU (a last stage that returns to the first IPU) run on that
    IPU in the same cycle. Sequential (sharded, or phased stages sharing IPUs): stages one
    after another, ``M * sum(fwd + bwd)``.
    """
    fwd, bwd = np.asarray(fwd, float), np.asarray(bwd, float)
    S, M = len(fwd), int(micro_batches)
    if S == 0 or M <= 0:
        return 0.0
    if not pipelined:
        return float(M * (fwd.sum() + (bwd.sum() if training else 0.0)))
    ipus = np.arange(S) if ipus is None else np.asarray(ipus, dtype=np.int64)
    ranks = np.arange(S) if positions is None else np.asarray(positions, dtype=np.int64)
    P = int(ranks.max()) + 1
    fwd, bwd = np.bincount(ranks, fwd, P), np.bincount(ranks, bwd, P)
    cycles = M + (2 * P - 2 if training else P - 1)
    t = np.arange(cycles)[:, None]
    p = np.arange(P)[None, :]
    work = np.where((t - p >= 0) & (t - p < M), fwd[None, :], 0.0)
    if training:
        back = t - (2 * P - 2 - p)
        work = work + np.where((back >= 0) & (back < M), bwd[None, :], 0.0)
    position_ipu = ipus[np.searchsorted(ranks, np.arange(P))]
    if len(np.unique(position_ipu)) < P:
        _, owner = np.unique(position_ipu, return_inverse=True)
        work = work @ np.eye(owner.max() + 1)[owner]  # cycles x IPUs: each IPU's positions summed
    return float(work.max(axis=1).sum())


@dataclass(frozen=True)
class _Costs:
    stages: StageList
    busy: np.ndarray  # [stage, pass code]
    micro_batches: np.ndarray  # per stage
    fwd: np.ndarray  # cycles per micro-batch per stage
    bwd: np.ndarray
    total_cycles: int
    iterations: int
    training: bool
    pipelined: bool  # the schedule the run used: a pipeline, or stages one after another
    positions: list[int]  # each stage's pipeline position (the profile's record)
    ipus: int  # distinct IPUs the stages run on
    unit_micro_batches: int  # micro-batches in one pipeline (an iteration in training, the run in inference)
    unit_iterations: int  # iterations one pipeline covers
    supersteps: retime.Supersteps | None = None  # the run's supersteps (None: a trace without slots)
    idle_cycles: int = 0  # idle cycles of the stages' IPUs over the trace
    # run in supersteps (emulated); an imported run's ranks do not wait for each other at every idle stretch:
    # it has no supersteps to re-time, and its what-ifs are the critical path's (``pipeline.replay``)
    bulk_synchronous: bool = True

    @functools.cached_property
    def balance(self) -> _Balance:
        """``balanced``'s answer, worked out once (the figures and the ideal bubble both ask it)."""
        return _balanced(self)


def costs(trace: Aggregates, run: dict[str, Any]) -> _Costs:
    """Per-stage cycles per micro-batch and the counts every stage figure uses."""
    stages = stage_rows(run, trace)
    n = len(stages)
    busy = stage_pass_busy(trace, int(stages["stage"].max()) + 1 if n else 0)
    mbs = stage_micro_batches(trace, busy.shape[0])
    idx = stages["stage"]
    m = mbs[idx] if n else np.zeros(0, np.int64)
    safe = np.where(m > 0, m, 1)
    fwd = busy[idx, PASS["forward"]] / safe if n else np.zeros(0)
    bwd = busy[idx, PASS["backward"]] / safe if n else np.zeros(0)
    agg = aggregates(trace)
    lo, hi = agg.start_cycle, agg.end_cycle
    iterations = iterations_traced(trace, run)
    training = str(run.get("mode", "training")) != "inference"
    total_mb = int(m.max()) if n else 0
    if training:
        unit_mb, unit_it = int(round(total_mb / max(iterations, 1))), 1
    else:
        unit_mb, unit_it = total_mb, max(iterations, 1)
    pipelined, positions = run_schedule(run).of_stages(stages["ipu"].tolist())
    steps = None
    bulk_synchronous = not is_imported(run)
    if n and bulk_synchronous:  # a long trace's are cut as it is folded (trace.steps), else here from its runs of rows
        steps = agg.supersteps if agg.supersteps is not None else (
            retime.supersteps(agg.slots, lo, hi) if agg.slots is not None else None)
    ipus = np.unique(stages["ipu"])
    idle_by_ipu = phase_by_ipu(trace, "idle")
    idle = int(idle_by_ipu[ipus[ipus < len(idle_by_ipu)]].sum())
    return _Costs(stages, busy, mbs, fwd, bwd, hi - lo, iterations, training, pipelined, positions,
                  len(ipus), unit_mb, unit_it, steps, idle, bulk_synchronous)


def phase_by_ipu(trace: Aggregates, phase: str) -> np.ndarray:
    """Cycles of one phase per IPU (index = IPU) from the trace's aggregates."""
    return aggregates(trace).cube.by_ipu()[..., PHASE[phase]].sum(axis=1)


def _model_step(c: _Costs, fwd: np.ndarray, bwd: np.ndarray) -> float:
    return (pipeline_cycles(fwd, bwd, c.unit_micro_batches, c.pipelined, c.training, c.stages["ipu"].tolist(),
                            c.positions)
            / c.unit_iterations)


@dataclass(frozen=True)
class _Balance:
    step_cycles: float  # the balanced run's time per step
    fwd: np.ndarray  # per stage: cycles per micro-batch once balanced
    bwd: np.ndarray


def balanced(c: _Costs) -> _Balance:
    """The run's own supersteps re-timed with the stages' IPUs' micro-batch work made even
    (``retime.balance``): never longer than the run, since the run as measured is one of the
    re-timings tried. Worked out once per ``_Costs``."""
    return c.balance


def _balanced(c: _Costs) -> _Balance:
    step = c.total_cycles / c.iterations if c.iterations else float("nan")
    s = c.supersteps
    if s is None or not len(s.cell_cycles) or not c.iterations:
        return _Balance(step, c.fwd, c.bwd)
    best = retime.balance(s, c.stages["ipu"])
    if best.total_cycles >= c.total_cycles * (1 - 1e-12):  # no gain beyond the re-timing's rounding: the run
        return _Balance(step, c.fwd, c.bwd)
    n_stage = int(c.stages["stage"].max()) + 1
    before, after = s.stage_work(n_stage), s.stage_work(n_stage, best.scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(before > 0, after / np.where(before > 0, before, 1), 1.0)[c.stages["stage"]]
    return _Balance(best.total_cycles / c.iterations, c.fwd * ratio[:, 0], c.bwd * ratio[:, 1])


def ideal_bubble_pct(c: _Costs, micro_batches: int | None = None) -> float:
    """The idle share of the stages' IPUs in the balanced run (``balanced``), with ``micro_batches``
    per pipeline (default: the run's).

    With the run's micro-batches: ``100 x (1 - busy / (K x balanced length))``, busy being the
    IPUs' measured non-idle cycles (balancing moves work, it neither adds nor removes any), so it
    is at most the measured bubble. With another count, the pipeline model (``pipeline_cycles``)
    gives the *difference* the extra micro-batches make, to the balanced run's time and busy work.
    """
    n, m0 = len(c.stages), c.unit_micro_batches
    m = m0 if micro_batches is None else int(micro_batches)
    if n == 0 or m <= 0 or m0 <= 0 or not c.total_cycles or not c.iterations:
        return float("nan")
    k = max(c.ipus, 1)
    b = balanced(c)
    busy = (k * c.total_cycles - c.idle_cycles) / c.iterations  # per step
    step = b.step_cycles
    if m != m0:
        ipus = c.stages["ipu"].tolist()
        extra = (pipeline_cycles(b.fwd, b.bwd, m, c.pipelined, c.training, ipus, c.positions)
                 - pipeline_cycles(b.fwd, b.bwd, m0, c.pipelined, c.training, ipus, c.positions))
        step += extra / c.unit_iterations
        busy += (m - m0) * float(b.fwd.sum() + (b.bwd.sum() if c.training else 0.0)) / c.unit_iterations
    return 100.0 * (1.0 - busy / (k * step)) if step > 0 else float("nan")


def summary(c: _Costs, trace: Aggregates) -> Table:
    """Per stage and pass, then an ``all`` row per stage: SUMMARY_COLUMNS sorted by stage, pass order."""
    idle = phase_by_ipu(trace, "idle")
    # syncs outside any stage (the superstep syncs); a stage's own syncs are inside its busy time
    sync = aggregates(trace).cube.of_stage(0)[:, :, PHASE["sync"]].sum(axis=1)
    at = lambda a, i: int(a[i]) if 0 <= i < len(a) else 0  # noqa: E731
    rows = []
    for s, ipu, blocks in zip(c.stages["stage"].tolist(), c.stages["ipu"].tolist(), c.stages["blocks"]):
        m = at(c.micro_batches, s)
        ipu_idle = at(idle, ipu)
        blocks = ",".join(blocks)
        total_busy = per_step = 0
        for p in STAGE_PASSES:
            b = int(c.busy[s, PASS[p]]) if s < c.busy.shape[0] else 0
            total_busy += b
            if b == 0 and p != "forward":
                continue
            if p in PER_STEP_PASSES:  # once per step: its cycles per step, not spread over the micro-batches;
                per_step += b        # its count is the steps it ran (``per`` says which the count is)
                rows.append((s, ipu, blocks, p, "step", c.iterations, b / c.iterations if c.iterations else np.nan, b,
                             ipu_idle, c.total_cycles))
            else:
                rows.append((s, ipu, blocks, p, "micro_batch", m, b / m if m else np.nan, b, ipu_idle, c.total_cycles))
        other = int(c.busy[s].sum()) - total_busy if s < c.busy.shape[0] else 0
        # the all row: the stage's busy cycles; per micro-batch, the work that runs per micro-batch
        rows.append((s, ipu, blocks, "all", "micro_batch", m, (total_busy + other - per_step) / m if m else np.nan,
                     total_busy + other, ipu_idle + at(sync, ipu), c.total_cycles))
    # one typed array per column (what a frame of these tuples infers), the utilisation computed on them
    if not rows:
        return Table({c: np.zeros(0, object if c in ("blocks", "pass", "per") else np.float64 if c in (
            "cycles_per_micro_batch", "utilisation_pct") else np.int64) for c in SUMMARY_COLUMNS})
    cols = list(zip(*rows))
    busy = np.array(cols[7], np.int64)
    total = np.array(cols[9], np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.where(total > 0, 100.0 * busy / np.where(total > 0, total, 1), np.nan)
    return Table({
        "stage": np.array(cols[0], np.int64), "ipu": np.array(cols[1], np.int64), "blocks": np.array(cols[2], object),
        "pass": np.array(cols[3], object), "per": np.array(cols[4], object),
        "micro_batches": np.array(cols[5], np.int64),
        "cycles_per_micro_batch": np.array(cols[6], np.float64), "busy_cycles": busy,
        "idle_cycles": np.array(cols[8], np.int64), "total_cycles": total, "utilisation_pct": util,
    })


def figures(c: _Costs, trace: Aggregates) -> StageFigures:
    """Imbalance, bubble, bottleneck and the balanced time: see docs/reports.md."""
    n = len(c.stages)
    step = c.total_cycles / c.iterations if c.iterations else float("nan")
    if n == 0 or c.unit_micro_batches == 0:
        return StageFigures(n, c.unit_micro_batches, -1, float("nan"), float("nan"), float("nan"), step, step, 0.0)
    per_mb = c.fwd + c.bwd
    bottleneck = int(c.stages["stage"][int(np.argmax(per_mb))])
    imbalance = float(per_mb.max() / per_mb.mean()) if per_mb.mean() > 0 else float("nan")
    bubble = 100.0 * c.idle_cycles / (c.ipus * c.total_cycles) if c.total_cycles else float("nan")
    ideal = ideal_bubble_pct(c)
    if c.bulk_synchronous:
        # the re-timing tries the run as it is: never slower than the step; the min guards rounding only
        even = min(balanced(c).step_cycles, step)
        gain = 100.0 * (step - even) / step if step else 0.0
    else:  # no supersteps to re-time: the critical path re-times an imported run's stages
        even = gain = float("nan")
    return StageFigures(n, c.unit_micro_batches, bottleneck, imbalance, float(bubble), float(ideal), float(step),
                        float(even), float(gain))


BLOCK_COLUMNS = ["block", "stage", "fwd_cycles", "bwd_cycles", "memory_bytes"]


def block_costs(c: _Costs, programs: Columns, ops: Columns, trace: Aggregates, variables: Columns) -> Table:
    """Per block, in pipeline order: BLOCK_COLUMNS ``[block, stage, fwd_cycles, bwd_cycles, memory_bytes]``.

    A block's cycles per micro-batch = sum over its ops' steps of cycles x executions, divided by
    its stage's micro-batches; its memory = always-live bytes of the variables its ops own.
    Ops, steps and blocks are small dense ids, so every join below is array indexing.
    """
    words = ops.words("block")
    op_id = ops["op_id"].astype(np.int64)
    n_op = int(max([op_id.max(initial=-1), programs["op_id"].max(initial=-1), variables["op_id"].max(initial=-1)])) + 1
    op_block = np.full(n_op + 1, -1, np.int64)  # the last slot stands for op -1 (no op): no block
    op_block[op_id[::-1]] = ops.codes("block")[::-1]  # an op's first row names its block

    def block_of(op: np.ndarray) -> np.ndarray:
        return op_block[np.where(op >= 0, op, n_op)]

    runs = lookup(aggregates(trace).executions, programs["ipu"], programs["step"])
    step_block = block_of(programs["op_id"].astype(np.int64))
    step_pass = programs.codes_in("pass", PASSES)
    busy = programs["cycles"] * runs

    def per_block(pass_code: int) -> np.ndarray:
        keep = (step_block >= 0) & (step_pass == pass_code)
        return sum_by(step_block[keep], busy[keep], len(words))

    fwd, bwd = per_block(PASS["forward"]), per_block(PASS["backward"])
    # Only always-live bytes move with a block: not-always-live memory peaks at one step, so it is
    # assumed to stay as it is on each IPU (the largest step, not the sum of the blocks).
    var_block = block_of(variables["op_id"].astype(np.int64))
    owned = variables["always_live"].astype(bool) & (var_block >= 0)
    mem = sum_by(var_block[owned], variables["bytes"][owned], len(words))

    order: list[tuple[str, int]] = []
    for stage, blocks in zip(c.stages["stage"].tolist(), c.stages["blocks"]):
        order += [(b, int(stage)) for b in blocks]
    listed = {b for b, _ in order}
    extra = np.flatnonzero(~np.isin(words, list(listed))) if len(words) else np.zeros(0, np.int64)
    if len(extra):  # blocks no stage lists, by their first op: their stage is their ops' lowest
        code = ops.codes("block")
        first_op = np.full(len(words), np.iinfo(np.int64).max)
        np.minimum.at(first_op, code, op_id)
        low_stage = np.full(len(words), np.iinfo(np.int64).max)
        np.minimum.at(low_stage, code, ops["stage"].astype(np.int64))
        extra = extra[np.isin(extra, code)]
        extra = extra[np.lexsort((words[extra].astype(str), first_op[extra]))]
        order += [(str(words[k]), int(low_stage[k])) for k in extra]
    code_of = {str(w): k for k, w in enumerate(words)}
    block_code = np.array([code_of.get(b, -1) for b, _ in order], np.int64)
    stage = np.array([st for _, st in order], np.int64)
    known = block_code >= 0
    pick = lambda sums: np.where(known, sums[np.maximum(block_code, 0)] if len(sums) else 0, 0)  # noqa: E731
    m = lookup(c.micro_batches[None, :], np.zeros(len(stage)), stage)
    m = np.where(m > 0, m, 1)
    return Table({
        "block": np.array([b for b, _ in order], dtype=object), "stage": stage,
        "fwd_cycles": pick(fwd) / m, "bwd_cycles": pick(bwd) / m, "memory_bytes": pick(mem).astype(np.int64),
    })


def min_max_split(stage_cost: Any, stages: int, n: int) -> list[np.ndarray] | None:
    """The contiguous split of ``n`` items into ``stages`` non-empty groups that minimises the largest
    group's cost, by exact dynamic programming over every cut at once; ``None`` if none is finite.

    ``stage_cost(k)`` is the cost of group k (from 1) as an ``(n + 1, n + 1)`` array: ``[i, j]`` for
    items ``i..j-1`` (``inf`` where the group may not go). Returns each group's item indexes.
    """
    dp = np.full((stages + 1, n + 1), np.inf)
    arg = np.zeros((stages + 1, n + 1), np.int64)
    dp[0, 0] = 0.0
    i, j = np.arange(n + 1)[:, None], np.arange(n + 1)[None, :]
    for k in range(1, stages + 1):
        # the first k - 1 groups end at i, group k covers [i, j)
        valid = (i >= k - 1) & (i < j) & (j >= k) & (j <= n - (stages - k))
        cand = np.where(valid, np.maximum(dp[k - 1][:, None], stage_cost(k)), np.inf)
        arg[k] = np.argmin(cand, axis=0)  # the first best i, as a scan from the left would pick
        dp[k] = cand[arg[k], np.arange(n + 1)]
    if not np.isfinite(dp[stages, n]):
        return None
    cuts, end = [], n
    for k in range(stages, 0, -1):
        start = int(arg[k, end])
        cuts.append(np.arange(start, end))
        end = start
    return cuts[::-1]


def best_split(c: _Costs, blocks: Table, memory_by_ipu: Table,
               target: dict[str, Any], step_cycles: float) -> BestSplit:
    """The contiguous split of the blocks into as many stages as now that minimises the slowest stage.

    A stage keeps its position's overhead (cycles and memory not owned by any block: exchanges,
    code...). A split fits when each IPU's predicted worst tile, ``(overhead + blocks' bytes) /
    tiles x (worst tile / mean tile now)``, is within ``bytes_per_tile``. ``blocks`` and
    ``memory_by_ipu`` are ``block_costs``'s and ``memory.by_ipu``'s answers.
    """
    stages = c.stages
    S, n = len(stages), len(blocks["stage"])
    tiles, per_tile = int(target["tiles_per_ipu"]), int(target["bytes_per_tile"])
    if S == 0:
        return BestSplit(Table.empty({c: object for c in SPLIT_COLUMNS}), step_cycles, step_cycles, 0.0)
    cur_stage = np.asarray(blocks["stage"])
    bf, bb = np.asarray(blocks["fwd_cycles"], float), np.asarray(blocks["bwd_cycles"], float)
    bm = np.asarray(blocks["memory_bytes"], float)
    stage_ids = stages["stage"]
    ipu_of = stages["ipu"]
    ov_f = np.array([max(c.fwd[k] - bf[cur_stage == s].sum(), 0.0) for k, s in enumerate(stage_ids)])
    ov_b = np.array([max(c.bwd[k] - bb[cur_stage == s].sum(), 0.0) for k, s in enumerate(stage_ids)])
    ipu_list = np.asarray(memory_by_ipu["ipu"]).tolist()
    total_of = dict(zip(ipu_list, np.asarray(memory_by_ipu["total_bytes"]).tolist()))
    max_tile_of = dict(zip(ipu_list, np.asarray(memory_by_ipu["max_tile_bytes"]).tolist()))
    shared = Counter(ipu_of.tolist())  # stages per IPU: they share its memory
    ov_m, conc = np.zeros(S), np.ones(S)
    for k, s in enumerate(stage_ids):
        ipu = int(ipu_of[k])
        total = float(total_of.get(ipu, 0.0))
        ov_m[k] = max(total / shared[ipu] - bm[cur_stage == s].sum(), 0.0)
        mean_tile = total / tiles if tiles else 0.0
        conc[k] = float(max_tile_of.get(ipu, 0.0)) / mean_tile if mean_tile > 0 else 1.0

    def worst_tile(k: int, m: np.ndarray) -> np.ndarray:
        return (ov_m[k] + m) / max(tiles, 1) * conc[k]

    def fits(k: int, m: np.ndarray) -> np.ndarray:
        return worst_tile(k, m) <= per_tile

    names = np.asarray(blocks["block"], dtype=object)

    def rows_for(assign: list[np.ndarray]) -> list[tuple]:
        out = []
        for k, idx in enumerate(assign):
            f, b, m = bf[idx].sum() + ov_f[k], bb[idx].sum() + ov_b[k], bm[idx].sum() + ov_m[k]
            worst = float(worst_tile(k, np.array([bm[idx].sum()]))[0])
            out.append((int(stage_ids[k]), int(ipu_of[k]), ",".join(names[idx]), f + b, int(round(m)),
                        int(round(worst)), worst <= per_tile))
        return out

    def frame(out: list[tuple]) -> Table:
        if not out:
            return Table.empty({c: object for c in SPLIT_COLUMNS})
        # one typed array per column (what a frame of these tuples infers): no row-wise inference
        cols = list(zip(*out))
        dtypes = (np.int64, np.int64, object, np.float64, np.int64, np.int64, bool)
        return Table({c: np.array(v, dtype=t) for c, v, t in zip(SPLIT_COLUMNS, cols, dtypes)})

    current = [np.flatnonzero(cur_stage == s) for s in stage_ids]
    current_rows = rows_for(current)
    if n < S or n == 0:
        return BestSplit(frame(current_rows), step_cycles, step_cycles, 0.0)
    cost = bf + (bb if c.training else 0.0)
    P = np.concatenate(([0.0], np.cumsum(cost)))
    Q = np.concatenate(([0.0], np.cumsum(bm)))

    def solve(check_memory: bool) -> list[np.ndarray] | None:
        ovc = ov_f + (ov_b if c.training else 0.0)
        i, j = np.arange(n + 1)[:, None], np.arange(n + 1)[None, :]

        def stage_cost(k: int) -> np.ndarray:  # stage k (from 1) takes blocks i..j-1
            cost = P[j] - P[i] + ovc[k - 1]
            return np.where(fits(k - 1, Q[j] - Q[i]), cost, np.inf) if check_memory else cost

        return min_max_split(stage_cost, S, n)

    best = solve(True) or solve(False)
    new_rows = rows_for(best)
    cur_fit, new_fit = all(r[6] for r in current_rows), all(r[6] for r in new_rows)
    better = max(r[3] for r in new_rows) < max(r[3] for r in current_rows) - 1e-9
    if not (better and (new_fit or not cur_fit)):
        return BestSplit(frame(current_rows), step_cycles, step_cycles, 0.0)
    nf = np.array([bf[idx].sum() + ov_f[k] for k, idx in enumerate(best)])
    nb = np.array([bb[idx].sum() + ov_b[k] for k, idx in enumerate(best)])
    predicted = step_cycles - (_model_step(c, c.fwd, c.bwd) - _model_step(c, nf, nb))
    gain = 100.0 * (step_cycles - predicted) / step_cycles if step_cycles else 0.0
    return BestSplit(frame(new_rows), float(step_cycles), float(predicted), float(gain))


def gantt(bars: dict[str, np.ndarray]) -> pd.DataFrame:
    """One bar per stage, pass and micro-batch execution: GANTT_COLUMNS sorted by ipu, start.

    ``bars`` are ``trace.scan.gantt_bars`` (the trace's rows of each bar reduced to its first start
    and last end); ``iteration`` counts over the whole trace (``run * iterations per run + iteration``).
    """
    names = np.array(list(PASSES) + ["unknown"], dtype=object)
    order = np.lexsort((bars["stage"], bars["start_cycle"], bars["ipu"]))
    frame = frame_of({
        "ipu": bars["ipu"][order], "stage": bars["stage"][order], "pass": names[bars["pass"][order]],
        "iteration": bars["iteration"][order], "micro_batch": bars["micro_batch"][order],
        "start_cycle": bars["start_cycle"][order], "end_cycle": bars["end_cycle"][order],
    }, GANTT_COLUMNS)
    return frame
