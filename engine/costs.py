"""The cost model: what a compute set, an exchange, a copy over a link, a collective and a stream cost.

The compiler lowers and maps (which op runs where, in which program step); every cycle count it
writes comes from here, beside the assumptions it reads (``targets.Assumptions``, documented with
their ranges in docs/emulator.md). A calibration of the emulator changes this module, not the
compiler.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.model import DTYPE_BYTES, Op, Options
from engine.targets import Target

WORKERS = 6  # worker contexts per tile on every generation (public)


@dataclass(frozen=True)
class CostModel:
    """Cycle counts on one target for one run's options.

    ``shards``: IPUs a stage's tensors are split over (the t axis); ``stream_shards``: replicas each
    streamed tensor is split over (replicated tensor sharding; 1 without it); ``ipus``: IPUs per replica.
    """

    target: Target
    options: Options
    shards: int = 1
    stream_shards: int = 1
    ipus: int = 1

    @property
    def a(self):  # noqa: ANN201 - targets.Assumptions
        return self.target.assumptions

    @property
    def dtype_bytes(self) -> int:
        """Weights, their gradients and gradient accumulators share the run's precision (PopART's
        default accumulator type is the weight's type)."""
        return DTYPE_BYTES[self.options.precision]

    # -- compute -------------------------------------------------------------------------------

    def grain_cycles(self, op: Op, flops: float, moved: float, grains: int) -> float:
        """Cycles one grain takes at the tile's full rate (all workers busy)."""
        precision = self.options.precision
        per_flops = flops / grains
        per_bytes = moved / grains
        if op.on_amp:
            efficiency = self.a.amp_efficiency
            if op.kind == "conv" and op.gemm is not None:
                efficiency *= min(1.0, op.gemm[1] / self.a.amp_min_reduction)
            rate = self.target.amp_flops_per_cycle(precision) * efficiency
            return per_flops / rate
        compute = per_flops / self.target.vector_flops_per_cycle(precision)
        return max(compute, per_bytes / self.target.memory_bytes_per_cycle_per_tile)

    def tile_cycles(self, grains: np.ndarray, grain_cycles: float, amp: bool = False) -> np.ndarray:
        """Cycles each tile spends on its grains, launch overhead included.

        Matrix-unit vertices are supervisor vertices that split each grain over the six workers, so
        a tile's time is its grains' work. Vector vertices are one grain per worker: workers take
        grains in rounds of six, and a round costs six grains' worth of issue slots (each worker
        gets one slot in six), so a tile with one grain is as slow as one with six.
        """
        a = self.a
        if amp:
            work = grains * (grain_cycles + a.vertex_overhead_cycles)
        else:
            rounds = -(-grains // WORKERS)
            work = rounds * (WORKERS * grain_cycles + a.vertex_overhead_cycles)
        return a.compute_set_overhead_cycles + np.ceil(work).astype(np.int64)

    def serial_pieces(self, op: Op, per_tile_bytes: int) -> int:
        """Pieces a matmul or convolution is serialised into so that its temporary memory per tile
        stays within Poplar's available memory proportion (1 for other ops)."""
        if not op.on_amp:
            return 1
        budget = self.options.available_memory_proportion * self.target.arch.bytes_per_tile
        return max(1, math.ceil(per_tile_bytes / budget))

    def serial_overhead_cycles(self, pieces: int) -> int:
        """What serialising a compute set into ``pieces`` adds to each tile: one more launch per piece."""
        return (pieces - 1) * self.a.compute_set_overhead_cycles

    # -- exchange ------------------------------------------------------------------------------

    def exchange_bytes_per_tile(self, op: Op, tiles: int, factor: int) -> int:
        """Bytes the busiest of the op's ``tiles`` receives before its compute set."""
        inputs = sum(t.bytes for t in op.inputs)
        if op.on_amp and op.gemm is not None:
            m, k, n = op.gemm
            a_bytes = op.inputs[0].bytes / op.groups
            b_bytes = (op.weight_params * self.dtype_bytes if op.weight_params
                       else sum(x.bytes for x in op.inputs[1:]) / op.groups)
            # Tiles split over the groups first; a group's tiles form a pm x pn x pk grid (rows of A,
            # columns of B, and the reduction dimension, as Poplar's matmul planner splits it): a
            # tile needs its slice of A and of B, and sends partial sums when the reduction is split.
            t = tiles / op.groups
            if t <= 1:
                return factor * math.ceil((a_bytes + b_bytes) * op.groups / tiles)
            out_fp32 = 4 * op.output.bytes / op.groups / self.dtype_bytes
            best = math.inf
            for pk in (1, 2, 4, 8, 16, 32):  # the planner keeps the split that moves least
                if pk > t or pk * 16 > k:
                    break
                rest = t / pk
                pn = max(1.0, min(rest, math.sqrt(rest * n / max(m, 1))))
                pm = max(1.0, rest / pn)
                partials = out_fp32 * (pk - 1) / t
                best = min(best, a_bytes / (pm * pk) + b_bytes / (pn * pk) + partials)
            if best == math.inf:
                best = (a_bytes + b_bytes) / t
            return factor * math.ceil(best)
        return factor * math.ceil(self.a.elementwise_relayout_fraction * inputs / tiles)

    def exchange_cycles(self, per_tile_bytes: int, pieces: int = 1) -> int:
        """An on-chip exchange: its latency once per piece, then the busiest tile's bytes at the tile's rate."""
        return pieces * self.a.exchange_latency_cycles + math.ceil(per_tile_bytes / self.a.exchange_bytes_per_cycle_per_tile)

    # -- off-tile transfers --------------------------------------------------------------------

    def copy_cycles(self, nbytes: int, bytes_per_s: float) -> int:
        """A copy over a link (IPU-Link, host, streaming memory): the link's latency, then the bytes."""
        return int(self.a.link_latency_cycles + math.ceil(nbytes / self.target.bytes_per_cycle(bytes_per_s)))

    def all_reduce_cycles(self, members: int, ring_bytes: float, bytes_per_s: float) -> int:
        """Cycles of a ring all-reduce over ``members`` that moves ``ring_bytes`` per member."""
        return int(2 * (members - 1) * self.a.link_latency_cycles / 4
                   + math.ceil(ring_bytes / self.target.bytes_per_cycle(bytes_per_s)))

    def shard_all_reduce(self, shard_bytes: int) -> tuple[int, int]:
        """The ring all-reduce over the stage's tensor shards of a tensor whose shard is ``shard_bytes``:
        (bytes each IPU moves, cycles). Reduce-scatter then all-gather, over IPU-Links."""
        t = self.shards
        ring = int(2 * (t - 1) / t * shard_bytes * t)
        return ring, self.all_reduce_cycles(t, ring, self.target.all_reduce_bytes_per_s(t))

    def stream_cycles(self, nbytes: int) -> int:
        """Cycles to move ``nbytes`` between streaming memory and one IPU. With replicated tensor
        sharding each replica reads 1/r from its own streaming memory and the rest arrives over the
        IPU-Links (the blog's rts: weights split over the replicas, gathered per phase)."""
        a = self.a
        r = self.stream_shards
        if r > 1:
            bw = self.target.all_reduce_bytes_per_s(r * self.ipus * self.shards)
            return int(a.link_latency_cycles + math.ceil(nbytes / r / self.target.bytes_per_cycle(a.streaming_memory_bytes_per_s))
                       + math.ceil(nbytes * (r - 1) / r / self.target.bytes_per_cycle(bw)))
        return self.copy_cycles(nbytes, a.streaming_memory_bytes_per_s)

    def host_call_cycles(self) -> int:
        """A host call's latency (its inputs are costed in the stream copies that carry them)."""
        return int(self.a.host_call_latency_s * self.target.arch.clock_hz)

    # -- the weight update ---------------------------------------------------------------------

    def update_work(self, params: int) -> tuple[int, int, int]:
        """The weight update of an op with ``params`` parameters on one replica: the parameters it
        updates (its share under replicated tensor sharding), their FLOPs and the bytes they move."""
        a, o = self.a, self.options
        params = -(-params // self.stream_shards)
        state = a.optimiser_state_bytes_per_param[o.optimiser]
        return params, params * a.optimiser_flops_per_param[o.optimiser], params * (3 * o.dtype_bytes + 2 * state)
