"""The run's own supersteps, re-timed with other costs for the stages' micro-batch work.

The engine runs bulk-synchronously: in each superstep every IPU runs its work back to back, idles
until the slowest IPU is done, then all IPUs sync. The trace shows where each superstep ends: an
IPU's idle rows and its syncs of no stage (the barrier) end there. Cutting the time line at those
cycles gives the supersteps the run used and, for each, the work each IPU did in it: a stage's
forward or backward of one micro-batch (the work a better split of the model moves between stages)
and fixed work (the update, weight loads, host calls, the barrier itself).

Re-timing keeps the schedule: the same work in the same superstep on the same IPU, in the same
order. A superstep lasts as long as its busiest IPU's work, plus what it lasted beyond that in the
trace (its ``gap``: zero in a run whose IPUs wait only on each other). So with the measured costs
the re-timed run is the measured run, cycle for cycle (``length(s, ones) == s.total_cycles``):
every figure built on a re-timing compares with the trace's own time, not with a formula's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popvision_py.analysis.common.tables import PASS
from popvision_py.analysis.trace.scan import SLOT

MOVABLE_PASSES = (PASS["forward"], PASS["backward"])  # the passes run once per micro-batch
SHARES = np.linspace(0.0, 1.0, 33)  # how far ``balance`` moves the work towards even (0: the run as it is)


@dataclass(frozen=True)
class Supersteps:
    """The run's supersteps (``T`` of them, on ``I`` IPUs) and the work in each.

    ``cycles`` (T,): each superstep's length in the trace; ``fixed`` (T, I): cycles re-timing keeps;
    ``gap`` (T,): cycles beyond the busiest IPU's work. The movable work is one cell per
    (superstep, IPU, stage, pass) with work: ``cell_step``, ``cell_ipu``, ``cell_stage``,
    ``cell_pass`` (0 forward, 1 backward) and ``cell_cycles``. ``weight`` (T,), when given: how many
    of the run's supersteps each one stands for (a long trace's supersteps are folded as its row groups
    come in, each distinct superstep kept once with its count: ``trace.steps``); ``None``: one each.
    """

    cycles: np.ndarray
    fixed: np.ndarray
    gap: np.ndarray
    cell_step: np.ndarray
    cell_ipu: np.ndarray
    cell_stage: np.ndarray
    cell_pass: np.ndarray
    cell_cycles: np.ndarray
    weight: np.ndarray | None = None

    @property
    def total_cycles(self) -> int:
        return int(self.cycles.sum() if self.weight is None else (self.cycles * self.weight).sum())

    def per_step(self, values: np.ndarray) -> np.ndarray:
        """``values`` (one per superstep) times each one's weight: what they sum to over the whole run."""
        return values if self.weight is None else values * self.weight

    def per_cell(self, values: np.ndarray) -> np.ndarray:
        """``values`` (one per cell) times its superstep's weight."""
        return values if self.weight is None else values * self.weight[self.cell_step]

    @property
    def num_ipus(self) -> int:
        return self.fixed.shape[1]

    def stage_work(self, num_stages: int, scale: np.ndarray | None = None) -> np.ndarray:
        """Movable cycles per [stage, pass (0 forward, 1 backward)], each cell times ``scale`` if given."""
        cycles = self.per_cell(self.cell_cycles if scale is None else self.cell_cycles * scale)
        key = self.cell_stage * 2 + self.cell_pass
        return np.bincount(key, cycles, 2 * max(num_stages, 1)).reshape(-1, 2)


def supersteps(slots: dict[str, np.ndarray], start_cycle: int, end_cycle: int) -> Supersteps:
    """Cut the trace's slots (``trace.scan.SLOT_COLUMNS``) into the supersteps that ran them.

    A superstep ends where an idle run or a barrier sync ends, on any IPU; a slot belongs to the
    superstep its first row starts in. Each superstep's work per IPU is summed with ``np.bincount``.
    """
    ipus = int(slots["ipu"].max()) + 1 if len(slots["kind"]) else 0
    return steps_between(slots, cuts_of(slots, start_cycle, end_cycle), ipus)


def cut_ends(slots: dict[str, np.ndarray]) -> np.ndarray:
    """Where the slots end a superstep: the ends of the idle runs and of the barrier syncs (int64)."""
    kind = slots["kind"]
    ends = slots["start_cycle"].astype(np.int64) + slots["cycles"].astype(np.int64)
    return ends[(kind == SLOT["idle"]) | (kind == SLOT["superstep_sync"])]


def cuts_of(slots: dict[str, np.ndarray], start_cycle: int, end_cycle: int) -> np.ndarray:
    """The cycles that bound the run's supersteps: its first start, its last end and the slots' cuts between."""
    ends = cut_ends(slots)
    inside = ends[(ends > start_cycle) & (ends < end_cycle)]
    return ascending_distinct(np.concatenate(([start_cycle, end_cycle], inside)))


def ascending_distinct(cycles: np.ndarray) -> np.ndarray:
    """``np.unique(cycles)`` for cycles that come as ascending runs (each IPU's, each row group's): a
    stable sort merges the runs, and repeats are dropped, in a tenth of np.unique's time (its hashing
    path; 84,212 cuts of a 10M-row trace: 0.35 ms, not 4.1). ``cycles`` is sorted in place."""
    cycles.sort(kind="stable")
    return cycles[np.r_[True, cycles[1:] != cycles[:-1]]] if len(cycles) else cycles


