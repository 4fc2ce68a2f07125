"""Memory per tile: always-live categories, not-always-live liveness over program steps, the peak.

Not-always-live variables are added to a (steps x tiles) difference array over their tile range
and step interval; a cumulative sum over steps gives the bytes live on every tile at every step.
A tile's peak is its always-live bytes plus the most it holds at any step, and the categories it
holds at that step are what ``tile_memory`` records, so each tile's rows sum to its peak.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.compiler import WORKERS, Compiled, IpuProgram

ALWAYS_LIVE_FIXED = ("vertex_code", "vertex_state", "control_code", "exchange_code", "constants", "stack")


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


def plan_memory(compiled: Compiled, prog: IpuProgram) -> IpuMemory:
    """The memory plan of one compiled IPU program (see the module docstring)."""
    plan = compiled.plan
    a = plan.target.assumptions
    tiles = plan.target.tiles
    categories = list(ALWAYS_LIVE_FIXED) + sorted(
        {v.category for v in prog.variables} - set(ALWAYS_LIVE_FIXED),
        key=lambda c: ("weights", "optimiser_state", "gradients", "activations", "stash", "exchange_buffers").index(c),
    )
    index = {c: i for i, c in enumerate(categories)}
    always = np.zeros((len(categories), tiles), dtype=np.int64)

    # Code and bookkeeping every program carries.
    for mask in prog.codelets.values():
        always[index["vertex_code"]] += mask * a.vertex_code_bytes_per_kind
    for _, start, _, grains in prog.tile_cycles:
        # A vertex per worker and one more per 64 grains: the state Poplar keeps per vertex.
        vertices = np.minimum(grains, WORKERS) + grains // 64
        always[index["vertex_state"], start:start + len(grains)] += vertices * a.vertex_state_bytes_per_grain
    always[index["control_code"]] += prog.steps * a.control_code_bytes_per_step
    always[index["constants"]] += a.constants_bytes_per_tile
    always[index["stack"]] += a.stack_bytes_per_tile

    steps = prog.steps
    diff = np.zeros((steps + 1, tiles), dtype=np.int64)
    nal = []
    for var in prog.variables:
        end = var.start + len(var.per_tile)
        if var.category == "exchange_buffers":
            # The exchange's code (one descriptor per region received) stays for the whole program.
            always[index["exchange_code"], var.start:end] += a.exchange_code_bytes_per_exchange + var.per_tile // 512
        if var.always_live:
            always[index[var.category], var.start:end] += var.per_tile
        else:
            diff[var.live_from, var.start:end] += var.per_tile
            diff[var.live_to + 1, var.start:end] -= var.per_tile
            nal.append(var)
    # Carried from step 0 by the running sum, the always-live bytes make each row the tiles' totals
    # (a constant per tile changes neither its peak step nor, per step, which tile is worst).
    total_always = always.sum(axis=0)
    diff[0] += total_always
    # Summed row by row, in place: numpy's cumsum along the first axis neither vectorises across
    # the row nor reuses the memory (3-4x slower on gpt3-175b's 2,000 steps x 1,472 tiles).
    for s in range(1, steps):
        np.add(diff[s], diff[s - 1], out=diff[s])
    total = diff[:steps]  # (steps, tiles): bytes live on each tile at each step
    # The first step at which each tile holds its most (argmax along the first axis is 2x slower).
    peak_step = (total == total.max(axis=0)).argmax(axis=0) if steps else np.zeros(tiles, dtype=np.int64)
    at_peak = np.zeros_like(always)
    for var in nal:
        end = var.start + len(var.per_tile)
        ps = peak_step[var.start:end]
        at_peak[index[var.category], var.start:end] += var.per_tile * ((ps >= var.live_from) & (ps <= var.live_to))
    worst = total.argmax(axis=1)
    return IpuMemory(
        ipu=prog.ipu,
        categories=categories,
        always_live=always,
        at_peak=at_peak,
        peak_step=peak_step,
        live_total=total.sum(axis=1) - int(total_always.sum()),
        worst_tile=worst,
        worst_tile_bytes=total[np.arange(steps), worst],
    )
