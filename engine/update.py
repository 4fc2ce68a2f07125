"""The weight update's lowering: the segment after the pipeline sync that applies the optimiser.

Per IPU: the replicas' gradient all-reduce, then per weighted op the remote loads of its optimiser
state (and streamed weights), the gather of its weights onto the state's tiles, the optimiser's
compute set, the write-back and the remote stores.
"""

from __future__ import annotations

import numpy as np

from engine.model import Op
from engine.plan import StagePlan
from engine.program import IpuProgram, Variable


class WeightUpdate:
    """The weight-update segment's lowering: a part of ``Compiler`` (engine/compiler.py), whose plan,
    cost model, mappings and tensor locations it reads, and whose copies (``Lowering._copy``) it uses."""

    def _lower_update_segment(self, prog: IpuProgram, stages: list[StagePlan]) -> dict[int, tuple[int, int]]:
        """The IPU's weight-update segment (``prog.update_segment``): the replicas' gradient all-reduce,
        then each weighted op's update. Returns each op's (first, last) update steps."""
        first = prog.steps
        update_steps: dict[int, tuple[int, int]] = {}
        if self.plan.training:
            weighted = [op for s in stages for op in s.ops if op.params]
            replicas = self.options.replication_factor
            if replicas > 1 and weighted:
                grads = sum(op.params for op in weighted) * self.costs.reduced_gradient_bytes
                ring, cycles = self.costs.gradient_all_reduce(grads, replicas)
                step = prog.add("all_reduce", "gradients/all_reduce", -1, -1, "update", self.tiles, int(ring), cycles)
                prog.exchanges.append((step, "all_reduce", prog.ipu, prog.ipu, int(ring), cycles))
            for op in weighted:
                update_steps[op.op_id] = self._lower_update(prog, op)
        prog.update_segment = (first, prog.steps)
        return update_steps

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
                                           wmap.start, received, ex, ex + 1, op.op_id, self.options.precision))
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
