"""Variables and liveness: the tensors of each IPU's program, bytes per tile, live over program steps.

Memory is planned per tile: always-live categories (code, vertex state, weights...) and
not-always-live variables with liveness intervals in program steps; a tile's peak is its
always-live bytes plus the most its not-always-live variables hold at any one step.
"""

from __future__ import annotations

import math

from engine.model import Op, Tensor
from engine.plan import StagePlan
from engine.program import IpuProgram, Variable


class Liveness:
    """The variables of an IPU's program and their liveness intervals: a part of ``Compiler``
    (engine/compiler.py), whose plan, mappings and tensor locations it reads, after the lowering
    (engine/lowering.py) has placed the program steps that produce and read each tensor."""

    def _stash_depth(self, stage: StagePlan) -> int:
        """Micro-batches whose activations a stage holds at once: 2(N-1-s)+1 in a training pipeline
        of N IPUs (s: the rank of the stage's IPU), all of the step's micro-batches under phased
        execution, else one."""
        if not self.pipelined_training:
            return 1
        if self.plan.strategy == "phased" and not self.plan.pipelined:
            return self.options.gradient_accumulation
        return 2 * (self.plan.pipeline_depth - 1 - self.plan.pipeline_rank(stage)) + 1

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
                           cmap.share(tensor.bytes * depth), step, step, consumer, tensor.dtype)
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
        dt = self.options.precision  # weights, their gradients and copies
        state_dtype = self.costs.optimiser_state_dtype
        weight_spans: dict[int, list[tuple[int, int]]] = {}
        for op_id, live_from, live_to in self._weight_spans:
            weight_spans.setdefault(op_id, []).append((live_from, live_to))
        grad_spans: dict[int, list[int]] = {}
        for op_id, store in self._grad_spans:
            grad_spans.setdefault(op_id, []).append(store)
        for stage in stages:
            depth = self._stash_depth(stage)
            recomputing = training and self.options.recompute
            checkpoints = {op.op_id for op in self._checkpoints(stage)} if recomputing else set()
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
                                                   max(bwd_cs[op.op_id], last_use), op.op_id, op.output.dtype))
                else:
                    prog.variables.append(Variable(f"{op.name}/output", "activations", False, mapping.start,
                                                   mapping.share(op.output.bytes), produced, last_use, op.op_id,
                                                   op.output.dtype))
                if op.op_id in checkpoints and not self.activations_off_chip:
                    # A checkpoint is kept, one copy per micro-batch in flight, until the backward of
                    # the block that reads it.
                    reader = max(bwd_cs[c] for c in self.consumers[op.op_id] if c in bwd_cs)
                    category = "stash" if self.pipelined_training else "activations"
                    prog.variables.append(Variable(f"{op.name}/checkpoint", category, False, mapping.start,
                                                   mapping.share(op.output.bytes * depth), produced, reader,
                                                   op.op_id, op.output.dtype))
                if training:
                    if self.options.recompute and op.op_id in again_cs:
                        # recomputed once for the segment (read by its piece's next op), then again for
                        # its backward
                        readers = [recompute_cs[c] for c in self.consumers.get(op.op_id, []) if c in recompute_cs]
                        prog.variables.append(Variable(f"{op.name}/recomputed", "activations", False, mapping.start,
                                                       mapping.share(op.output.bytes), recompute_cs[op.op_id],
                                                       max(readers, default=recompute_cs[op.op_id]), op.op_id,
                                                       op.output.dtype))
                        prog.variables.append(Variable(f"{op.name}/recomputed", "activations", False, mapping.start,
                                                       mapping.share(op.output.bytes), again_cs[op.op_id],
                                                       bwd_cs[op.op_id], op.op_id, op.output.dtype))
                    elif self.options.recompute:
                        prog.variables.append(Variable(f"{op.name}/recomputed", "activations", False, mapping.start,
                                                       mapping.share(op.output.bytes), recompute_cs[op.op_id],
                                                       bwd_cs[op.op_id], op.op_id, op.output.dtype))
                    # The gradient of the op's input: from its backward step to the previous op's.
                    grad_to = self._previous_backward(op, bwd_cs)
                    grads_of = [t for t in op.inputs if t.dtype != "int32"]
                    grad_bytes = sum(t.bytes for t in grads_of)
                    if grad_bytes:
                        types = {t.dtype for t in grads_of}
                        prog.variables.append(Variable(f"{op.name}/grad_input", "activations", False, mapping.start,
                                                       mapping.share(grad_bytes), bwd_cs[op.op_id], grad_to, op.op_id,
                                                       types.pop() if len(types) == 1 else "mixed"))
                if not op.weight_params:
                    continue
                wmap = self.weight_mappings[op.op_id]
                weights = wmap.share(op.params * self.dt)
                read = wmap.share(op.weight_params * self.dt)  # with a tied matrix
                if self.phased_pipeline:
                    for live_from, live_to in weight_spans.get(op.op_id, []):
                        prog.variables.append(Variable(f"{op.name}/weight", "weights", False, wmap.start,
                                                       read, live_from, live_to, op.op_id, dt))
                if self.weights_streamed:
                    for step, pass_ in weight_loads.get(op.op_id, []):
                        end = prog.segments[(stage.index, pass_)][1] - 1
                        prog.variables.append(Variable(f"{op.name}/weight", "weights", False, wmap.start, read,
                                                       step, end, op.op_id, dt))
                    if op.op_id in update_steps:
                        first, last = update_steps[op.op_id]
                        prog.variables.append(Variable(f"{op.name}/weight", "weights", False, wmap.start, weights,
                                                       first, last, op.op_id, dt))
                elif op.params:
                    prog.variables.append(Variable(f"{op.name}/weight", "weights", True, wmap.start, weights, 0,
                                                   last_step, op.op_id, dt))
                if op.op_id in self._tied_copies:
                    # The tied matrix's copy on this IPU: from its arrival to the backward (the forward,
                    # inference); its gradient from the backward until it is sent back.
                    tied = wmap.share(op.tied_params * self.dt)
                    arrive = self._tied_copies[op.op_id]
                    used = bwd_cs[op.op_id] if training else fwd_cs[op.op_id]
                    prog.variables.append(Variable(f"{op.name}/tied_weight", "weights", False, wmap.start, tied,
                                                   arrive, used, op.op_id, dt))
                    if training:
                        prog.variables.append(Variable(f"{op.name}/tied_gradient", "gradients", False, wmap.start,
                                                       tied, bwd_cs[op.op_id], self._tied_grads[op.op_id],
                                                       op.op_id, dt))
                if not training or not op.params:
                    if training and self.phased_pipeline:
                        for store in grad_spans.get(op.op_id, []):
                            prog.variables.append(Variable(f"{op.name}/gradient", "gradients", False, wmap.start,
                                                           read, bwd_cs[op.op_id], store, op.op_id, dt))
                    continue
                smap = self.state_mappings[op.op_id]
                state = smap.share(math.ceil(op.params / shard) * state_bytes)
                first, last = update_steps[op.op_id]
                if self.optimiser_off_chip or self.weights_streamed:
                    prog.variables.append(Variable(f"{op.name}/optimiser_state", "optimiser_state", False,
                                                   smap.start, state, first, last, op.op_id, state_dtype))
                else:
                    prog.variables.append(Variable(f"{op.name}/optimiser_state", "optimiser_state", True, smap.start,
                                                   state, 0, last_step, op.op_id, state_dtype))
                grads = wmap.share(op.params * self.dt)
                if self.phased_pipeline:
                    for store in grad_spans.get(op.op_id, []):
                        prog.variables.append(Variable(f"{op.name}/gradient", "gradients", False, wmap.start,
                                                       read, bwd_cs[op.op_id], store, op.op_id, dt))
                elif ga > 1 and not self.weights_streamed and not combined:
                    # SGD's combined velocity (above) accumulates the gradients itself: no accumulator.
                    prog.variables.append(Variable(f"{op.name}/grad_accumulator", "gradients", True, smap.start,
                                                   smap.share(op.params * self.costs.accumulator_bytes), 0,
                                                   last_step, op.op_id, self.options.accum_type or dt))
                else:
                    prog.variables.append(Variable(f"{op.name}/gradient", "gradients", False, wmap.start, grads,
                                                   bwd_cs[op.op_id], last, op.op_id, dt))

    def _last_use(self, op_id: int, fwd_cs: dict[int, int], default: int) -> int:
        uses = [fwd_cs[c] for c in self.consumers.get(op_id, []) if c in fwd_cs]
        leaves = [c for c in self.consumers.get(op_id, []) if c not in fwd_cs]
        last = max(uses, default=fwd_cs[op_id])
        return max(last, default) if leaves or not uses else last

    def _previous_backward(self, op: Op, bwd_cs: dict[int, int]) -> int:
        producers = [t.producer for t in op.inputs if t.producer in bwd_cs]
        return max((bwd_cs[p] for p in producers), default=bwd_cs[op.op_id])