def steps_between(slots: dict[str, np.ndarray], cuts: np.ndarray, ipus: int) -> Supersteps:
    """The supersteps bounded by ``cuts`` (sorted) on ``ipus`` IPUs, with the work of ``slots`` in them
    (each slot in the superstep its first row starts in; one before the first cut in the first, one at or
    past the last in the last)."""
    kind, start, cycles = slots["kind"], slots["start_cycle"].astype(np.int64), slots["cycles"].astype(np.int64)
    count = max(len(cuts) - 1, 0)
    step = np.clip(np.searchsorted(cuts, start, side="right") - 1, 0, max(count - 1, 0))
    ipu = slots["ipu"].astype(np.int64)
    busy = kind != SLOT["idle"]
    movable = kind == SLOT["micro_batch"]
    fixed = busy & ~movable
    fixed_work = np.bincount(step[fixed] * ipus + ipu[fixed], cycles[fixed], count * ipus).reshape(count, ipus)
    # movable work summed per (superstep, IPU, stage, pass): a few cells per superstep, kept sparse
    stage = slots["stage"].astype(np.int64)[movable]
    pass_ = (slots["pass"][movable] == PASS["backward"]).astype(np.int64)
    n_stage = int(stage.max()) + 1 if len(stage) else 1
    key = ((step[movable] * ipus + ipu[movable]) * n_stage + stage) * 2 + pass_
    cells, which = np.unique(key, return_inverse=True)
    cell_cycles = np.bincount(which, cycles[movable], len(cells))
    cell_pass = cells % 2
    cell_stage = (cells // 2) % n_stage
    cell_ipu = (cells // (2 * n_stage)) % max(ipus, 1)
    cell_step = cells // (2 * n_stage * max(ipus, 1))
    length = np.diff(cuts).astype(np.float64)
    work = _work(fixed_work, cell_step, cell_ipu, cell_cycles.astype(np.float64))
    gap = length - (busiest(work) if ipus else 0.0)
    return Supersteps(length, fixed_work, gap, cell_step, cell_ipu, cell_stage, cell_pass, cell_cycles)


def _work(fixed: np.ndarray, step: np.ndarray, ipu: np.ndarray, cycles: np.ndarray) -> np.ndarray:
    """Each superstep's work per IPU: fixed plus the movable cells."""
    count, ipus = fixed.shape
    return fixed + np.bincount(step * ipus + ipu, cycles, count * ipus).reshape(count, ipus)


def busiest(work: np.ndarray) -> np.ndarray:
    """Each superstep's busiest IPU's work: the largest of each row of a (supersteps, IPUs) array.

    The same values as ``work.max(axis=1)``, taken a column at a time: NumPy reduces a C-ordered
    array along its short last axis row by row, which over a handful of IPUs is about 15x slower, and
    ``balance`` asks it once per share tried.
    """
    out = work[:, 0].copy()
    for column in work.T[1:]:
        np.maximum(out, column, out=out)
    return out


def length(s: Supersteps, scale: np.ndarray) -> float:
    """Cycles of the run re-timed with each movable cell's cycles times ``scale`` (one per cell).

    Every superstep lasts its busiest IPU's work plus its gap; with ``scale`` all ones this is the
    trace's length exactly (integer cycles, summed exactly in float64 below 2^53).
    """
    if not len(s.cycles):
        return 0.0
    work = _work(s.fixed, s.cell_step, s.cell_ipu, s.cell_cycles * scale)
    return float(s.per_step(busiest(work) + s.gap).sum())


def even_scale(s: Supersteps, ipus: np.ndarray) -> np.ndarray:
    """Per cell, the factor that evens the IPUs' micro-batch work, pass by pass.

    *Balanced* means: every IPU among ``ipus`` (the stages' IPUs) that does a pass's micro-batch
    work does the same amount of it, the mean over those IPUs; the stages sharing an IPU keep the
    proportions they split its work in today. An IPU's work grows or shrinks by one factor, so the
    work of the whole run (each pass's total) is what the trace measured.
    """
    load = np.bincount(s.cell_ipu * 2 + s.cell_pass, s.per_cell(s.cell_cycles), 2 * max(s.num_ipus, 1)).reshape(-1, 2)
    on = np.zeros(load.shape[0], bool)
    on[ipus[ipus < load.shape[0]]] = True
    active = (load > 0) & on[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        target = np.where(active.any(axis=0), load.sum(axis=0, where=active) / np.maximum(active.sum(axis=0), 1), 0.0)
        factor = np.where(active, target[None, :] / np.where(load > 0, load, 1), 1.0)
    return factor[s.cell_ipu, s.cell_pass]


@dataclass(frozen=True)
class Balanced:
    """``balance``'s answer: the shortest re-timing found, the share of the way to even it moved, its cell scale."""

    total_cycles: float
    share: float
    scale: np.ndarray


def balance(s: Supersteps, ipus: np.ndarray) -> Balanced:
    """The run re-timed with its micro-batch work moved towards even (``even_scale``), the best of ``SHARES``.

    Share ``a`` scales each cell by ``1 + a x (even - 1)``: 0 is the run as measured, 1 fully even.
    The step is convex in ``a`` (a sum of maxima of functions linear in it), so the shares tried
    bracket its minimum; fully even is not always best: where an IPU runs two stages in one
    superstep, evening every IPU's total can lengthen the supersteps of the pipeline's fill. The
    answer never exceeds the measured length, because share 0 is tried and re-times to it exactly.
    """
    if not len(s.cell_cycles):
        return Balanced(float(s.total_cycles), 0.0, np.ones(0))
    even = even_scale(s, ipus)
    best = Balanced(float(s.total_cycles), 0.0, np.ones(len(even)))
    for share in SHARES[1:]:
        scale = 1.0 + share * (even - 1.0)
        cycles = length(s, scale)
        if cycles < best.total_cycles:
            best = Balanced(cycles, float(share), scale)
    return best
