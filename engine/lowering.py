"""The lowering: each IPU's ops, stages, copies and host call into program steps.

Per IPU, the program is, in order: the forward segment of each of its stages, their backward
segments (reverse order), the pipeline sync, then the weight-update segment (engine/update.py). A
segment is a run of program steps; each op pass lowers to the BSP triple sync -> exchange -> compute
set, and segments begin or end with the copies that feed them (host streams, inter-IPU copies,
remote buffers).
"""

from __future__ import annotations

import numpy as np

from popvision_py.format.schema import INPUT_WAIT_STEP as INPUT_WAIT

from engine.costs import STATISTICS_FLOPS
from engine.mapping import Mapping, outline_key
from engine.model import Op, Tensor
from engine.plan import StagePlan
from engine.program import IpuProgram, Variable


class Lowering:
    """The per-IPU lowering into program steps: a part of ``Compiler`` (engine/compiler.py), whose plan,
    cost model, mappings and tensor locations it reads; each IPU's program ends with its weight
    update (``WeightUpdate``, engine/update.py) and its variables (``Liveness``, engine/variables.py)."""

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
        # typed as its operands, the run's precision (a split reduction's FP32 partials are counted in it)
        prog.variables.append(Variable(f"{label}/exchange_buffer", "exchange_buffers", False, mapping.start,
                                       received, ex_step, prog.steps, op.op_id, self.options.precision))
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
        cycles = self._mapped_cycles(mapping, self.costs.grain_cycles(op, flops, moved, op.grains, mapping.tiles),
                                     op.on_amp)
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
        update_steps = self._lower_update_segment(prog, stages)
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
