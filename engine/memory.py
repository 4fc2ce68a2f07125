"""Memory per tile: always-live categories, not-always-live liveness over program steps, the peak.

A tile's not-always-live bytes at a step are the sum of the variables live there at that step; its
peak is its always-live bytes plus the most it holds at any step, and the categories it holds at
that step are what ``tile_memory`` records, so each tile's rows sum to its peak.

Variables come in few shapes: an op's variables share its tile split, and repeated layers share
their byte shares (see ``mapping.Mapping``), so gpt3-175b's ~1,450 variables per IPU are ~30
distinct (bytes per tile, first tile, category) groups. The plan works per group, never per
variable: a group's live count at each step is a 1-D running sum over steps. The IPU's *state* at
a step is the vector of those counts; a repeated layer brings the same states back (gpt3-175b: ~210
states over ~2,050 steps), and the bytes on every tile are computed once per state, each from the
state of the step before its first appearance plus what changed at that step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.compiler import Compiled
from engine.costs import vertices
from engine.program import IpuProgram

ALWAYS_LIVE_FIXED = ("vertex_code", "vertex_state", "control_code", "exchange_code", "constants", "stack")
NAL_ORDER = ("weights", "optimiser_state", "gradients", "activations", "stash", "exchange_buffers")
# States are told apart exactly (by their count vectors) when steps x groups is at most this; beyond
# it every step is its own state and the bytes are a running sum over steps.
MAX_STATE_CELLS = 1 << 21


@dataclass
class IpuMemory:
    """The memory plan of one IPU."""

    ipu: int
    categories: list[str]  # row order of the matrices below
    always_live: np.ndarray  # (categories, tiles)
    at_peak: np.ndarray  # (categories, tiles): not-always-live bytes at each tile's peak step
    peak_step: np.ndarray  # (tiles,)
    live_total: np.ndarray  # (steps,) not-always-live bytes on the IPU at each step
    worst_tile: np.ndarray  # (steps,)
    worst_tile_bytes: np.ndarray  # (steps,)

    @property
    def peak(self) -> np.ndarray:
        """Peak bytes per tile."""
        return self.always_live.sum(axis=0) + self.at_peak.sum(axis=0)


@dataclass
class _VariableGroup:
    """Variables of one IPU with the same bytes per tile, first tile, category and liveness kind."""

    category: str
    start: int
    per_tile: np.ndarray
    live_from: list[int]
    live_to: list[int]

    @property
    def end(self) -> int:
        return self.start + len(self.per_tile)


def _groups(prog: IpuProgram) -> list[tuple[bool, _VariableGroup]]:
    # Keyed by the per-tile array's identity: equal splits share one array (``Mapping.share``), and
    # the variables keep it alive while this runs.
    groups: dict[tuple[int, int, str, bool], tuple[bool, _VariableGroup]] = {}
    for v in prog.variables:
        key = (id(v.per_tile), v.start, v.category, v.always_live)
        entry = groups.get(key)
        if entry is None:
            entry = groups[key] = (v.always_live, _VariableGroup(v.category, v.start, v.per_tile, [], []))
        entry[1].live_from.append(v.live_from)
        entry[1].live_to.append(v.live_to)
    return list(groups.values())


def plan_memory(compiled: Compiled, prog: IpuProgram) -> IpuMemory:
    """The memory plan of one compiled IPU program (see the module docstring)."""
    plan = compiled.plan
    a = plan.target.assumptions
    tiles = plan.target.tiles
    steps = prog.steps
    groups = _groups(prog)
    categories = list(ALWAYS_LIVE_FIXED) + sorted({g.category for _, g in groups} - set(ALWAYS_LIVE_FIXED),
                                                  key=NAL_ORDER.index)
    index = {c: i for i, c in enumerate(categories)}
    always = np.zeros((len(categories), tiles), dtype=np.int64)

    # Code and bookkeeping every program carries.
    for mask in prog.codelets.values():
        always[index["vertex_code"]] += mask * a.vertex_code_bytes_per_kind
    # Per distinct op pass (an outlined layer's once): a vertex per busy worker on each tile, whose
    # worklist covers the tile's grains (so the state does not grow with the micro-batch); the
    # exchange's code (one descriptor per region received); and the pass's steps of control code.
    # Other steps (copies, syncs, streams) each carry their own control code, and so does each call
    # of an outlined pass after the first.
    # The input wait is the host runtime not yet starting the call, not a program the tiles hold.
    input_wait = 1 if "input_wait" in prog.segments else 0
    code_steps = steps - prog.op_steps + prog.op_passes - len(prog.code_sets) - input_wait
    for start, grains, received, n in prog.code_sets.values():
        end = start + len(grains)
        always[index["vertex_state"], start:end] += vertices(grains) * a.vertex_state_bytes_per_vertex
        if received is not None:
            always[index["exchange_code"], start:end] += a.exchange_code_bytes_per_exchange + received // 512
        code_steps += n
    always[index["control_code"]] += code_steps * a.control_code_bytes_per_step
    always[index["constants"]] += a.constants_bytes_per_tile
    always[index["stack"]] += a.stack_bytes_per_tile

    nal = []
    for always_live, g in groups:
        count = len(g.live_from)
        if always_live:
            always[index[g.category], g.start:g.end] += count * g.per_tile
        else:
            nal.append(g)
    total_always = always.sum(axis=0)

    # Each group's live count changes by +1 at a variable's first step and -1 after its last.
    n = len(nal)
    sizes = np.array([len(g.live_from) for g in nal], dtype=np.int64)
    which = np.repeat(np.arange(n, dtype=np.int64), sizes)
    froms = np.fromiter((s for g in nal for s in g.live_from), dtype=np.int64, count=int(sizes.sum()))
    tos = np.fromiter((s for g in nal for s in g.live_to), dtype=np.int64, count=int(sizes.sum()))
    cells, cell = np.unique(np.concatenate((froms * n + which, (tos + 1) * n + which)), return_inverse=True)
    delta = np.zeros(len(cells), dtype=np.int64)
    np.add.at(delta, cell, np.repeat(np.array([1, -1], dtype=np.int64), len(froms)))
    change_step, change_group = np.divmod(cells, max(n, 1))
    keep = (delta != 0) & (change_step < steps)
    change_step, change_group, delta = change_step[keep], change_group[keep], delta[keep]

    state, first_step = _states(steps, n, change_step, change_group, delta)
    states = len(first_step)
    # The bytes of each state on every tile: its first step's changes, added to the state before.
    first_of = np.full(steps, -1, dtype=np.int64)
    first_of[first_step] = np.arange(states)
    rows = first_of[change_step]
    mine = rows >= 0
    rows, groups_changed, counts = rows[mine], change_group[mine], delta[mine]
    order = np.argsort(groups_changed, kind="stable")
    bounds = np.searchsorted(groups_changed[order], np.arange(n + 1))
    live = np.zeros((states, tiles), dtype=np.int64)
    for k, g in enumerate(nal):
        sel = order[bounds[k]:bounds[k + 1]]
        if len(sel):
            live[rows[sel], g.start:g.end] += counts[sel, None] * g.per_tile[None, :]
    if states:
        live[0] += total_always
    parents = state[first_step[1:] - 1]
    # Row by row, in place: each state adds its changes to the state of the step before its first
    # appearance (without repeated states this is a running sum over steps).
    for k in range(1, states):
        np.add(live[k], live[parents[k - 1]], out=live[k])

    # The first step at which each tile holds its most: states are in order of first appearance.
    if states:
        peak_state = (live == live.max(axis=0)).argmax(axis=0)
        peak_step = first_step[peak_state]
    else:
        peak_step = np.zeros(tiles, dtype=np.int64)
    at_peak = np.zeros_like(always)
    for g in nal:
        start, end = g.start, g.end
        first, last = np.asarray(g.live_from), np.asarray(g.live_to)
        valid = first <= last
        first, last = np.sort(first[valid]), np.sort(last[valid])
        ps = peak_step[start:end]
        held = np.searchsorted(first, ps, side="right") - np.searchsorted(last, ps, side="left")
        at_peak[index[g.category], start:end] += g.per_tile * held
    worst = live.argmax(axis=1)
    return IpuMemory(
        ipu=prog.ipu,
        categories=categories,
        always_live=always,
        at_peak=at_peak,
        peak_step=peak_step,
        live_total=(live.sum(axis=1) - int(total_always.sum()))[state],
        worst_tile=worst[state],
        worst_tile_bytes=live[np.arange(states), worst][state],
    )


def _states(steps: int, groups: int, change_step: np.ndarray, change_group: np.ndarray,
            delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each step's state (numbered in order of first appearance) and each state's first step."""
    if steps * groups > MAX_STATE_CELLS:
        every = np.arange(steps, dtype=np.int64)
        return every, every
    counts = np.zeros((steps, groups), dtype=np.int32)
    counts[change_step, change_group] = delta
    np.cumsum(counts, axis=0, out=counts)
    # Distinct rows (each row viewed as one opaque value: np.unique(axis=0) is several times
    # slower), renumbered in order of first appearance where np.unique numbers them sorted.
    rows = counts.view(np.dtype((np.void, counts.itemsize * groups))).reshape(-1)
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse], np.sort(first).astype(np.int64)
