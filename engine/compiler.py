"""The compiler: lower each IPU's ops into program steps, map work and tensors onto tiles, plan memory.

Per IPU, the program is, in order: the forward segment of each of its stages, their backward
segments (reverse order), the pipeline sync, then the weight-update segment. A segment is a run of
program steps; each op pass lowers to the BSP triple sync -> exchange -> compute set, and segments
begin or end with the copies that feed them (host streams, inter-IPU copies, remote buffers).

Tile mapping (which tiles an op's work, weights and optimiser state lie on) is engine/mapping.py's.

Memory is planned per tile: always-live categories (code, vertex state, weights...) and
not-always-live variables with liveness intervals in program steps; a tile's peak is its
always-live bytes plus the most its not-always-live variables hold at any one step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from popvision_py.format.schema import INPUT_WAIT_STEP as INPUT_WAIT

from engine.costs import STATISTICS_FLOPS, CostModel
from engine.mapping import Mapping, TileMapper, outline_key
from engine.model import Op, Tensor
from engine.plan import Plan, StagePlan

@dataclass
class Variable:
    """A tensor on one IPU: bytes per tile over a tile range, live over a step interval."""

    name: str
    category: str
    always_live: bool
    start: int
    per_tile: np.ndarray
    live_from: int
    live_to: int
    op_id: int


@dataclass
class IpuProgram:
    """One IPU's compiled program: its steps as parallel lists, plus tile cycles, exchanges, variables."""

    ipu: int
    type: list[str] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    op_id: list[int] = field(default_factory=list)
    stage: list[int] = field(default_factory=list)
    pass_: list[str] = field(default_factory=list)
    tiles: list[int] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)
    cycles: list[int] = field(default_factory=list)
    # (step, start tile, cycles per tile, grains per tile) of each compute set
    tile_cycles: list[tuple[int, int, np.ndarray, np.ndarray]] = field(default_factory=list)
    exchanges: list[tuple[int, str, int, int, int, int]] = field(default_factory=list)
    variables: list[Variable] = field(default_factory=list)
    # Segments: (stage, pass) -> [first step, end step); "sync" and "update" are per IPU.
    segments: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)
    sync_step: int = -1
    update_segment: tuple[int, int] = (0, 0)
    # Always-live bookkeeping: codelets (kind, pass) -> tiles that hold their code; per-tile extras.
    codelets: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    # The program's distinct op passes (an outlined layer's passes once): key -> (first tile, grains
    # per tile, exchange buffer per tile or None, program steps). Their vertex state, exchange code
    # and control code are held once per key; ``op_steps`` counts every op pass's steps.
    code_sets: dict[tuple, tuple[int, np.ndarray, np.ndarray | None, int]] = field(default_factory=dict)
    op_steps: int = 0
    op_passes: int = 0

    @property
    def steps(self) -> int:
        return len(self.type)

    def add(self, type_: str, name: str, op_id: int, stage: int, pass_: str, tiles: int, bytes_: int,
            cycles: int) -> int:
        self.type.append(type_)
        self.name.append(name)
        self.op_id.append(op_id)
        self.stage.append(stage)
        self.pass_.append(pass_)
        self.tiles.append(int(tiles))
        self.bytes.append(int(bytes_))
        self.cycles.append(int(cycles))
        return len(self.type) - 1


@dataclass
class Compiled:
    """The compiled run: one program per IPU and the op mappings they share."""

    plan: Plan
    programs: list[IpuProgram]
    mappings: dict[int, Mapping]
    weight_mappings: dict[int, Mapping]


