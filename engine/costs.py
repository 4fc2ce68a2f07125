"""The cost model: what a compute set, an exchange, a copy over a link, a collective and a stream cost.

The compiler lowers and maps (which op runs where, in which program step); every cycle count it
writes comes from here, beside the assumptions it reads (``targets.Assumptions``, documented with
their ranges in docs/emulator.md). A calibration of the emulator changes this module, not the
compiler.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from engine.model import Op
from engine.options import DTYPE_BYTES, INPUT_KINDS, RunOptions
from engine.targets import Target

WORKERS = 6  # worker contexts per tile on every generation (public)
# Calls PopTorch's AsynchronousDataAccessor loads ahead: its ring buffer's default size (buffer_size=3,
# graphcore/poptorch python/_dataloader.py and the user guide's "poptorch.AsynchronousDataAccessor")
ASYNC_BUFFER_CALLS = 3


def vertices(grains: np.ndarray) -> np.ndarray:
    """Vertices each tile runs in a compute set: one per busy worker, each worklist covering a share of
    the tile's grains (poplibs' splitRegionsBetweenWorkers, lib/poputil/Util.hpp, splits a tile's
    regions between at most one vertex per worker context, respecting the grain size)."""
    return np.minimum(grains, WORKERS)

# Ops that reduce over groups of elements before they can apply the result, and the FLOPs per element
# of that reduction pass: a normalisation's mean and variance (sum and sum of squares: 3), a
# softmax's maximum and sum of exponentials (2; the cross-entropy loss runs a softmax).
STATISTICS_FLOPS = {"batch_norm": 3, "layer_norm": 3, "softmax": 2, "cross_entropy": 2}
PARTIAL_BYTES = 2 * 4  # two FP32 partial sums per group
TWO_MOMENTS = frozenset({"adam", "adamw", "lamb"})  # optimisers keeping a first and a second moment
# The Mk2 AMP vertex (poplibs ConvPartial1x1Out, lib/poplin/PerformanceEstimation.hpp): a pass takes
# 16 input channels and one output channel per conv unit; 16 units with FP16 partials, 8 with FP32
# partials (the FP32 store width); 4 MACs per unit per cycle; 4 cycles per output row, 157 cycles and
# 4 per unit (the weights' load) per pass, 66 per vertex call.
AMP_INPUT_CHANNELS = 16
AMP_UNITS_HALF_PARTIALS = 16
AMP_UNITS_FLOAT_PARTIALS = 8
AMP_MACS_PER_UNIT = 4
AMP_ROW_CYCLES = 4
AMP_PASS_CYCLES = 157
AMP_LOAD_CYCLES_PER_UNIT = 4
AMP_CALL_CYCLES = 66


@dataclass(frozen=True)
class AmpPlan:
    """A matmul's or convolution's split over its tiles (``CostModel.amp_plan``): the rows x columns x
    reduction grid of each group's tiles, a tile's output rows, the bytes the busiest tile receives,
    the plan's cycles on a tile and the share of the AMP's FP16 peak it sustains."""

    pm: float
    pn: int
    pk: int
    rows: int
    received: int
    cycles: float
    efficiency: float


@dataclass(frozen=True)
class HostLoader:
    """The host's data loaders of a run (``CostModel.host_loader``)."""

    kind: str  # an INPUT_KINDS key
    processes: int
    cores_per_process: int
    samples_per_s_per_core: float

    @property
    def samples_per_s(self) -> float:
        """Samples all the loaders prepare per second (0: synthetic, no loading)."""
        return self.samples_per_s_per_core * self.cores_per_process * self.processes

    def text(self) -> str:
        """``JPEG decode and augmentation (ImageNet-like), 4 processes x 32 cores at 300 samples/s per core``."""
        if not self.samples_per_s:
            return INPUT_KINDS[self.kind]
        return (f"{INPUT_KINDS[self.kind]}, {self.processes} process(es) x {self.cores_per_process} core(s) at "
                f"{self.samples_per_s_per_core:,.0f} samples/s per core")


