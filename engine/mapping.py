"""Tile mapping: where each op's work, its weights and its optimiser state lie on an IPU's tiles.

Tile mapping follows the op's shapes: its work splits into ``grains`` (``Op.grains``), spread over
``min(grains, tiles)`` contiguous tiles, the first ``grains % tiles`` tiles taking one grain more.
So a small op uses few tiles, and a big one is imbalanced by exactly its grain arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from engine.model import Op
from engine.plan import StagePlan

WEIGHT_GRAIN_PARAMS = 64  # weights spread over tiles in grains of 64 parameters


@dataclass
class Mapping:
    """Where an op's work lies: tiles [start, start + len(grains)), with ``grains[t]`` grains each.

    Ops of equal work (a transformer's repeated layers) share one read-only ``grains`` array and one
    ``cache`` of what is derived from it, so each split is computed once per compilation.
    """

    start: int
    grains: np.ndarray  # int64, one entry per tile used; read-only
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def tiles(self) -> int:
        return len(self.grains)

    def share(self, total: int) -> np.ndarray:
        """Split ``total`` bytes over the tiles in proportion to their grains, exactly (read-only)."""
        key = ("share", int(total))
        out = self.cache.get(key)
        if out is None:
            cum = self.cache.get("cum")
            if cum is None:
                cum = self.cache["cum"] = np.cumsum(self.grains)
            upto = (int(total) * cum) // int(cum[-1])
            out = np.empty_like(upto)
            out[0] = upto[0]
            np.subtract(upto[1:], upto[:-1], out=out[1:])
            out.flags.writeable = False
            self.cache[key] = out
        return out

    def scaled(self, busiest: int) -> np.ndarray:
        """Each tile's part of ``busiest``, the bytes of the tile with the most grains (read-only)."""
        key = ("scaled", int(busiest))
        out = self.cache.get(key)
        if out is None:
            out = int(busiest) * self.grains // int(self.grains.max())
            out.flags.writeable = False
            self.cache[key] = out
        return out


def outline_key(op: Op) -> tuple:
    """What makes two ops the same subgraph for outlining: their kind, shapes and work."""
    return (op.kind, op.gemm, op.groups, op.params, op.flops, op.bytes, op.grains, op.output.bytes,
            tuple(t.bytes for t in op.inputs), op.shard)


class TileMapper:
    """Maps a plan's ops onto an IPU's ``tiles``. Equal splits share one grains array and cache."""

    def __init__(self, tiles: int, outlining: bool) -> None:
        self.tiles = tiles
        self.outlining = outlining
        self._spreads: dict[tuple[int, int], tuple[np.ndarray, dict]] = {}
        # Ops of equal work (a repeated layer's): with outlining they are one subgraph, on one set of tiles.
        self._twins: dict[tuple, int] = {}

    def span(self, op_id: int, used: int) -> int:
        # Spread small ops over the chip deterministically (Poplar balances code and data over tiles).
        room = self.tiles - used + 1
        return (op_id * 997) % room

    def spread(self, start: int, grains: int, used: int) -> Mapping:
        """``grains`` over ``used`` tiles from ``start``, the first ``grains % used`` taking one more."""
        shared = self._spreads.get((grains, used))
        if shared is None:
            base, extra = divmod(grains, used)
            array = np.full(used, base, dtype=np.int64)
            array[:extra] += 1
            array.flags.writeable = False
            shared = self._spreads[(grains, used)] = (array, {})
        return Mapping(start, shared[0], shared[1])

    def map(self, op: Op) -> Mapping:
        used = min(op.grains, self.tiles)
        # An outlined subgraph has one tile mapping: every op of equal work lands where the first did.
        anchor = self._twins.setdefault(outline_key(op), op.op_id) if self.outlining else op.op_id
        return self.spread(self.span(anchor, used), op.grains, used)

    def map_weights(self, op: Op, work: Mapping) -> Mapping:
        """Weights spread in grains of 64 parameters over as many tiles as they fill (the whole IPU for
        a big matrix, as the matmul planner splits its reduction), from the first tile of the op's
        ``work``."""
        weight_grains = math.ceil(op.weight_params / WEIGHT_GRAIN_PARAMS)
        used = min(weight_grains, self.tiles)
        return self.spread(min(work.start, self.tiles - used), weight_grains, used)

    def map_state(self, stages: list[StagePlan]) -> dict[int, Mapping]:
        """Optimiser state and gradient accumulators: read only by the weight update, which may run
        on any tiles, so each IPU lays them end to end over its tiles in grains of 64 parameters (a
        small op's state on the tiles after the previous op's), instead of piling onto the op's tiles."""
        out: dict[int, Mapping] = {}
        next_tile: dict[int, int] = {}
        for stage in stages:
            for op in stage.ops:
                if not op.params:
                    continue
                grains = math.ceil(op.params / WEIGHT_GRAIN_PARAMS)
                used = min(grains, self.tiles)
                start = next_tile.get(stage.ipu, 0)
                if start + used > self.tiles:
                    start = 0
                out[op.op_id] = self.spread(start, grains, used)
                next_tile[stage.ipu] = (start + used) % self.tiles
        return out