class Compiler:
    """Lowers a Plan into per-IPU programs (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.target = plan.target
        self.options = plan.options
        self.tiles = plan.target.tiles
        self.costs = cost_model(plan)
        self.dt = self.costs.dtype_bytes
        self.a = plan.target.assumptions
        self.stage_of = plan.stage_of_op()
        self.ops = {op.op_id: op for s in plan.stages for op in s.ops}
        self._signatures: dict[int, tuple] = {}  # op id -> its work signature (see _pass_costs)
        self._costs: dict[tuple[tuple, int, float], tuple[int, int, np.ndarray, np.ndarray, int]] = {}
        self.outlining = plan.options.enable_outlining
        mapper = TileMapper(self.tiles, self.outlining)
        self.mappings = {op_id: mapper.map(op) for op_id, op in self.ops.items()}
        # Weights an op reads: its own, and a matrix tied to another op's (a decoder's embedding).
        self.weight_mappings = {op_id: mapper.map_weights(op, self.mappings[op_id])
                                for op_id, op in self.ops.items() if op.weight_params}
        self.state_mappings = mapper.map_state(plan.stages)
        locations = plan.options.tensor_locations
        self.weights_streamed = plan.strategy == "phased" or not locations.weights_on_chip
        self.optimiser_off_chip = not locations.optimiser_on_chip
        self.activations_off_chip = not locations.activations_on_chip
        self.rts = plan.optimiser_shards > 1
        # Activations kept for several micro-batches at once: a training pipeline's in-flight
        # micro-batches, or every micro-batch of the step under phased execution.
        self.pipelined_training = plan.training and (
            (plan.pipelined and plan.pipeline_depth > 1) or plan.strategy == "phased")
        # Phased execution over stages on distinct IPUs: a pipeline whose stages stream each
        # weighted op's weights just before it (a phase per op), overlapped with the compute before.
        self.phased_pipeline = plan.strategy == "phased" and plan.pipelined
        self.shards = plan.tensor_sharding
        # consumers of each op's output, by op id
        self.consumers: dict[int, list[int]] = {}
        for op in self.ops.values():
            for t in op.inputs:
                self.consumers.setdefault(t.producer, []).append(op.op_id)

    # -- costs (engine/costs.py) ----------------------------------------------------------------

    def _mapped_cycles(self, mapping: Mapping, grain_cycles: float, amp: bool = False) -> np.ndarray:
        """``_tile_cycles`` of a mapping's grains, computed once per split and grain cost (read-only)."""
        key = ("cycles", grain_cycles, amp)
        out = mapping.cache.get(key)
        if out is None:
            out = self.costs.tile_cycles(mapping.grains, grain_cycles, amp)
            out.flags.writeable = False
            mapping.cache[key] = out
        return out

    # -- lowering ----------------------------------------------------------------------------

    def _lower_op(self, prog: IpuProgram, op: Op, stage: int, pass_: str, suffix: str, factor: int) -> tuple[int, int]:
        """sync -> exchange -> compute set for one op pass; returns (exchange step, compute step)."""
        mapping = self.mappings[op.op_id]
        label = f"{op.name}/{suffix}"
        first = prog.add("sync", f"{label}/sync", op.op_id, stage, pass_, self.tiles, 0, self.a.tile_sync_cycles)
        per_tile, ex_cycles, received, cycles, slowest = self._pass_costs(op, mapping, factor, prog.ipu)
        ex_step = prog.add("exchange", f"{label}/exchange", op.op_id, stage, pass_, mapping.tiles,
                           per_tile * mapping.tiles, ex_cycles)
        prog.exchanges.append((ex_step, "internal", prog.ipu, prog.ipu, per_tile * mapping.tiles, ex_cycles))
        if op.kind in STATISTICS_FLOPS:
            self._lower_statistics(prog, op, mapping, stage, pass_, label)
        prog.variables.append(Variable(f"{label}/exchange_buffer", "exchange_buffers", False, mapping.start,
                                       received, ex_step, prog.steps, op.op_id))
        cs = prog.add("compute_set", label, op.op_id, stage, pass_, mapping.tiles, 0, slowest)
        prog.tile_cycles.append((cs, mapping.start, cycles, mapping.grains))
        if self.shards > 1:
            # Tensor sharding: a row-parallel op's partial outputs are all-reduced over the stage's
            # shards in the forward (and recomputation); a column-parallel op's input gradient in
            # the backward. Reduce-scatter then all-gather, a ring over IPU-Links.
            if op.shard == "row" and (pass_ == "forward" or suffix.startswith("recompute")):
                self._shard_all_reduce(prog, f"{label}/all_reduce", op, stage, pass_, op.output.bytes)
            elif op.shard == "column" and suffix == "bwd":
                grads = sum(t.bytes for t in op.inputs if t.dtype != "int32")
                if grads:
                    self._shard_all_reduce(prog, f"{label}/all_reduce", op, stage, pass_, grads)
        # Recomputation reuses the forward codelets.
        codelet = (op.kind, "forward" if suffix.startswith("recompute") else pass_)
        mask = prog.codelets.setdefault(codelet, np.zeros(self.tiles, dtype=bool))
        mask[mapping.start:mapping.start + mapping.tiles] = True
        # Outlined, a recomputation is a call of the forward's subgraph and a repeated layer's pass a
        # call of the first layer's: one copy of the pass's vertex state, exchange and control code.
        if self.outlining:
            key: tuple = (outline_key(op), "fwd" if suffix == "recompute" else suffix, factor, mapping.start)
        else:
            key = (op.op_id, suffix)
        steps = prog.steps - first
        prog.code_sets.setdefault(key, (mapping.start, mapping.grains, received, steps))
        prog.op_steps += steps
        prog.op_passes += 1
        return ex_step, cs

    def _lower_statistics(self, prog: IpuProgram, op: Op, mapping: Mapping, stage: int, pass_: str,
                          label: str) -> None:
        """A normalisation's (or softmax's) statistics before the compute set that applies them: each
        tile reduces its elements to partial sums (a compute set), the partials of every group cross
        tiles to be reduced and the results come back (an exchange), then a sync. See
        ``CostModel.statistics``."""
        key = ("statistics", op.kind, id(mapping.grains), op.output.elements)
        costs = mapping.cache.get(key)
        if costs is None:
            partials, ex_cycles, grain_cycles = self.costs.statistics(op, mapping.tiles)
            costs = mapping.cache[key] = (partials, ex_cycles, self._mapped_cycles(mapping, grain_cycles))
        partials, ex_cycles, cycles = costs
        cs = prog.add("compute_set", f"{label}/statistics", op.op_id, stage, pass_, mapping.tiles, 0, int(cycles.max()))
        prog.tile_cycles.append((cs, mapping.start, cycles, mapping.grains))
        prog.add("sync", f"{label}/statistics/sync", op.op_id, stage, pass_, self.tiles, 0, self.a.tile_sync_cycles)
        ex = prog.add("exchange", f"{label}/statistics/exchange", op.op_id, stage, pass_, mapping.tiles,
                      partials * mapping.tiles, ex_cycles)
        prog.exchanges.append((ex, "internal", prog.ipu, prog.ipu, partials * mapping.tiles, ex_cycles))

    def _pass_costs(self, op: Op, mapping: Mapping, factor: int,
                    ipu: int = 0) -> tuple[int, int, np.ndarray, np.ndarray, int]:
        """An op pass's exchange (bytes on the busiest tile, cycles, each tile's buffer) and compute
        set (cycles per tile, the slowest): computed once per work signature and factor, so the
        repeated layers of a model (and a pass's recomputation) reuse their first layer's figures."""
        key = self._signatures.get(op.op_id)
        if key is None:
            # Everything the figures below read from the op; equal splits share one grains array.
            key = self._signatures[op.op_id] = (
                id(mapping.grains), op.kind, op.gemm, op.groups, op.weight_params, op.flops, op.bytes, op.output.bytes,
                tuple(t.bytes for t in op.inputs))
        # IPUs with different available memory proportions serialise the same op differently.
        cache_key = (key, factor, self.options.memory_proportion(ipu))
        costs = self._costs.get(cache_key)
        if costs is not None:
            return costs
        per_tile = self.costs.exchange_bytes_per_tile(op, mapping.tiles, factor)
        # Poplar's available memory proportion bounds a matmul's / convolution's temporary memory
        # per tile; above it the planner serialises the op into pieces that exchange and compute in
        # turn: smaller buffers, one more exchange and compute-set launch per piece.
        serial = self.costs.serial_pieces(op, per_tile // factor, ipu)
        ex_cycles = self.costs.exchange_cycles(per_tile, serial)
        # The backward's two products exchange one after the other: the buffer holds one at a time.
        # Each tile's buffer holds what it receives (its grains' share of the busiest tile's bytes),
        # live only over this exchange and the compute set that reads it.
        received = mapping.scaled(per_tile // factor // serial)
        # Backward on the matrix units computes two products (input and weight gradients); on the
        # vector units the gradient costs about what the forward did.
        flops = op.flops * factor if op.on_amp else op.flops
        moved = op.bytes * factor
        cycles = self._mapped_cycles(mapping, self.costs.grain_cycles(op, flops, moved, op.grains, mapping.tiles), op.on_amp)
        if serial > 1:
            cycles = cycles + self.costs.serial_overhead_cycles(serial)
            cycles.flags.writeable = False
        costs = self._costs[cache_key] = (per_tile, ex_cycles, received, cycles, int(cycles.max()))
        return costs

    def _shard_all_reduce(self, prog: IpuProgram, name: str, op: Op, stage: int, pass_: str, shard_bytes: int) -> int:
        """All-reduce of a tensor whose shard on this IPU is ``shard_bytes`` over the T shards."""
        ring, cycles = self.costs.shard_all_reduce(shard_bytes)
        step = prog.add("global_exchange", name, op.op_id, stage, pass_, self.mappings[op.op_id].tiles, ring, cycles)
        prog.exchanges.append((step, "inter_ipu", prog.ipu, prog.ipu, ring, cycles))
        return step

    def _stream(self, prog: IpuProgram, name: str, op_id: int, stage: int, pass_: str, nbytes: int) -> int:
        """A phase's weight load (and the previous phase's gradient store) through Poplar's I/O
        tiles, overlapped with the compute since the previous transfer: the step lasts only the part
        not hidden (at least a sync with the I/O tiles); the exchanges table keeps the full transfer."""
        full = self.costs.stream_cycles(nbytes)
        hidden = sum(prog.cycles[self._stream_mark:])
        exposed = max(self.a.tile_sync_cycles, full - hidden)
        tiles = self.weight_mappings[op_id].tiles if op_id in self.weight_mappings else self.tiles
        step = prog.add("remote_buffer_copy", name, op_id, stage, pass_, tiles, nbytes, exposed)
        prog.exchanges.append((step, "remote_buffer", -2, prog.ipu, nbytes, full))
        self._stream_mark = prog.steps
        return step

    def _phase(self, prog: IpuProgram, op: Op, stage: StagePlan, pass_: str, suffix: str, factor: int,
               pending: list) -> int:
        """One op under the phased pipeline: stream its weights in (with the pending gradient store),
        then sync -> exchange -> compute set. Returns the compute set."""
        load = -1
        if op.weight_params:
            nbytes = op.weight_params * self.dt + sum(b for _, b in pending)
            load = self._stream(prog, f"{op.name}/{suffix}/weights_from_remote", op.op_id, stage.index, pass_, nbytes)
            for grad_op, _ in pending:
                self._grad_spans.append((grad_op, load))
            pending.clear()
        _, cs = self._lower_op(prog, op, stage.index, pass_, suffix, factor)
        if op.weight_params:
            # double-buffered: the weights arrive while the previous phase computes
            self._weight_spans.append((op.op_id, self._prev_load if self._prev_load >= 0 else load, cs))
            self._prev_load = load
            if suffix == "bwd":
                pending.append((op.op_id, op.weight_params * self.dt))
        return cs

    def _copy(self, prog: IpuProgram, type_: str, kind: str, name: str, stage: int, pass_: str, nbytes: int,
              src: int, dst: int, bytes_per_s: float, tiles: int, op_id: int = -1) -> int:
        cycles = self.costs.copy_cycles(nbytes, bytes_per_s)
        step = prog.add(type_, name, op_id, stage, pass_, tiles, nbytes, cycles)
        prog.exchanges.append((step, kind, src, dst, nbytes, cycles))
        return step

    def _stage_inputs(self, stage: StagePlan) -> list[tuple[Tensor, int]]:
        """Tensors the stage receives (once each) and the op that first consumes each."""
        seen: dict[tuple, tuple[Tensor, int]] = {}
        for op in stage.ops:
            for t in op.inputs:
                if t.producer < 0 or self.stage_of[t.producer] != stage.index:
                    seen.setdefault((t.producer, t.shape), (t, op.op_id))
        return list(seen.values())

    def _stage_outputs(self, stage: StagePlan) -> list[Tensor]:
        """Tensors produced in the stage and used by later stages (sent once each)."""
        out = {}
        for op in stage.ops:
            for consumer in self.consumers.get(op.op_id, []):
                if self.stage_of[consumer] != stage.index:
                    out[op.op_id] = op.output
        return list(out.values())

    def _segments(self, stage: StagePlan) -> list[list[Op]]:
        """The stage's recomputation segments, in program order: the backward recomputes one segment
        from its checkpoints, then runs its backward. One per block (``recompute_checkpoints``
        "blocks"), per k consecutive blocks (k), or the whole stage ("stage": only its inputs are
        kept, as PopART's RecomputationType::Pipeline stashes only a pipeline stage's inputs)."""
        groups: dict[str, list[Op]] = {}
        for op in stage.ops:
            groups.setdefault(op.block, []).append(op)
        blocks = list(groups.values())
        every = self.options.recompute_checkpoints
        if every == "stage":
            return [list(stage.ops)]
        k = 1 if every == "blocks" else int(every)
        return [[op for block in blocks[i:i + k] for op in block] for i in range(0, len(blocks), k)]

    def _checkpoints(self, stage: StagePlan) -> list[Op]:
        """Ops whose outputs a later segment of the same stage reads: the recomputation checkpoints."""
        segment = {op.op_id: k for k, ops in enumerate(self._segments(stage)) for op in ops}
        out = []
        for op in stage.ops:
            if any(self.stage_of[c] == stage.index and segment[c] != segment[op.op_id]
                   for c in self.consumers.get(op.op_id, [])):
                out.append(op)
        return out

    def _stash_bytes(self, stage: StagePlan) -> int:
        """Bytes of one micro-batch's stash written to (and read back from) streaming memory: every
        activation, or with recomputation only the stage's inputs and the block checkpoints."""
        if not self.options.recompute:
            return sum(op.output.bytes for op in stage.ops)
        inputs = sum(t.bytes for t, _ in self._stage_inputs(stage))
        return inputs + sum(op.output.bytes for op in self._checkpoints(stage))

    def _stash_depth(self, stage: StagePlan) -> int:
        """Micro-batches whose activations a stage holds at once: 2(N-1-s)+1 in a training pipeline
        of N IPUs (s: the rank of the stage's IPU), all of the step's micro-batches under phased
        execution, else one."""
        if not self.pipelined_training:
            return 1
        if self.plan.strategy == "phased" and not self.plan.pipelined:
            return self.options.gradient_accumulation
        return 2 * (self.plan.pipeline_depth - 1 - self.plan.pipeline_rank(stage)) + 1

    def compile(self, progress: Callable[[], None] = lambda: None) -> Compiled:
        """Lower every IPU's program and its variables."""
        programs = []
        for ipu in range(self.plan.num_ipus):
            programs.append(self._compile_ipu(ipu))
            progress()
        return Compiled(self.plan, programs, self.mappings, self.weight_mappings)

    def _compile_ipu(self, ipu: int) -> IpuProgram:
        prog = IpuProgram(ipu)
        stages = [s for s in self.plan.stages if s.ipu == ipu]
        training = self.plan.training
        # where each op's forward compute set, backward compute set, recompute set lie
        fwd_cs: dict[int, int] = {}
        bwd_cs: dict[int, int] = {}
        recompute_cs: dict[int, int] = {}
        again_cs: dict[int, int] = {}  # a serialised attention piece's second recomputation
        weight_loads: dict[int, list[tuple[int, str]]] = {}  # op -> [(load step, pass it feeds)]
        stage_input_vars: dict[int, list[Variable]] = {}
        self._weight_spans: list[tuple[int, int, int]] = []  # phased pipeline: (op, live from, live to)
        self._grad_spans: list[tuple[int, int]] = []  # (op, step its gradient is streamed out)
        self._tied_copies: dict[int, int] = {}  # op -> step its tied weights arrive from the owner's IPU
        self._tied_grads: dict[int, int] = {}  # op -> step their gradient goes back
        for stage in stages:
            if self.weights_streamed and not self.phased_pipeline:
                self._load_weights(prog, stage, "forward", weight_loads)
            first = prog.steps
            inputs = []
            for tensor, consumer in self._stage_inputs(stage):
                cmap = self.mappings[consumer]
                if tensor.producer < 0:
                    step = self._copy(prog, "stream_copy", "host", "input/from_host", stage.index, "forward",
                                      tensor.bytes, -1, ipu, self.target.host_bytes_per_s_per_ipu, cmap.tiles)
                else:
                    src_ipu = self.plan.stages[self.stage_of[tensor.producer]].ipu
                    if src_ipu == ipu:
                        step = prog.steps  # produced earlier on this IPU: live from the stage's start
                    else:
                        step = self._copy(prog, "global_exchange", "inter_ipu",
                                          f"stage{stage.index}/from_ipu{src_ipu}", stage.index, "forward",
                                          tensor.bytes, src_ipu, ipu, self.target.ipu_neighbour_bytes_per_s,
                                          cmap.tiles)
                inputs.append((tensor, consumer, step))
            if training and any(op.kind == "cross_entropy" for op in stage.ops):
                labels = self.options.micro_batch_size * 4
                self._copy(prog, "stream_copy", "host", "labels/from_host", stage.index, "forward", labels, -1,
                           ipu, self.target.host_bytes_per_s_per_ipu, 1)
            self._stream_mark, self._prev_load = prog.steps, -1
            for op in stage.ops:
                if self._tied_elsewhere(op, ipu):
                    self._tied_copies[op.op_id] = self._tied_copy(prog, op, stage.index, "forward")
                if self.phased_pipeline:
                    fwd_cs[op.op_id] = self._phase(prog, op, stage, "forward", "fwd", 1, [])
                else:
                    _, fwd_cs[op.op_id] = self._lower_op(prog, op, stage.index, "forward", "fwd", 1)
            if self.activations_off_chip and training:
                stash = self._stash_bytes(stage)
                self._copy(prog, "remote_buffer_copy", "remote_buffer", f"stage{stage.index}/stash_to_remote",
                           stage.index, "forward", stash, ipu, -2, self.a.streaming_memory_bytes_per_s, self.tiles)
            last = stage.ops[-1]
            if not training and last.op_id == max(self.ops):
                self._copy(prog, "stream_copy", "host", "output/to_host", stage.index, "forward", last.output.bytes,
                           ipu, -1, self.target.host_bytes_per_s_per_ipu, self.mappings[last.op_id].tiles)
            elif training and last.kind == "cross_entropy":
                self._copy(prog, "stream_copy", "host", "loss/to_host", stage.index, "forward", last.output.bytes,
                           ipu, -1, self.target.host_bytes_per_s_per_ipu, 1)
            prog.segments[(stage.index, "forward")] = (first, prog.steps)
            stage_input_vars[stage.index] = self._input_variables(prog, stage, inputs)
        if training:
            for stage in reversed(stages):
                if self.weights_streamed and not self.phased_pipeline:
                    self._load_weights(prog, stage, "backward", weight_loads)
                first = prog.steps
                for tensor in self._stage_outputs(stage):
                    consumer_stage = min(self.stage_of[c] for c in self.consumers[tensor.producer]
                                         if self.stage_of[c] != stage.index)
                    dst_ipu = self.plan.stages[consumer_stage].ipu
                    if dst_ipu != ipu:
                        self._copy(prog, "global_exchange", "inter_ipu", f"stage{stage.index}/grad_from_ipu{dst_ipu}",
                                   stage.index, "backward", tensor.bytes, dst_ipu, ipu,
                                   self.target.ipu_neighbour_bytes_per_s, self.mappings[tensor.producer].tiles)
                if self.activations_off_chip:
                    stash = self._stash_bytes(stage)
                    self._copy(prog, "remote_buffer_copy", "remote_buffer", f"stage{stage.index}/stash_from_remote",
                               stage.index, "backward", stash, -2, ipu, self.a.streaming_memory_bytes_per_s,
                               self.tiles)
                # With recomputation, each segment's output is a checkpoint (by default every block:
                # Graphcore's recompute_checkpoint_every_layer): the backward recomputes one segment
                # from its checkpoints, then runs that segment's backward, so one segment's
                # activations live at a time.
                self._stream_mark, self._prev_load, pending = prog.steps, -1, []
                for block_ops in (reversed(self._segments(stage)) if self.options.recompute else [stage.ops]):
                    if self.options.recompute:
                        for op in block_ops:
                            if self.phased_pipeline:  # the recomputation streams the weights again
                                recompute_cs[op.op_id] = self._phase(prog, op, stage, "backward", "recompute", 1,
                                                                     pending)
                            else:
                                _, recompute_cs[op.op_id] = self._lower_op(prog, op, stage.index, "backward",
                                                                           "recompute", 1)
                    for op in reversed(block_ops):
                        if self.options.recompute and op.piece >= 0 and self._piece_end(op):
                            # A serialised attention piece: its scores and probabilities are
                            # recomputed again just before its backward, so no two pieces' are live.
                            for other in block_ops:
                                if other.piece == op.piece and other is not op:
                                    _, again_cs[other.op_id] = self._lower_op(prog, other, stage.index, "backward",
                                                                              "recompute_again", 1)
                        if self.phased_pipeline:
                            bwd_cs[op.op_id] = self._phase(prog, op, stage, "backward", "bwd", 2, pending)
                        else:
                            _, bwd_cs[op.op_id] = self._lower_op(prog, op, stage.index, "backward", "bwd", 2)
                for op in stage.ops:
                    if op.op_id in self._tied_copies:
                        self._tied_grads[op.op_id] = self._tied_copy(prog, op, stage.index, "backward")
                if pending:
                    # the last phase's gradients, accumulated in streaming memory
                    store = self._stream(prog, f"stage{stage.index}/grads_to_remote", pending[0][0], stage.index,
                                         "backward", sum(b for _, b in pending))
                    self._grad_spans.extend((g, store) for g, _ in pending)
                if self.weights_streamed and not self.phased_pipeline and any(op.weight_params for op in stage.ops):
                    grads = sum(op.weight_params for op in stage.ops) * self.dt
                    self._copy(prog, "remote_buffer_copy", "remote_buffer", f"stage{stage.index}/grads_to_remote",
                               stage.index, "backward", grads, ipu, -2, self.a.streaming_memory_bytes_per_s,
                               self.tiles)
                prog.segments[(stage.index, "backward")] = (first, prog.steps)
        prog.sync_step = prog.add("sync", "pipeline/sync", -1, -1, "none", self.tiles, 0,
                                  self.target.sync_cycles(self.plan.num_ipus))
        first = prog.steps
        update_steps: dict[int, tuple[int, int]] = {}
        if training:
            weighted = [op for s in stages for op in s.ops if op.params]
            replicas = self.options.replication_factor
            if replicas > 1 and weighted:
                grads = sum(op.params for op in weighted) * self.costs.reduced_gradient_bytes
                ring, cycles = self.costs.gradient_all_reduce(grads, replicas)
                step = prog.add("all_reduce", "gradients/all_reduce", -1, -1, "update", self.tiles, int(ring), cycles)
                prog.exchanges.append((step, "all_reduce", ipu, ipu, int(ring), cycles))
            for op in weighted:
                update_steps[op.op_id] = self._lower_update(prog, op)
        prog.update_segment = (first, prog.steps)
        self._host_call(prog)
        self._input_wait(prog)
        self._variables(prog, stages, fwd_cs, bwd_cs, recompute_cs, update_steps, weight_loads, stage_input_vars,
                        again_cs)
        return prog

    def _piece_end(self, op: Op) -> bool:
        """The op is the last of its attention piece (no consumer in the same piece)."""
        return not any(self.ops[c].piece == op.piece for c in self.consumers.get(op.op_id, []))

    def _host_call(self, prog: IpuProgram) -> None:
        """Once per host call, on each IPU fed by the host: the call's latency (the segment ``"host_call"``)."""
        steps = set(prog.segments.get((s.index, "forward"), (0, 0)) for s in self.plan.stages if s.ipu == prog.ipu)
        per_micro_batch = sum(b for (step, kind, src, dst, b, _) in prog.exchanges if kind == "host" and src == -1
                              and any(first <= step < end for first, end in steps))
        if not per_micro_batch:
            return
        # The call's inputs cross the host link in the per-micro-batch stream copies (costed there, at
        # the PCIe share of this IPU), so the call itself adds only its latency.
        cycles = self.costs.host_call_cycles()
        first = prog.steps
        step = prog.add("stream_copy", "host/call", -1, -1, "none", 1, 0, cycles)
        prog.exchanges.append((step, "host", -1, prog.ipu, 0, cycles))
        prog.segments["host_call"] = (first, prog.steps)

    def _input_wait(self, prog: IpuProgram) -> None:
        """Once per host call, on every IPU: the wait for the host's data loaders (the segment
        ``"input_wait"``, a stream step without bytes). Its cycles depend on how long the rest of the
        call takes, so the scheduler sets them (``scheduler.set_input_wait``); 0 until then."""
        first = prog.steps
        prog.add("stream_copy", INPUT_WAIT, -1, -1, "none", self.tiles, 0, 0)
        prog.segments["input_wait"] = (first, prog.steps)

    def _tied_elsewhere(self, op: Op, ipu: int) -> bool:
        """The op reads a tied matrix whose owner is on another IPU, and weights live on chip."""
        return (op.tied_to >= 0 and not self.weights_streamed
                and self.plan.stages[self.stage_of[op.tied_to]].ipu != ipu)

    def _tied_copy(self, prog: IpuProgram, op: Op, stage: int, pass_: str) -> int:
        """PopART copies a weight consumed on another IPU (an IpuCopy): the tied matrix comes from
        its owner's IPU before the op's forward, and its gradient goes back after the backward,
        once per micro-batch, over IPU-Links."""
        owner = self.plan.stages[self.stage_of[op.tied_to]].ipu
        src, dst, what = (owner, prog.ipu, "from") if pass_ == "forward" else (prog.ipu, owner, "to")
        return self._copy(prog, "global_exchange", "inter_ipu", f"{op.name}/tied_weights_{what}_ipu{owner}", stage,
                          pass_, op.tied_params * self.dt, src, dst, self.target.ipu_neighbour_bytes_per_s,
                          self.weight_mappings[op.op_id].tiles, op.op_id)

    def _load_weights(self, prog: IpuProgram, stage: StagePlan, pass_: str,
                      loads: dict[int, list[tuple[int, str]]]) -> None:
        """A segment of its own, ``(stage, "<pass>/load")``, that streams the stage's weights in: the
        scheduler runs it before each pass (pipelined, sharded) or once per phase (phased)."""
        weights = sum(op.weight_params for op in stage.ops) * self.dt
        if not weights:
            return
        first = prog.steps
        step = self._copy(prog, "remote_buffer_copy", "remote_buffer", f"stage{stage.index}/weights_from_remote",
                          stage.index, pass_, weights, -2, prog.ipu, self.a.streaming_memory_bytes_per_s, self.tiles)
        prog.segments[(stage.index, f"{pass_}/load")] = (first, prog.steps)
        for op in stage.ops:
            if op.weight_params:
                loads.setdefault(op.op_id, []).append((step, pass_))

    def _lower_update(self, prog: IpuProgram, op: Op) -> tuple[int, int]:
        """Remote loads, the optimiser's compute set and remote stores for one weighted op."""
        wmap = self.state_mappings[op.op_id]
        state = self.costs.optimiser_state_bytes
        params, flops, moved = self.costs.update_work(op.params)
        stage = self.stage_of[op.op_id]
        optimiser = params * state if self.optimiser_off_chip else 0
        weights = op.params * self.dt if self.weights_streamed else 0
        # streamed weights come in with their gradients, accumulated in streaming memory over the
        # micro-batches (as many bytes); the updated weights go back out, the gradients are spent
        incoming = optimiser + weights + weights
        first = prog.steps
        if incoming:
            self._copy(prog, "remote_buffer_copy", "remote_buffer", f"{op.name}/update/from_remote", stage, "update",
                       incoming, -2, prog.ipu, self.a.streaming_memory_bytes_per_s, wmap.tiles, op.op_id)
        # On-chip weights lie on their op's tiles, the state on its own: the update gathers the
        # weights (and a gradient not already accumulated there) onto the state's tiles first, and
        # writes the new weights back after.
        home = self.weight_mappings[op.op_id]
        gathered = 0
        if not self.weights_streamed and (home.start, home.tiles) != (wmap.start, wmap.tiles):
            grads_there = self.options.gradient_accumulation > 1
            gathered = op.params * self.dt * (1 if grads_there else 2)
        received = None
        steps_before = prog.steps
        if gathered:
            received = wmap.share(gathered)
            busiest = int(received.max())
            prog.add("sync", f"{op.name}/update/sync", op.op_id, stage, "update", self.tiles, 0,
                     self.a.tile_sync_cycles)
            ex = prog.add("exchange", f"{op.name}/update/exchange", op.op_id, stage, "update", wmap.tiles,
                          busiest * wmap.tiles, self.costs.exchange_cycles(busiest))
            prog.exchanges.append((ex, "internal", prog.ipu, prog.ipu, busiest * wmap.tiles,
                                   self.costs.exchange_cycles(busiest)))
            prog.variables.append(Variable(f"{op.name}/update/exchange_buffer", "exchange_buffers", False,
                                           wmap.start, received, ex, ex + 1, op.op_id))
        grains = int(wmap.grains.sum())
        grain_cycles = max(flops / grains / self.target.vector_flops_per_cycle("fp32"),
                           moved / grains / self.target.memory_bytes_per_cycle_per_tile)
        cycles = self._mapped_cycles(wmap, grain_cycles)
        cs = prog.add("compute_set", f"{op.name}/update", op.op_id, stage, "update", wmap.tiles, 0, int(cycles.max()))
        prog.tile_cycles.append((cs, wmap.start, cycles, wmap.grains))
        last = cs
        if gathered:
            back = int(home.share(op.params * self.dt).max())
            last = prog.add("exchange", f"{op.name}/update/write_back", op.op_id, stage, "update", home.tiles,
                            back * home.tiles, self.costs.exchange_cycles(back))
            prog.exchanges.append((last, "internal", prog.ipu, prog.ipu, back * home.tiles,
                                   self.costs.exchange_cycles(back)))
        key = (("update", op.params, gathered), wmap.start) if self.outlining else (op.op_id, "update")
        prog.code_sets.setdefault(key, (wmap.start, wmap.grains, received, prog.steps - steps_before))
        prog.op_steps += prog.steps - steps_before
        prog.op_passes += 1
        mask = prog.codelets.setdefault(("optimiser", "update"), np.zeros(self.tiles, dtype=bool))
        mask[wmap.start:wmap.start + wmap.tiles] = True
        outgoing = optimiser + weights
        if outgoing:
            last = self._copy(prog, "remote_buffer_copy", "remote_buffer", f"{op.name}/update/to_remote", stage,
                              "update", outgoing, prog.ipu, -2, self.a.streaming_memory_bytes_per_s, wmap.tiles,
                              op.op_id)
        return first, last

    # -- memory ------------------------------------------------------------------------------

    def _input_variables(self, prog: IpuProgram, stage: StagePlan,
                         inputs: list[tuple[Tensor, int, int]]) -> list[Variable]:
        """The tensors a stage receives; kept (stashed) for the backward pass when training."""
        # Offloaded activations stash in streaming memory: one micro-batch's copy is on chip.
        stashed = self.pipelined_training and not self.activations_off_chip
        category = "stash" if stashed else "activations"
        depth = self._stash_depth(stage) if stashed else 1
        out = []
        for tensor, consumer, step in inputs:
            cmap = self.mappings[consumer]
            name = "input" if tensor.producer < 0 else f"{self.ops[tensor.producer].name}/output"
            var = Variable(f"stage{stage.index}/{name}", category, False, cmap.start,
                           cmap.share(tensor.bytes * depth), step, step, consumer)
            prog.variables.append(var)
            out.append(var)
        return out

    def _variables(self, prog: IpuProgram, stages: list[StagePlan], fwd_cs: dict[int, int], bwd_cs: dict[int, int],
                   recompute_cs: dict[int, int], update_steps: dict[int, tuple[int, int]],
                   weight_loads: dict[int, list[tuple[int, str]]], stage_inputs: dict[int, list[Variable]],
                   again_cs: dict[int, int] | None = None) -> None:
        again_cs = again_cs or {}
        training = self.plan.training
        last_step = prog.steps - 1
        state_bytes = self.costs.optimiser_state_bytes
        combined = self.costs.combined_accumulator
        shard = self.plan.optimiser_shards
        ga = self.options.gradient_accumulation
        weight_spans: dict[int, list[tuple[int, int]]] = {}
        for op_id, live_from, live_to in self._weight_spans:
            weight_spans.setdefault(op_id, []).append((live_from, live_to))
        grad_spans: dict[int, list[int]] = {}
        for op_id, store in self._grad_spans:
            grad_spans.setdefault(op_id, []).append(store)
        for stage in stages:
            depth = self._stash_depth(stage)
            checkpoints = {op.op_id for op in self._checkpoints(stage)} if training and self.options.recompute else set()
            fwd_end = prog.segments[(stage.index, "forward")][1]
            # Stage inputs: live from their arrival to their last use (the first op's backward).
            for var in stage_inputs[stage.index]:
                consumer = var.op_id
                var.live_to = bwd_cs[consumer] if training else self._last_use(consumer, fwd_cs, fwd_end - 1)
            for op in stage.ops:
                mapping = self.mappings[op.op_id]
                produced = fwd_cs[op.op_id]
                last_use = self._last_use(op.op_id, fwd_cs, fwd_end - 1)
                if training and not self.options.recompute:
                    # Saved for the backward pass: in a pipeline, one copy per micro-batch in flight.
                    category = "stash" if self.pipelined_training else "activations"
                    prog.variables.append(Variable(f"{op.name}/output", category, False, mapping.start,
                                                   mapping.share(op.output.bytes * depth), produced,
                                                   max(bwd_cs[op.op_id], last_use), op.op_id))
                else:
                    prog.variables.append(Variable(f"{op.name}/output", "activations", False, mapping.start,
                                                   mapping.share(op.output.bytes), produced, last_use, op.op_id))
                if op.op_id in checkpoints and not self.activations_off_chip:
                    # A checkpoint is kept, one copy per micro-batch in flight, until the backward of
                    # the block that reads it.
                    reader = max(bwd_cs[c] for c in self.consumers[op.op_id] if c in bwd_cs)
                    category = "stash" if self.pipelined_training else "activations"
                    prog.variables.append(Variable(f"{op.name}/checkpoint", category, False, mapping.start,
                                                   mapping.share(op.output.bytes * depth), produced, reader,
                                                   op.op_id))
                if training:
                    if self.options.recompute and op.op_id in again_cs:
                        # recomputed once for the segment (read by its piece's next op), then again for
                        # its backward
                        readers = [recompute_cs[c] for c in self.consumers.get(op.op_id, []) if c in recompute_cs]
                        prog.variables.append(Variable(f"{op.name}/recomputed", "activations", False, mapping.start,
                                                       mapping.share(op.output.bytes), recompute_cs[op.op_id],
                                                       max(readers, default=recompute_cs[op.op_id]), op.op_id))
                        prog.variables.append(Variable(f"{op.name}/recomputed", "activations", False, mapping.start,
                                                       mapping.share(op.output.bytes), again_cs[op.op_id],
                                                       bwd_cs[op.op_id], op.op_id))
                    elif self.options.recompute:
                        prog.variables.append(Variable(f"{op.name}/recomputed", "activations", False, mapping.start,
                                                       mapping.share(op.output.bytes), recompute_cs[op.op_id],
                                                       bwd_cs[op.op_id], op.op_id))
                    # The gradient of the op's input: from its backward step to the previous op's.
                    grad_to = self._previous_backward(op, bwd_cs)
                    grad_bytes = sum(t.bytes for t in op.inputs if t.dtype != "int32")
                    if grad_bytes:
                        prog.variables.append(Variable(f"{op.name}/grad_input", "activations", False, mapping.start,
                                                       mapping.share(grad_bytes), bwd_cs[op.op_id], grad_to, op.op_id))
                if not op.weight_params:
                    continue
                wmap = self.weight_mappings[op.op_id]
                weights = wmap.share(op.params * self.dt)
                read = wmap.share(op.weight_params * self.dt)  # with a tied matrix
                if self.phased_pipeline:
                    for live_from, live_to in weight_spans.get(op.op_id, []):
                        prog.variables.append(Variable(f"{op.name}/weight", "weights", False, wmap.start,
                                                       read, live_from, live_to, op.op_id))
                if self.weights_streamed:
                    for step, pass_ in weight_loads.get(op.op_id, []):
                        end = prog.segments[(stage.index, pass_)][1] - 1
                        prog.variables.append(Variable(f"{op.name}/weight", "weights", False, wmap.start, read,
                                                       step, end, op.op_id))
                    if op.op_id in update_steps:
                        first, last = update_steps[op.op_id]
                        prog.variables.append(Variable(f"{op.name}/weight", "weights", False, wmap.start, weights,
                                                       first, last, op.op_id))
                elif op.params:
                    prog.variables.append(Variable(f"{op.name}/weight", "weights", True, wmap.start, weights, 0,
                                                   last_step, op.op_id))
                if op.op_id in self._tied_copies:
                    # The tied matrix's copy on this IPU: from its arrival to the backward (the forward,
                    # inference); its gradient from the backward until it is sent back.
                    tied = wmap.share(op.tied_params * self.dt)
                    arrive = self._tied_copies[op.op_id]
                    used = bwd_cs[op.op_id] if training else fwd_cs[op.op_id]
                    prog.variables.append(Variable(f"{op.name}/tied_weight", "weights", False, wmap.start, tied,
                                                   arrive, used, op.op_id))
                    if training:
                        prog.variables.append(Variable(f"{op.name}/tied_gradient", "gradients", False, wmap.start,
                                                       tied, bwd_cs[op.op_id], self._tied_grads[op.op_id],
                                                       op.op_id))
                if not training or not op.params:
                    if training and self.phased_pipeline:
                        for store in grad_spans.get(op.op_id, []):
                            prog.variables.append(Variable(f"{op.name}/gradient", "gradients", False, wmap.start,
                                                           read, bwd_cs[op.op_id], store, op.op_id))
                    continue
                smap = self.state_mappings[op.op_id]
                state = smap.share(math.ceil(op.params / shard) * state_bytes)
                first, last = update_steps[op.op_id]
                if self.optimiser_off_chip or self.weights_streamed:
                    prog.variables.append(Variable(f"{op.name}/optimiser_state", "optimiser_state", False,
                                                   smap.start, state, first, last, op.op_id))
                else:
                    prog.variables.append(Variable(f"{op.name}/optimiser_state", "optimiser_state", True, smap.start,
                                                   state, 0, last_step, op.op_id))
                grads = wmap.share(op.params * self.dt)
                if self.phased_pipeline:
                    for store in grad_spans.get(op.op_id, []):
                        prog.variables.append(Variable(f"{op.name}/gradient", "gradients", False, wmap.start,
                                                       read, bwd_cs[op.op_id], store, op.op_id))
                elif ga > 1 and not self.weights_streamed and not combined:
                    # SGD's combined velocity (above) accumulates the gradients itself: no accumulator.
                    prog.variables.append(Variable(f"{op.name}/grad_accumulator", "gradients", True, smap.start,
                                                   smap.share(op.params * self.costs.accumulator_bytes), 0,
                                                   last_step, op.op_id))
                else:
                    prog.variables.append(Variable(f"{op.name}/gradient", "gradients", False, wmap.start, grads,
                                                   bwd_cs[op.op_id], last, op.op_id))

    def _last_use(self, op_id: int, fwd_cs: dict[int, int], default: int) -> int:
        uses = [fwd_cs[c] for c in self.consumers.get(op_id, []) if c in fwd_cs]
        leaves = [c for c in self.consumers.get(op_id, []) if c not in fwd_cs]
        last = max(uses, default=fwd_cs[op_id])
        return max(last, default) if leaves or not uses else last

    def _previous_backward(self, op: Op, bwd_cs: dict[int, int]) -> int:
        producers = [t.producer for t in op.inputs if t.producer in bwd_cs]
        return max((bwd_cs[p] for p in producers), default=bwd_cs[op.op_id])


def cost_model(plan: Plan) -> CostModel:
    """The cost model of a checked plan: its target, options and how its tensors are split."""
    return CostModel(plan.target, plan.options, shards=plan.tensor_sharding, stream_shards=plan.optimiser_shards,
                     ipus=plan.num_ipus, input_kind=plan.options.host_input or plan.model.input_kind)


def compile_plan(plan: Plan, progress: Callable[[], None] = lambda: None) -> Compiled:
    """Compile a checked plan into per-IPU programs."""
    return Compiler(plan).compile(progress)