@dataclass(frozen=True)
class CostModel:
    """Cycle counts on one target for one run's options.

    ``shards``: IPUs a stage's tensors are split over (the t axis); ``stream_shards``: replicas each
    streamed tensor is split over (replicated tensor sharding; 1 without it); ``ipus``: IPUs per replica;
    ``input_kind``: what one sample is (``INPUT_KINDS``).
    """

    target: Target
    options: RunOptions
    shards: int = 1
    stream_shards: int = 1
    ipus: int = 1
    input_kind: str = "tensor"  # what a sample is (INPUT_KINDS): the host's loading cost per sample
    epoch_samples: int | None = None  # samples in one epoch of the model's dataset (None: epochs too long to matter)
    _plans: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @property
    def a(self):  # noqa: ANN201 - targets.Assumptions
        return self.target.assumptions

    @property
    def dtype_bytes(self) -> int:
        """Weights and their gradients have the run's precision (accumulators: ``accumulator_bytes``)."""
        return DTYPE_BYTES[self.options.precision]

    @property
    def accumulator_bytes(self) -> int:
        """Bytes per parameter of a gradient accumulator: PopTorch's ``accum_type``, else the weights' type."""
        return DTYPE_BYTES[self.options.accum_type or self.options.precision]

    @property
    def optimiser_state_bytes(self) -> int:
        """Bytes of optimiser state per parameter: the assumption (FP32 state) scaled to the state's type
        (``optimiser_state_type``: FP16 state is half)."""
        o = self.options
        fp32 = self.a.optimiser_state_bytes_per_param[o.optimiser]
        if o.optimiser in TWO_MOMENTS and o.first_moment_type:
            # the first moment in its own type, the second in the state's
            first, second = DTYPE_BYTES[o.first_moment_type], DTYPE_BYTES[o.optimiser_state_type]
            return fp32 // 2 * first // 4 + fp32 // 2 * second // 4
        return fp32 * DTYPE_BYTES[o.optimiser_state_type] // 4

    @property
    def optimiser_state_dtype(self) -> str:
        """The optimiser state's element type: its type, or ``mixed`` when a two-moment optimiser keeps its
        first moment in another type (one moment FP16, the other FP32)."""
        o = self.options
        if o.optimiser in TWO_MOMENTS and o.first_moment_type and o.first_moment_type != o.optimiser_state_type:
            return "mixed"
        return o.optimiser_state_type

    @property
    def reduced_gradient_bytes(self) -> int:
        """Bytes per parameter the gradient all-reduce between replicas moves: the accumulated
        gradients in the accumulators' type (with SGD's combined velocity, the velocity's type);
        without accumulation, the gradients themselves."""
        if self.combined_accumulator:
            return DTYPE_BYTES[self.options.optimiser_state_type]
        return self.accumulator_bytes if self.options.gradient_accumulation > 1 else self.dtype_bytes

    @property
    def combined_accumulator(self) -> bool:
        """SGD's velocity accumulates the gradients itself (PopART's SGD1): no separate accumulator.
        LARS cannot (its trust ratio needs the whole step's gradient), nor can a velocity off chip."""
        o = self.options
        return (o.optimiser == "sgd" and o.use_combined_accum and o.tensor_locations.optimiser_on_chip
                and o.tensor_locations.weights_on_chip)

    # -- compute -------------------------------------------------------------------------------

    def grain_cycles(self, op: Op, flops: float, moved: float, grains: int, tiles: int) -> float:
        """Cycles one grain takes at the tile's full rate (all workers busy), on an op spread over ``tiles``."""
        precision = self.options.precision
        per_flops = flops / grains
        per_bytes = moved / grains
        if op.on_amp:
            rate = self.target.amp_flops_per_cycle(precision) * self.amp_plan(op, tiles).efficiency
            return per_flops / rate
        compute = per_flops / self.target.vector_flops_per_cycle(precision)
        return max(compute, per_bytes / self.target.memory_bytes_per_cycle_per_tile)

    def amp_plan(self, op: Op, tiles: int) -> AmpPlan:
        """How poplibs' planner would split a matmul or convolution over ``tiles``, and what it costs.

        Each group's tiles form a pm x pn x pk grid over the output's rows, its columns and the
        reduction (``exchange_bytes_per_tile``); the planner keeps the split whose compute and
        exchange cycles are fewest. On a tile, the AMP vertex (poplibs ConvPartial1x1Out; cycle
        estimates in lib/poplin/PerformanceEstimation.hpp) runs one pass per group of 16 input
        channels and ``units`` output channels: 4 cycles per output row (its rows shared by the six
        workers), plus 157 cycles and the weights' load (4 per unit) per pass, plus 66 per call. A
        shape that does not fill its groups is padded; a tile with few rows spends its time loading
        weights. FP32 partials (poplibs' and PopTorch's default) run 8 units, FP16 partials 16: half
        the peak. The efficiency is the ideal cycles over the plan's, times ``amp_efficiency``.
        """
        key = (op.kind, op.gemm, op.groups, op.inputs[0].shape, op.weight_params, tiles)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(op, tiles)
        return plan

    def _plan(self, op: Op, tiles: int) -> AmpPlan:
        m, k, n = op.gemm if op.gemm is not None else (1, 1, 1)
        depth = k
        if op.kind == "conv":
            channels = op.inputs[0].shape[1]
            kernel = max(1, k // channels)
            width = math.isqrt(kernel)
            # With fewer channels than a pass takes, poplibs folds the kernel's width into them
            # (expandDims); the kernel's other positions are then looped passes of their own.
            depth = channels * width if channels < AMP_INPUT_CHANNELS else channels
            passes_per_depth = kernel // width if channels < AMP_INPUT_CHANNELS else kernel
        else:
            passes_per_depth = 1
        units = AMP_UNITS_HALF_PARTIALS if self.options.partials == "fp16" and self.options.precision == "fp16" \
            else AMP_UNITS_FLOAT_PARTIALS
        if self.options.precision == "fp32":
            units = AMP_UNITS_HALF_PARTIALS  # FP32 inputs: its own (quarter) peak, every unit
        a_bytes = op.inputs[0].bytes / op.groups
        b_bytes = (op.weight_params * self.dtype_bytes if op.weight_params
                   else sum(x.bytes for x in op.inputs[1:]) / op.groups)
        out_fp32 = 4 * op.output.bytes / op.groups / self.dtype_bytes
        per_group = tiles / op.groups
        groups_per_tile = max(1, math.ceil(op.groups / tiles))
        best: AmpPlan | None = None
        for pk in (1, 2, 4, 8, 16, 32):
            if pk > 1 and (pk > per_group or pk * AMP_INPUT_CHANNELS > depth):
                break
            pn = 1
            while True:
                pm = max(1.0, per_group / (pk * pn))
                rows, cols, red = math.ceil(m / pm), math.ceil(n / pn), math.ceil(depth / pk)
                passes = -(-red // AMP_INPUT_CHANNELS) * -(-cols // units) * passes_per_depth
                compute = groups_per_tile * (AMP_CALL_CYCLES + passes * (
                    AMP_ROW_CYCLES * WORKERS * -(-rows // WORKERS) + AMP_PASS_CYCLES
                    + AMP_LOAD_CYCLES_PER_UNIT * units))
                if per_group <= 1:
                    received = (a_bytes + b_bytes) * op.groups / tiles
                else:
                    received = a_bytes / (pm * pk) + b_bytes / (pn * pk) + out_fp32 * (pk - 1) / per_group
                total = compute + received / self.a.exchange_bytes_per_cycle_per_tile
                ideal = groups_per_tile * rows * red * cols * passes_per_depth / (AMP_MACS_PER_UNIT * units)
                if best is None or total < best.cycles:
                    peak_share = units / AMP_UNITS_HALF_PARTIALS
                    best = AmpPlan(pm, pn, pk, rows, math.ceil(received), total,
                                   self.a.amp_efficiency * peak_share * min(1.0, ideal / compute))
                if pn * 2 * pk > per_group or cols <= units:
                    break
                pn *= 2
        assert best is not None
        return best

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

    def statistics(self, op: Op, tiles: int) -> tuple[int, int, float]:
        """A normalisation's or softmax's statistics: (partial-sum bytes the busiest tile sends, the
        exchange's cycles, each grain's cycles in the reduction pass).

        Batch norm reduces each channel over the micro-batch and the image, so every tile holding
        part of a channel contributes a partial; layer norm and softmax reduce each row (the last
        dimension), split over the tiles its grains fall on. The partials are gathered onto the
        tiles that reduce them and the results broadcast back: two exchanges, each with its
        latency, moving two FP32 partials per group a tile holds (popops' reductions in poplibs).
        """
        x = op.inputs[0]
        if op.kind == "batch_norm":  # (N, C, H, W): channel c is N runs of H x W elements
            groups, run = x.shape[1], math.prod(x.shape[2:])
        else:  # rows of the last dimension
            groups, run = x.elements // x.shape[-1], x.shape[-1]
        # Groups a tile holds part of: the runs its share of the elements spans.
        per_tile = min(groups, math.ceil(x.elements / tiles / run) + 1)
        partials = per_tile * PARTIAL_BYTES
        exchange = (2 * self.a.exchange_latency_cycles
                    + math.ceil(2 * partials / self.a.exchange_bytes_per_cycle_per_tile))
        grain_flops = STATISTICS_FLOPS[op.kind] * x.elements / op.grains
        return partials, exchange, grain_flops / self.target.vector_flops_per_cycle(self.options.precision)

    def serial_pieces(self, op: Op, per_tile_bytes: int, ipu: int = 0) -> int:
        """Pieces a matmul or convolution on ``ipu`` is serialised into so that its temporary memory
        per tile stays within that IPU's available memory proportion (1 for other ops)."""
        if not op.on_amp:
            return 1
        budget = self.options.memory_proportion(ipu) * self.target.arch.bytes_per_tile
        return max(1, math.ceil(per_tile_bytes / budget))

    def serial_overhead_cycles(self, pieces: int) -> int:
        """What serialising a compute set into ``pieces`` adds to each tile: one more launch per piece."""
        return (pieces - 1) * self.a.compute_set_overhead_cycles

    # -- exchange ------------------------------------------------------------------------------

    def exchange_bytes_per_tile(self, op: Op, tiles: int, factor: int) -> int:
        """Bytes the busiest of the op's ``tiles`` receives before its compute set: a matmul's or
        convolution's slices of its operands and partial sums under its plan (``amp_plan``), or the
        share of an elementwise op's inputs whose layout differs."""
        if op.on_amp and op.gemm is not None:
            return factor * self.amp_plan(op, tiles).received
        inputs = sum(t.bytes for t in op.inputs)
        return factor * math.ceil(self.a.elementwise_relayout_fraction * inputs / tiles)

    def exchange_cycles(self, per_tile_bytes: int, pieces: int = 1) -> int:
        """An on-chip exchange: its latency once per piece, then the busiest tile's bytes at the tile's rate."""
        return (pieces * self.a.exchange_latency_cycles
                + math.ceil(per_tile_bytes / self.a.exchange_bytes_per_cycle_per_tile))

    # -- off-tile transfers --------------------------------------------------------------------

    def copy_cycles(self, nbytes: int, bytes_per_s: float) -> int:
        """A copy over a link (IPU-Link, host, streaming memory): the link's latency, then the bytes."""
        return int(self.a.link_latency_cycles + math.ceil(nbytes / self.target.bytes_per_cycle(bytes_per_s)))

    def ring_cycles(self, members: int, nbytes: float, bytes_per_s: float) -> int:
        """Cycles of one ring all-reduce of ``nbytes`` over ``members`` IPUs.

        A ring reduce-scatter then all-gather takes 2(members - 1) steps; each step waits for a sync
        among the members and a link transfer to start (its latency), and each member sends
        2(members - 1)/members of the buffer, at ``collective_link_efficiency`` of ``bytes_per_s``."""
        if members <= 1:
            return 0
        steps = 2 * (members - 1)
        latency = steps * (self.target.sync_cycles(members) + self.a.link_latency_cycles)
        sent = 2 * (members - 1) / members * nbytes
        rate = self.target.bytes_per_cycle(bytes_per_s * self.a.collective_link_efficiency)
        return int(latency + math.ceil(sent / rate))

    def all_reduce(self, nbytes: float, members: int, spread_ipus: int, merge: bool = True) -> tuple[int, int]:
        """An all-reduce of ``nbytes`` per IPU among ``members`` IPUs (one per replica, or a stage's
        shards) that lie among ``spread_ipus`` IPUs of the system: (bytes each IPU sends, cycles).

        Inside one IPU-Link domain (an IPU-POD64) it is a ring over IPU-Links at
        ``collective_bytes_per_s``. Beyond it, GCL reduces hierarchically: a reduce-scatter among
        the members in each domain, an all-reduce of each IPU's 1/m share across the domains over
        GW-Links (``gw_link_bytes_per_s``), then an all-gather in each domain. With ``merge``,
        the tensors are reduced in merged buffers of ``collective_buffer_bytes`` (PopART's merged
        all-reduce collectives, TensorFlow's max_cross_replica_buffer_size): each buffer is a
        collective with its own steps. The collectives are BSP steps of the IPUs' program: they do
        not overlap the compute."""
        if members <= 1 or nbytes <= 0:
            return 0, 0
        a = self.a
        domains = max(1, min(members, -(-spread_ipus // self.target.ipu_link_domain_ipus)))
        inside = members // domains  # members in each domain
        buffers = max(1, math.ceil(nbytes / a.collective_buffer_bytes)) if merge else 1
        size = nbytes / buffers
        cycles = 0
        sent = 0.0
        if inside > 1:  # reduce-scatter and all-gather inside the domain: together one ring's work
            cycles += buffers * self.ring_cycles(inside, size, a.collective_bytes_per_s)
            sent += 2 * (inside - 1) / inside * nbytes
        if domains > 1:  # each IPU's 1/inside share reduced across the domains over GW-Links
            cycles += buffers * self.ring_cycles(domains, size / inside, a.gw_link_bytes_per_s)
            sent += 2 * (domains - 1) / domains * nbytes / inside
        return int(sent), int(cycles)

    def gradient_all_reduce(self, nbytes: float, replicas: int) -> tuple[int, int]:
        """The all-reduce of one IPU's accumulated gradients with its counterparts in the other
        replicas, after the last micro-batch's backward (PopART reduces the accumulators once per
        step): (bytes each IPU sends, cycles)."""
        return self.all_reduce(nbytes, replicas, replicas * self.ipus * self.shards)

    def shard_all_reduce(self, shard_bytes: int) -> tuple[int, int]:
        """The ring all-reduce over the stage's tensor shards of a tensor whose shard is ``shard_bytes``:
        (bytes each IPU sends, cycles). Reduce-scatter then all-gather, over IPU-Links, one tensor."""
        t = self.shards
        return self.all_reduce(shard_bytes * t, t, t, merge=False)

    def replica_link_bytes_per_s(self) -> float:
        """What one IPU reaches its counterparts in the other replicas at: IPU-Links inside an
        IPU-Link domain, GW-Links beyond."""
        spread = self.stream_shards * self.ipus * self.shards
        a = self.a
        return a.collective_bytes_per_s if spread <= self.target.ipu_link_domain_ipus else a.gw_link_bytes_per_s

    def stream_cycles(self, nbytes: int) -> int:
        """Cycles to move ``nbytes`` between streaming memory and one IPU. With replicated tensor
        sharding each replica reads 1/r from its own streaming memory and the rest arrives over the
        IPU-Links (the blog's rts: weights split over the replicas, gathered per phase)."""
        a = self.a
        r = self.stream_shards
        if r > 1:
            bw = self.replica_link_bytes_per_s()
            streaming = self.target.bytes_per_cycle(a.streaming_memory_bytes_per_s)
            return int(a.link_latency_cycles + math.ceil(nbytes / r / streaming)
                       + math.ceil(nbytes * (r - 1) / r / self.target.bytes_per_cycle(bw)))
        return self.copy_cycles(nbytes, a.streaming_memory_bytes_per_s)

    def host_call_cycles(self) -> int:
        """A host call's latency (its inputs are costed in the stream copies that carry them)."""
        return int(self.a.host_call_latency_s * self.target.arch.clock_hz)

    def samples_per_host_call(self, training: bool) -> int:
        """Samples one host call consumes over every replica: micro-batch x GA (training) x device
        iterations x replicas."""
        o = self.options
        accumulation = o.gradient_accumulation if training else 1
        return o.micro_batch_size * accumulation * o.device_iterations * o.replication_factor

    def host_loader(self) -> HostLoader:
        """The host's data loaders: the processes (poprun instances, each with its own
        ``poptorch.DataLoader``), the cores each one's workers use and the samples they prepare per
        second. The run's IPUs (every replica's) have a host server per ``ipus_per_host_server``;
        the processes share those servers' cores, and a process uses at most ``loader_workers``
        of its share (PopTorch's ``num_workers``). A core prepares the input kind's samples at its
        rate; synthetic data (PopTorch's ``enableSyntheticData``) costs the host nothing."""
        a, o = self.a, self.options
        kind = self.input_kind
        processes = o.host_processes
        servers = max(1, -(-o.replication_factor * self.ipus * self.shards // a.ipus_per_host_server))
        share = max(1, a.host_cores_per_server * servers // processes)
        workers = min(o.loader_workers, share) if o.loader_workers else share
        per_core = 0.0 if kind == "synthetic" else getattr(a, f"host_{kind}_samples_per_s_per_core")
        return HostLoader(kind, processes, workers, per_core)

    def host_input_cycles(self, training: bool) -> int:
        """Cycles the host's data loaders take to prepare one host call's samples (``host_loader``):
        the call's samples over the loaders' rate; none with synthetic data."""
        loader = self.host_loader()
        if not loader.samples_per_s:
            return 0
        return math.ceil(self.samples_per_host_call(training) / loader.samples_per_s * self.target.arch.clock_hz)

    def input_wait_cycles(self, host_cycles: int, call_cycles: int) -> int:
        """What the IPUs wait for the next call's samples. PopTorch's Async DataLoader prepares them
        in other processes while the current call runs (its latency and its iterations,
        ``call_cycles``), so only the part of the host's time beyond the call is exposed."""
        return max(0, host_cycles - call_cycles)

    def epoch_start_cycles(self, training: bool, call_cycles: int) -> int:
        """What each call waits, averaged over an epoch, for the data loaders to start the epoch.

        Unless its workers persist (``persistent_workers``), torch's DataLoader starts them again for
        every epoch, one after the other (``loader_worker_start_s`` each), and one worker builds a
        whole combined batch before the first call of the epoch can run. PopTorch's asynchronous
        accessor starts the next epoch as soon as the last one's batches are loaded, so the calls its
        ring buffer holds (``ASYNC_BUFFER_CALLS``) hide part of the start; the rest is exposed once
        per epoch of ``epoch_samples // samples_per_host_call`` calls. A run that does not name its
        workers (``loader_workers`` None) has the ideal loader: every core of its share, kept."""
        loader = self.host_loader()
        o = self.options
        if o.loader_workers is None or o.persistent_workers or not self.epoch_samples or not loader.samples_per_s:
            return 0
        per_call = self.samples_per_host_call(training)
        calls = max(1, self.epoch_samples // per_call)
        clock = self.target.arch.clock_hz
        first_batch = per_call / loader.processes / loader.samples_per_s_per_core
        start = loader.cores_per_process * self.a.loader_worker_start_s
        exposed = max(0.0, start + first_batch - ASYNC_BUFFER_CALLS * call_cycles / clock)
        return math.ceil(exposed / calls * clock)

    # -- the weight update ---------------------------------------------------------------------

    def update_work(self, params: int) -> tuple[int, int, int]:
        """The weight update of an op with ``params`` parameters on one replica: the parameters it
        updates (its share under replicated tensor sharding), their FLOPs and the bytes they move."""
        a, o = self.a, self.options
        params = -(-params // self.stream_shards)
        state = self.optimiser_state_bytes
        return params, params * a.optimiser_flops_per_param[o.optimiser], params * (3 * o.dtype_bytes + 2 * state)

